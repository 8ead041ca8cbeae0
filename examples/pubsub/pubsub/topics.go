package pubsub

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// leases is what topics needs of the Owner library (tests use a fake).
type leases interface {
	CheckLeaseNow(key keyspace.Key) (owner.LeaseNum, bool)
	CheckLeaseContinuous(key keyspace.Key, n owner.LeaseNum) bool
	Held() []owner.Lease
}

var _ leases = (*owner.Owner)(nil)

var (
	errNotOwner  = errors.New("not the owner")
	errLeaseLost = errors.New("lease lost")
	errMoving    = errors.New("moving: the topic's range is being handed over to another server; retry")
	errArriving  = errors.New("arriving: the topic's range is being taken over with its subscriptions; retry")
)

// Message is one published message; ID is unique within the topic.
type Message struct {
	ID   string `json:"id"`
	Data string `json:"data"`
}

// queued is a message not yet written to a subscription's stream; wait is
// the publish waiting for the write, if any.
type queued struct {
	Message
	wait *waiter
}

// waiter counts the streams a publish waits for. Guarded by topics.mu.
type waiter struct {
	n    int
	done chan struct{}
}

func (w *waiter) dec() {
	if w.n--; w.n == 0 {
		close(w.done)
	}
}

// sub is one subscription, soft state stored under the lease of its
// topic's key (C§3.2): the messages not yet written, the last ones written
// (a subscriber that reconnects names the last it received and gets the
// rest again), and the stream attached, if any.
type sub struct {
	id, topic string
	key       keyspace.Key
	lease     owner.LeaseNum
	queue     []queued
	sent      []Message // the last written, at most maxQueue
	stream    *stream   // attached, or nil
	inflight  bool      // a write of queue[0] is under way
	idleSince time.Time // when stream became nil
}

// stream is an open connection; its writer waits on wake, ends at stop.
type stream struct {
	wake chan struct{} // capacity 1
	stop string
}

func (st *stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// wireSub is a subscription as handed over.
type wireSub struct {
	ID    string    `json:"id"`
	Queue []Message `json:"queue"`
	Sent  []Message `json:"sent"`
}

// pendingTopic is a topic's subscriptions handed over for a range not
// granted here yet (C§2.1.2): a grant marked migrated takes them up.
type pendingTopic struct {
	key     keyspace.Key
	subs    []wireSub
	expires time.Time
}

// topics is the Owner's soft state. One mutex guards it all, held by each
// operation across the five steps of the Owner API (as in the kv example),
// which orders the operations on one server.
type topics struct {
	mu      sync.Mutex
	cond    *sync.Cond // broadcast when a write in flight ends
	leases  leases
	subs    map[string]map[string]*sub // topic → subscription ID → subscription
	moving  map[owner.Handover]bool
	pending map[string]pendingTopic
	// upheld is the held set as the upcalls reported it: state handed
	// over for a grant reported already came too late.
	upheld   map[owner.LeaseNum]keyspace.RangeSet
	taken    int // subscriptions taken up with migrated grants
	maxQueue int
	idleTTL  time.Duration
	now      func() time.Time
}

func newTopics(maxQueue int, idleTTL time.Duration) *topics {
	t := &topics{subs: map[string]map[string]*sub{}, moving: map[owner.Handover]bool{},
		pending: map[string]pendingTopic{}, upheld: map[owner.LeaseNum]keyspace.RangeSet{},
		maxQueue: maxQueue, idleTTL: idleTTL, now: time.Now}
	t.cond = sync.NewCond(&t.mu)
	return t
}

func (t *topics) setLeases(l leases) {
	t.mu.Lock()
	t.leases = l
	t.mu.Unlock()
}

// beginLocked runs steps (1) and (2) for an operation on topic: the lease
// the topic is held under, after taking up handed-over subscriptions and
// dropping those stored under any other lease.
func (t *topics) beginLocked(topic string, k keyspace.Key) (owner.LeaseNum, error) {
	if t.leases == nil {
		return owner.LeaseNum{}, errNotOwner
	}
	n, ok := t.leases.CheckLeaseNow(k) // (1) Is this the right server?
	if !ok {
		return n, errNotOwner
	}
	// (2) Validate stored state.
	if err := t.settleLocked(topic, k, n); err != nil {
		return n, err
	}
	now := t.now()
	for h := range t.moving {
		if h.Lease == n && h.Range.Contains(k) && now.Before(h.Deadline) {
			return n, errMoving
		}
	}
	for _, s := range t.subs[topic] {
		if s.lease != n || s.stream == nil && now.Sub(s.idleSince) > t.idleTTL {
			t.dropLocked(s, "lost")
		}
	}
	return n, nil
}

// attach opens a stream on subscription id of topic, making the
// subscription afresh (fresh) if this server holds none for it under the
// topic's lease. last is the ID of the last message the subscriber
// received: the messages written after it are written again.
func (t *topics) attach(topic, id, last string) (s *sub, st *stream, fresh bool, err error) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	var n owner.LeaseNum
	for {
		if n, err = t.beginLocked(topic, k); err != nil {
			return nil, nil, false, err
		}
		if s = t.subs[topic][id]; s == nil || !s.inflight {
			break
		}
		// Another stream is writing: end it, wait (its write deadline
		// bounds this), and start over, since the mutex was let go.
		if s.stream != nil {
			s.stream.stop = "replaced"
			s.stream.signal()
			t.detachLocked(s, s.stream)
		}
		t.cond.Wait()
	}
	// (3) Operate: the subscription is stored under n.
	if s != nil {
		if s.stream != nil {
			s.stream.stop = "replaced"
			s.stream.signal()
			t.detachLocked(s, s.stream)
		}
		if !t.rewindLocked(s, last) {
			t.dropLocked(s, "overflow")
			s = nil
		}
	}
	if s == nil {
		s, fresh = &sub{id: id, topic: topic, key: k, lease: n}, true
		t.putLocked(s)
	}
	st = &stream{wake: make(chan struct{}, 1)}
	s.stream = st
	if !t.leases.CheckLeaseContinuous(k, n) { // (4) Did the lease cover it?
		t.dropLocked(s, "lost")
		return nil, nil, false, errLeaseLost
	}
	return s, st, fresh, nil // (5) expose the result
}

func (t *topics) putLocked(s *sub) {
	if t.subs[s.topic] == nil {
		t.subs[s.topic] = map[string]*sub{}
	}
	t.subs[s.topic][s.id] = s
}

// rewindLocked puts the messages written after last back in front of the
// queue (all of them if last is empty); false means last is unknown, too
// far behind to resume.
func (t *topics) rewindLocked(s *sub, last string) bool {
	i := 0
	if last != "" {
		if i = slices.IndexFunc(s.sent, func(m Message) bool { return m.ID == last }) + 1; i == 0 && len(s.sent) > 0 {
			return false
		}
	}
	again := make([]queued, 0, len(s.sent)-i+len(s.queue))
	for _, m := range s.sent[i:] {
		again = append(again, queued{Message: m})
	}
	s.queue, s.sent = append(again, s.queue...), s.sent[:i]
	return true
}

// publish queues m for every subscription of topic and returns how many
// there are, how many have a stream attached, and a channel closed once m
// is written to those streams.
func (t *topics) publish(topic string, m Message) (subs, attached int, written <-chan struct{}, err error) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.beginLocked(topic, k)
	if err != nil {
		return 0, 0, nil, err
	}
	// (3) Operate: queue m for each subscription, all stored under n.
	w := &waiter{done: make(chan struct{})}
	for _, s := range t.subs[topic] {
		if len(s.queue) >= t.maxQueue {
			t.dropLocked(s, "overflow") // its subscriber resubscribes afresh
			continue
		}
		q := queued{Message: m}
		if s.stream != nil {
			q.wait = w
			w.n++
			s.stream.signal()
		}
		s.queue = append(s.queue, q)
		subs++
	}
	if attached = w.n; w.n == 0 {
		close(w.done)
	}
	// (4) Nothing has left yet: each writer checks the lease before it
	// writes (next).
	if !t.leases.CheckLeaseContinuous(k, n) {
		return 0, 0, nil, errLeaseLost
	}
	return subs, attached, w.done, nil // (5)
}

// next is the writer's step: the message to write next on st, or why the
// stream ends, or neither (wait for st.wake). A message leaves the server
// only while the lease it was queued under holds: step (4), per message.
func (t *topics) next(s *sub, st *stream) (m *Message, stop string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st.stop != "" {
		return nil, st.stop
	}
	if t.leases == nil || !t.leases.CheckLeaseContinuous(s.key, s.lease) {
		t.dropLocked(s, "lost")
		return nil, "lost"
	}
	if s.inflight || len(s.queue) == 0 || s.stream != st {
		return nil, ""
	}
	s.inflight = true
	msg := s.queue[0].Message
	return &msg, ""
}

// wrote ends the write next started: on success the message moves to
// sent; on failure the stream is detached and the message stays queued.
func (t *topics) wrote(s *sub, st *stream, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.inflight = false
	t.cond.Broadcast()
	switch {
	case len(s.queue) == 0: // dropped meanwhile
	case err != nil:
		t.detachLocked(s, st)
	default:
		if w := s.queue[0].wait; w != nil {
			w.dec()
		}
		if s.sent = append(s.sent, s.queue[0].Message); len(s.sent) > t.maxQueue {
			s.sent = s.sent[1:]
		}
		s.queue = s.queue[1:]
		if s.stream != nil {
			s.stream.signal()
		}
	}
}

// detach ends st: the subscription stays, its messages queue up for the
// subscriber's return (for idleTTL at most), and publishes stop waiting.
func (t *topics) detach(s *sub, st *stream) {
	t.mu.Lock()
	t.detachLocked(s, st)
	t.mu.Unlock()
}

func (t *topics) detachLocked(s *sub, st *stream) {
	if s.stream != st {
		return
	}
	s.stream, s.idleSince = nil, t.now()
	for i := range s.queue {
		if w := s.queue[i].wait; w != nil {
			w.dec()
			s.queue[i].wait = nil
		}
	}
}

// dropLocked forgets a subscription and ends its stream with reason.
func (t *topics) dropLocked(s *sub, reason string) {
	if st := s.stream; st != nil {
		t.detachLocked(s, st)
		st.stop = reason
		st.signal()
	}
	s.queue = nil
	if t.subs[s.topic][s.id] == s {
		if delete(t.subs[s.topic], s.id); len(t.subs[s.topic]) == 0 {
			delete(t.subs, s.topic)
		}
	}
}

// dropAll drops every subscription.
func (t *topics) dropAll(reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, byID := range t.subs {
		for _, s := range byID {
			t.dropLocked(s, reason)
		}
	}
}

// changed is the Owner's OnChange upcall: it takes up the subscriptions
// handed over with migrated grants, then sweeps.
func (t *topics) changed(ch owner.OwnershipChange) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases == nil {
		return
	}
	for _, r := range ch.Revoked { // within a change, revocations came first
		for n, rs := range t.upheld {
			if rs = rs.Subtract(keyspace.NewRangeSet(r)); rs.Empty() {
				delete(t.upheld, n)
			} else {
				t.upheld[n] = rs
			}
		}
	}
	for _, g := range ch.Granted {
		t.upheld[g.Num] = t.upheld[g.Num].Add(g.Range)
		t.takeUpLocked(g)
	}
	t.sweepLocked()
}

// sweep drops subscriptions under leases no longer held (their streams
// end "lost"; the subscribers resubscribe) or idle past idleTTL, finished
// handovers and expired pending topics. It runs on every upcall and every
// few seconds; correctness never rests on it: steps (2) and (4) catch the
// same state.
func (t *topics) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases != nil {
		t.sweepLocked()
	}
}

func (t *topics) sweepLocked() {
	now := t.now()
	live := func(k keyspace.Key, n owner.LeaseNum) bool {
		return t.upheld[n].Contains(k) || t.leases.CheckLeaseContinuous(k, n)
	}
	for _, byID := range t.subs {
		for _, s := range byID {
			if !live(s.key, s.lease) || s.stream == nil && now.Sub(s.idleSince) > t.idleTTL {
				t.dropLocked(s, "lost")
			}
		}
	}
	for h := range t.moving {
		if !now.Before(h.Deadline) || !live(h.Range.Start, h.Lease) {
			delete(t.moving, h)
		}
	}
	for topic, p := range t.pending {
		if !now.Before(p.expires) {
			delete(t.pending, topic)
		}
	}
}

// settleLocked decides the fate of subscriptions handed over for topic,
// held now under n, as the kv example's store does: taken up if n's grant
// is marked migrated, thrown away if the upcall reported it already (they
// came too late); until one of the two is known, errArriving.
func (t *topics) settleLocked(topic string, k keyspace.Key, n owner.LeaseNum) error {
	p, ok := t.pending[topic]
	if !ok {
		return nil
	}
	if !t.now().Before(p.expires) || t.upheld[n].Contains(k) {
		delete(t.pending, topic)
		return nil
	}
	for _, l := range t.leases.Held() {
		if l.Range.Contains(k) && l.Num == n && l.Migrated {
			t.takeUpLocked(l)
			return nil
		}
	}
	return errArriving
}

// takeUpLocked settles the pending topics in lease l's range: with a
// migrated grant their subscriptions become this server's, under l,
// detached until their subscribers reconnect; otherwise they are dropped.
func (t *topics) takeUpLocked(l owner.Lease) {
	for topic, p := range t.pending {
		if !l.Range.Contains(p.key) {
			continue
		}
		delete(t.pending, topic)
		for _, w := range p.subs {
			if !l.Migrated {
				break
			}
			if old := t.subs[topic][w.ID]; old != nil {
				t.dropLocked(old, "replaced")
			}
			s := &sub{id: w.ID, topic: topic, key: p.key, lease: l.Num, sent: w.Sent, idleSince: t.now()}
			for _, m := range w.Queue {
				s.queue = append(s.queue, queued{Message: m})
			}
			t.putLocked(s)
			t.taken++
		}
	}
}

// beginHandover ends the streams of h's range, waits for writes in flight,
// copies the range's subscriptions, and from then on refuses publishes and
// subscriptions on it (errMoving), so the copy stays complete.
func (t *topics) beginHandover(h owner.Handover) map[string][]wireSub {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.moving[h] = true
	for topic, p := range t.pending {
		if h.Range.Contains(p.key) {
			delete(t.pending, topic) // arrived after the grant: stale
		}
	}
	var in []*sub
	for _, byID := range t.subs {
		for _, s := range byID {
			if h.Range.Contains(s.key) && s.lease == h.Lease {
				in = append(in, s)
				if st := s.stream; st != nil {
					t.detachLocked(s, st)
					st.stop = "moved"
					st.signal()
				}
			}
		}
	}
	out := map[string][]wireSub{}
	for _, s := range in {
		for s.inflight {
			t.cond.Wait()
		}
		w := wireSub{ID: s.id, Sent: slices.Clone(s.sent)}
		for _, q := range s.queue {
			w.Queue = append(w.Queue, q.Message)
		}
		out[s.topic] = append(out[s.topic], w)
	}
	return out
}

// endHandover stops refusing a range whose handover failed.
func (t *topics) endHandover(h owner.Handover) {
	t.mu.Lock()
	delete(t.moving, h)
	t.mu.Unlock()
}

// receive keeps subscriptions handed over for topic until its range is
// granted here; if it is held here already, they came too late.
func (t *topics) receive(topic string, subs []wireSub, expires time.Time) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases != nil {
		if n, ok := t.leases.CheckLeaseNow(k); ok && t.upheld[n].Contains(k) {
			return
		}
	}
	t.pending[topic] = pendingTopic{key: k, subs: subs, expires: expires}
}

// counts returns the number of subscriptions, of attached streams, and of
// subscriptions taken up from handovers so far.
func (t *topics) counts() (subs, attached, taken int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, byID := range t.subs {
		for _, s := range byID {
			if subs++; s.stream != nil {
				attached++
			}
		}
	}
	return subs, attached, t.taken
}
