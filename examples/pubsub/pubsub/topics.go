package pubsub

import (
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// leases is what the topic table needs of the Owner library: the two local
// checks of the Owner API (P§2.2), and the held leases, to tell a grant that
// carries handed-over subscriptions (owner.Lease.Migrated).
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

// Message is one published message. ID is the publisher's, unique within
// the topic (Client.Publish draws a random one).
type Message struct {
	ID   string `json:"id"`
	Data string `json:"data"`
}

// queued is a message waiting to be written to one subscription's stream;
// wait, when set, is the publish waiting for the write.
type queued struct {
	Message
	wait *waiter
}

// waiter is a publish waiting for its message to be written to every
// stream attached when it was published. Guarded by topics.mu.
type waiter struct {
	n    int
	done chan struct{}
}

func (w *waiter) dec() {
	if w.n--; w.n == 0 {
		close(w.done)
	}
}

// sub is one subscription: the messages not yet written to its subscriber,
// the last ones written (so a subscriber that reconnects names the last it
// received and gets the rest again), and the stream attached, if any. It is
// soft state stored under the lease of its topic's key (C§3.2).
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

// stream is a subscriber's open connection; its writer goroutine waits on
// wake and ends with stop.
type stream struct {
	wake chan struct{} // capacity 1
	stop string        // set: the writer ends, telling the subscriber why
}

func (st *stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// pendingTopic is a topic's subscriptions handed over by another server
// for a range not granted here yet (C§2.1.2): taken up by a grant marked
// migrated, thrown away otherwise.
type pendingTopic struct {
	key     keyspace.Key
	from    owner.LeaseNum
	subs    []wireSub
	expires time.Time
}

// topics is the Owner's soft state: every topic's subscriptions, in memory,
// each stored under the lease it was made under. One mutex guards it all;
// each operation holds it across the five steps of the Owner API, which
// orders operations on one server as in the kv example.
type topics struct {
	mu      sync.Mutex
	cond    *sync.Cond // broadcast when a write in flight ends
	leases  leases
	subs    map[string]map[string]*sub // topic → subscription ID → subscription
	moving  map[owner.Handover]bool
	pending map[string]pendingTopic
	// upheld is the held set as the OnChange upcalls reported it (see the
	// kv example's store): subscriptions handed over for a lease whose
	// grant was reported already arrived too late.
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

// beginLocked runs steps (1) and (2) for an operation on topic: the lease it
// holds the topic under, after taking up handed-over subscriptions and
// dropping those stored under any other lease.
func (t *topics) beginLocked(topic string, k keyspace.Key) (owner.LeaseNum, error) {
	if t.leases == nil {
		return owner.LeaseNum{}, errNotOwner
	}
	// (1) Is this the right server?
	n, ok := t.leases.CheckLeaseNow(k)
	if !ok {
		return n, errNotOwner
	}
	// (2) Validate stored state.
	if err := t.settleLocked(topic, k, n); err != nil {
		return n, err
	}
	for h := range t.moving {
		if h.Lease == n && h.Range.Contains(k) && t.now().Before(h.Deadline) {
			return n, errMoving
		}
	}
	now := t.now()
	for _, s := range t.subs[topic] {
		if s.lease != n || s.stream == nil && now.Sub(s.idleSince) > t.idleTTL {
			t.dropLocked(s, "lost")
		}
	}
	return n, nil
}

// attach opens a stream on subscription id of topic, creating the
// subscription if this server holds none for it (fresh reports that: the
// subscriber may have missed messages). last is the ID of the last message
// the subscriber received; those written after it are written again.
func (t *topics) attach(topic, id, last string) (s *sub, st *stream, fresh bool, err error) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.beginLocked(topic, k)
	if err != nil {
		return nil, nil, false, err
	}
	// (3) Operate: the subscription is stored under n.
	s = t.subs[topic][id]
	if s != nil {
		if s.stream != nil {
			s.stream.stop = "replaced"
			s.stream.signal()
			s.stream = nil
		}
		for s.inflight {
			t.cond.Wait() // bounded by the stream's write deadline
		}
		if t.subs[topic][id] != s { // dropped meanwhile
			s = nil
		} else if !t.rewindLocked(s, last) {
			t.dropLocked(s, "overflow")
			s = nil
		}
	}
	if s == nil {
		s, fresh = &sub{id: id, topic: topic, key: k, lease: n}, true
		if t.subs[topic] == nil {
			t.subs[topic] = map[string]*sub{}
		}
		t.subs[topic][id] = s
	}
	st = &stream{wake: make(chan struct{}, 1)}
	s.stream = st
	// (4) Did the lease cover it? Else the subscription is stale already.
	if !t.leases.CheckLeaseContinuous(k, n) {
		t.dropLocked(s, "lost")
		return nil, nil, false, errLeaseLost
	}
	return s, st, fresh, nil // (5) expose the result
}

// rewindLocked puts the messages written after last back in front of the
// queue; it reports false if last is unknown (the subscriber is too far
// behind to resume).
func (t *topics) rewindLocked(s *sub, last string) bool {
	i := len(s.sent)
	if last != "" {
		for i = len(s.sent) - 1; i >= 0 && s.sent[i].ID != last; i-- {
		}
		if i < 0 && len(s.sent) > 0 {
			return false
		}
		i++
	} else {
		i = 0
	}
	again := make([]queued, 0, len(s.sent)-i+len(s.queue))
	for _, m := range s.sent[i:] {
		again = append(again, queued{Message: m})
	}
	s.queue = append(again, s.queue...)
	s.sent = s.sent[:i]
	return true
}

// publish queues m for every subscription of topic and returns the number
// of subscriptions, the number with a stream attached, and a channel
// closed once m is written to those streams.
func (t *topics) publish(topic string, m Message) (subs, attached int, written <-chan struct{}, err error) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.beginLocked(topic, k)
	if err != nil {
		return 0, 0, nil, err
	}
	// (3) Operate: queue m for each subscription stored under n.
	w := &waiter{done: make(chan struct{})}
	for _, s := range t.subs[topic] {
		if len(s.queue) >= t.maxQueue {
			t.dropLocked(s, "overflow") // the subscriber resubscribes afresh
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
	attached = w.n
	if w.n == 0 {
		close(w.done)
	}
	// (4) Nothing has left yet: each stream's writer checks the lease
	// before it writes (next). A publish whose lease ended is refused.
	if !t.leases.CheckLeaseContinuous(k, n) {
		return 0, 0, nil, errLeaseLost
	}
	return subs, attached, w.done, nil // (5)
}

// next is the writer's step: the message to write next on st, or why the
// stream ends, or neither (wait for st.wake). A message leaves the server
// only while the lease it was queued under holds (step 4).
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
	if s.inflight || len(s.queue) == 0 {
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
	if len(s.queue) == 0 { // dropped meanwhile
		return
	}
	if err != nil {
		t.detachLocked(s, st)
		return
	}
	q := s.queue[0]
	s.queue = s.queue[1:]
	if q.wait != nil {
		q.wait.dec()
	}
	if s.sent = append(s.sent, q.Message); len(s.sent) > t.maxQueue {
		s.sent = s.sent[len(s.sent)-t.maxQueue:]
	}
	if s.stream != nil {
		s.stream.signal()
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
		if s.queue[i].wait != nil {
			s.queue[i].wait.dec()
			s.queue[i].wait = nil
		}
	}
}

// dropLocked removes a subscription and ends its stream with reason.
func (t *topics) dropLocked(s *sub, reason string) {
	if st := s.stream; st != nil {
		t.detachLocked(s, st)
		st.stop = reason
		st.signal()
	}
	s.queue = nil
	if t.subs[s.topic][s.id] == s {
		delete(t.subs[s.topic], s.id)
		if len(t.subs[s.topic]) == 0 {
			delete(t.subs, s.topic)
		}
	}
}

// changed is the Owner's OnChange upcall: it takes up the subscriptions
// handed over with migrated grants, and drops what is stale.
func (t *topics) changed(ch owner.OwnershipChange) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases == nil {
		return
	}
	for _, r := range ch.Revoked {
		gone := keyspace.NewRangeSet(r)
		for n, rs := range t.upheld {
			if rs = rs.Subtract(gone); rs.Empty() {
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
// end with "lost", and the subscribers resubscribe), subscriptions idle
// past idleTTL, finished handovers and expired pending topics. Correctness
// never rests on it: steps (2) and (4) catch the same state.
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
// held now under n (as in the kv example's store): taken up if n's grant
// is marked migrated, thrown away if the upcall reported it without;
// until one of the two is known, the operation waits (errArriving).
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
// detached until their subscribers reconnect.
func (t *topics) takeUpLocked(l owner.Lease) {
	for topic, p := range t.pending {
		if !l.Range.Contains(p.key) {
			continue
		}
		delete(t.pending, topic)
		if !l.Migrated {
			continue
		}
		for _, w := range p.subs {
			if old := t.subs[topic][w.ID]; old != nil {
				t.dropLocked(old, "replaced")
			}
			s := &sub{id: w.ID, topic: topic, key: p.key, lease: l.Num, sent: w.Sent, idleSince: t.now()}
			for _, m := range w.Queue {
				s.queue = append(s.queue, queued{Message: m})
			}
			if t.subs[topic] == nil {
				t.subs[topic] = map[string]*sub{}
			}
			t.subs[topic][w.ID] = s
			t.taken++
		}
	}
}

// wireSub is a subscription as handed over.
type wireSub struct {
	ID    string    `json:"id"`
	Queue []Message `json:"queue"`
	Sent  []Message `json:"sent"`
}

// beginHandover ends the streams of h's range, waits for writes in flight,
// copies the range's subscriptions, and from then on refuses publishes and
// subscriptions on it (errMoving), so the copy stays complete. The
// subscribers reconnect, and find their subscriptions at the next owner.
func (t *topics) beginHandover(h owner.Handover) map[string][]wireSub {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases == nil {
		return nil
	}
	t.moving[h] = true
	for topic, p := range t.pending {
		if h.Range.Contains(p.key) {
			delete(t.pending, topic) // arrived after the grant: stale
		}
	}
	out := map[string][]wireSub{}
	for topic, byID := range t.subs {
		for _, s := range byID {
			if !h.Range.Contains(s.key) || s.lease != h.Lease {
				continue
			}
			if st := s.stream; st != nil {
				t.detachLocked(s, st)
				st.stop = "moved"
				st.signal()
			}
			for s.inflight {
				t.cond.Wait()
			}
			w := wireSub{ID: s.id, Sent: append([]Message(nil), s.sent...)}
			for _, q := range s.queue {
				w.Queue = append(w.Queue, q.Message)
			}
			out[topic] = append(out[topic], w)
		}
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
// granted here.
func (t *topics) receive(topic string, from owner.LeaseNum, subs []wireSub, expires time.Time) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases != nil {
		if n, ok := t.leases.CheckLeaseNow(k); ok && t.upheld[n].Contains(k) {
			return // granted already without them: stale
		}
	}
	t.pending[topic] = pendingTopic{key: k, from: from, subs: subs, expires: expires}
}

// counts returns the number of subscriptions and of attached streams.
func (t *topics) counts() (subs, attached int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, byID := range t.subs {
		for _, s := range byID {
			subs++
			if s.stream != nil {
				attached++
			}
		}
	}
	return subs, attached
}

// takenUp returns how many handed-over subscriptions were taken up.
func (t *topics) takenUp() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.taken
}

// dropAll ends every stream with reason and forgets every subscription.
func (t *topics) dropAll(reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, byID := range t.subs {
		for _, s := range byID {
			t.dropLocked(s, reason)
		}
	}
}
