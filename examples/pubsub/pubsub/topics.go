package pubsub

import (
	"maps"
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

// Message is one published message; ID is unique within the topic.
type Message struct {
	ID   string `json:"id"`
	Data string `json:"data"`
}

// queued is a message not yet written to a subscription's stream; wait,
// if set, counts the streams its publish still waits for (guarded by
// topics.mu): done closes when the last is written or detached.
type queued struct {
	Message
	wait *waiter
}

type waiter struct {
	n    int
	done chan struct{}
}

func (w *waiter) dec() {
	if w != nil {
		if w.n--; w.n == 0 {
			close(w.done)
		}
	}
}

// sub is one subscription, soft state stored under the lease of its
// topic's key (C§3.2): the messages not yet written, the ID of the last
// one written (a subscriber reconnecting naming it resumes), and the
// stream attached, if any. A handover copies the exported fields.
type sub struct {
	ID        string   `json:"id"`
	Queue     []queued `json:"queue"` // each as its Message
	Last      string   `json:"last"`
	topic     string
	key       keyspace.Key
	lease     owner.LeaseNum
	stream    *stream
	inflight  bool      // a write of Queue[0] is under way
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

// pendingTopic is a topic's subscriptions handed over for a range not
// granted here yet (C§2.1.2): a grant marked Migrated takes them up.
type pendingTopic struct {
	subs    []sub
	expires time.Time
}

// topics is the Owner's soft state. One mutex guards it all, held by each
// operation across the Owner API's five steps: it orders the operations.
type topics struct {
	mu       sync.Mutex
	cond     *sync.Cond // broadcast when a write in flight ends
	leases   leases
	subs     map[string]map[string]*sub // topic → subscription ID → subscription
	moving   map[owner.Handover]bool
	pending  map[string]pendingTopic
	maxQueue int
	idleTTL  time.Duration
}

func newTopics(l leases, maxQueue int, idleTTL time.Duration) *topics {
	t := &topics{leases: l, subs: map[string]map[string]*sub{}, moving: map[owner.Handover]bool{},
		pending: map[string]pendingTopic{}, maxQueue: maxQueue, idleTTL: idleTTL}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// beginLocked runs steps (1) and (2) for an operation on topic; like the
// operations, it answers why it refuses, in the Owner contract's terms.
func (t *topics) beginLocked(topic string, k keyspace.Key) (owner.LeaseNum, owner.Refusal) {
	// Duty: check before acting (step 1, CheckLeaseNow).
	n, ok := t.leases.CheckLeaseNow(k)
	if !ok {
		return n, owner.RefusedNotOwner
	}
	// Step (2). A grant marked Migrated takes up the subscriptions handed
	// over for the topic; Migrated shows only until the grant's first
	// renewal, so until the OnChange upcall settles them, it is moving.
	if _, ok := t.pending[topic]; ok {
		for _, l := range t.leases.Held() {
			if l.Num == n && l.Range.Contains(k) && l.Migrated {
				t.takeUpLocked(l)
			}
		}
		if _, ok := t.pending[topic]; ok {
			return n, owner.RefusedMoving
		}
	}
	now := time.Now()
	for h := range t.moving {
		if h.Lease == n && h.Range.Contains(k) && now.Before(h.Deadline) {
			return n, owner.RefusedMoving
		}
	}
	for _, s := range t.subs[topic] {
		t.dropStaleLocked(s, now)
	}
	return n, ""
}

// dropStaleLocked drops s if its lease ended or it idled past idleTTL.
// Duty: state stored under any other LeaseNum is lost.
func (t *topics) dropStaleLocked(s *sub, now time.Time) {
	if !t.leases.CheckLeaseContinuous(s.key, s.lease) || s.stream == nil && now.Sub(s.idleSince) > t.idleTTL {
		t.dropLocked(s, "lost")
	}
}

// attach opens a stream on subscription id of topic, made afresh (fresh)
// unless held under the topic's lease with last its last message written.
func (t *topics) attach(topic, id, last string) (s *sub, st *stream, fresh bool, why owner.Refusal) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	var n owner.LeaseNum
	for { // (1), (2); then wait for a write in flight on an older stream
		if n, why = t.beginLocked(topic, k); why != "" {
			return nil, nil, false, why
		}
		if s = t.subs[topic][id]; s != nil {
			t.endLocked(s, "replaced") // one stream per subscription
		}
		if s == nil || !s.inflight {
			break
		}
		t.cond.Wait()
	}
	// (3) Operate: the subscription is stored under n.
	if s != nil && s.Last != last { // the subscriber missed messages: afresh
		t.dropLocked(s, "replaced")
		s = nil
	}
	if s == nil {
		s, fresh = &sub{ID: id, topic: topic, key: k, lease: n}, true
		t.putLocked(s)
	}
	st = &stream{wake: make(chan struct{}, 1)}
	s.stream = st
	// Duty: check after acting (step 4, CheckLeaseContinuous).
	if !t.leases.CheckLeaseContinuous(k, n) {
		t.dropLocked(s, "lost")
		return nil, nil, false, owner.RefusedNotOwner
	}
	return s, st, fresh, "" // (5)
}

func (t *topics) putLocked(s *sub) {
	if t.subs[s.topic] == nil {
		t.subs[s.topic] = map[string]*sub{}
	}
	t.subs[s.topic][s.ID] = s
}

// publish queues m for every subscription of topic; written closes once m
// is written to every stream attached.
func (t *topics) publish(topic string, m Message) (p Published, written <-chan struct{}, why owner.Refusal) {
	k := keyspace.KeyOf(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	n, why := t.beginLocked(topic, k) // (1), (2)
	if why != "" {
		return p, nil, why
	}
	// (3) Operate: queue m for each subscription, all stored under n.
	w := &waiter{done: make(chan struct{})}
	for _, s := range t.subs[topic] {
		if len(s.Queue) >= t.maxQueue {
			t.dropLocked(s, "overflow") // its subscriber resubscribes afresh
			continue
		}
		q := queued{Message: m}
		if s.stream != nil {
			q.wait = w
			w.n++
			s.stream.signal()
		}
		s.Queue = append(s.Queue, q)
		p.Subscribers++
	}
	if p.ID, p.Attached = m.ID, w.n; w.n == 0 {
		close(w.done)
	}
	// Duty: check after acting (step 4). Nothing has left yet; each
	// writer checks again before each message it writes (next).
	if !t.leases.CheckLeaseContinuous(k, n) {
		return Published{}, nil, owner.RefusedNotOwner
	}
	return p, w.done, "" // (5)
}

// next is the writer's step: the message to write next on st, or why the
// stream ends, or neither (wait for st.wake).
func (t *topics) next(s *sub, st *stream) (m *Message, stop string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st.stop != "" {
		return nil, st.stop
	}
	// Duty: CheckLeaseContinuous before anything leaves the server: a
	// message leaves only while the lease it was queued under holds.
	if !t.leases.CheckLeaseContinuous(s.key, s.lease) {
		t.dropLocked(s, "lost")
		return nil, "lost"
	}
	if s.inflight || len(s.Queue) == 0 || s.stream != st {
		return nil, ""
	}
	s.inflight = true
	return &s.Queue[0].Message, "" // never changed once queued
}

// wrote ends the write next started: on success the message is done; on
// failure the stream is detached and the message stays queued.
func (t *topics) wrote(s *sub, st *stream, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.inflight = false
	t.cond.Broadcast()
	switch {
	case len(s.Queue) == 0: // dropped meanwhile
	case err != nil:
		t.detachLocked(s, st)
	default:
		s.Queue[0].wait.dec()
		s.Last, s.Queue = s.Queue[0].ID, s.Queue[1:]
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
	s.stream, s.idleSince = nil, time.Now()
	for i := range s.Queue {
		s.Queue[i].wait.dec()
		s.Queue[i].wait = nil
	}
}

// endLocked ends s's stream, if any, with reason.
func (t *topics) endLocked(s *sub, reason string) {
	if st := s.stream; st != nil {
		t.detachLocked(s, st)
		st.stop = reason
		st.signal()
	}
}

// dropLocked forgets a subscription and ends its stream with reason.
func (t *topics) dropLocked(s *sub, reason string) {
	t.endLocked(s, reason)
	s.Queue = nil
	if t.subs[s.topic][s.ID] == s {
		if delete(t.subs[s.topic], s.ID); len(t.subs[s.topic]) == 0 {
			delete(t.subs, s.topic)
		}
	}
}

// sweep frees memory (stale subscriptions, finished handovers, expired
// pending topics; with all, every subscription) on every upcall and every
// few seconds. Duty: never rely on OnChange for correctness — steps (2)
// and (4) catch the same state whether or not the sweep ran.
func (t *topics) sweep(all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for _, byID := range t.subs {
		for _, s := range byID {
			if all {
				t.dropLocked(s, "closing")
			} else {
				t.dropStaleLocked(s, now)
			}
		}
	}
	maps.DeleteFunc(t.moving, func(h owner.Handover, _ bool) bool {
		return !now.Before(h.Deadline) || !t.leases.CheckLeaseContinuous(h.Range.Start, h.Lease)
	})
	maps.DeleteFunc(t.pending, func(_ string, p pendingTopic) bool { return !now.Before(p.expires) })
}

// changed is the OnChange upcall: the grants take up the handed-over
// subscriptions, then a sweep. Duty: never rely on OnChange; step (2) does
// the same.
func (t *topics) changed(ch owner.OwnershipChange) {
	t.mu.Lock()
	for _, g := range ch.Granted {
		t.takeUpLocked(g)
	}
	t.mu.Unlock()
	t.sweep(false)
}

// takeUpLocked settles the pending topics in l's range: a migrated grant
// makes their subscriptions this server's, under l; any other drops them.
func (t *topics) takeUpLocked(l owner.Lease) {
	for topic, p := range t.pending {
		k := keyspace.KeyOf(topic)
		if !l.Range.Contains(k) {
			continue
		}
		if delete(t.pending, topic); !l.Migrated {
			continue
		}
		for i := range p.subs {
			s := &p.subs[i]
			if old := t.subs[topic][s.ID]; old != nil {
				t.dropLocked(old, "replaced")
			}
			s.topic, s.key, s.lease, s.idleSince = topic, k, l.Num, time.Now()
			t.putLocked(s)
		}
	}
}

// beginHandover ends the streams of h's range, waits for writes in flight,
// copies its subscriptions, and refuses it from then on (moving).
func (t *topics) beginHandover(h owner.Handover) map[string][]sub {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.moving[h] = true
	out := map[string][]sub{}
	for _, byID := range t.subs {
		for _, s := range byID {
			if !h.Range.Contains(s.key) || s.lease != h.Lease {
				continue
			}
			t.endLocked(s, "moved")
			for s.inflight {
				t.cond.Wait()
			}
			out[s.topic] = append(out[s.topic], *s) // its stream ended: no waiters
		}
	}
	return out
}

// abortHandover serves h's range again after a failed handover. One
// handed over stays refused until the Owner gives it up (HandoverDone is
// asynchronous); the sweep then drops it and its subscriptions.
func (t *topics) abortHandover(h owner.Handover) {
	t.mu.Lock()
	delete(t.moving, h)
	t.mu.Unlock()
}

// receive keeps subs, handed over for topic, until its range is granted
// here. They are sent before the grant: once it is held, they are late.
func (t *topics) receive(topic string, subs []sub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Duty: check before acting — taken only for a topic not held here.
	if _, held := t.leases.CheckLeaseNow(keyspace.KeyOf(topic)); !held {
		t.pending[topic] = pendingTopic{subs: subs, expires: time.Now().Add(pendingTTL)}
	}
}
