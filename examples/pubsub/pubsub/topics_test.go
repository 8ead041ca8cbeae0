package pubsub

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// fakeLeases holds one lease over the whole key space, or none.
type fakeLeases struct {
	n        owner.LeaseNum
	held     bool
	migrated bool
}

func (f *fakeLeases) CheckLeaseNow(keyspace.Key) (owner.LeaseNum, bool) { return f.n, f.held }
func (f *fakeLeases) CheckLeaseContinuous(_ keyspace.Key, n owner.LeaseNum) bool {
	return f.held && f.n == n
}
func (f *fakeLeases) Held() []owner.Lease {
	if !f.held {
		return nil
	}
	return []owner.Lease{{Range: keyspace.Full, Num: f.n, Expiry: time.Now().Add(time.Hour), Migrated: f.migrated}}
}
func (f *fakeLeases) grant(lgn keyspace.LGN) {
	f.n, f.held, f.migrated = owner.LeaseNum{Epoch: 1, LGN: lgn}, true, false
}

func newTestTopics(f *fakeLeases) *topics {
	return newTopics(f, 4, time.Minute)
}

// deliver writes every queued message of s to st as the stream's writer
// would, and returns their IDs and the reason the stream ended, if it did.
func deliver(tp *topics, s *sub, st *stream) (ids []string, stop string) {
	for {
		m, stop := tp.next(s, st)
		if m == nil {
			return ids, stop
		}
		ids = append(ids, m.ID)
		tp.wrote(s, st, nil)
	}
}

func mustAttach(t *testing.T, tp *topics, topic, id, last string, wantFresh bool) (*sub, *stream) {
	t.Helper()
	s, st, fresh, err := tp.attach(topic, id, last)
	if err != "" || fresh != wantFresh {
		t.Fatalf("attach %s/%s last %q: fresh %v, %v; want fresh %v", topic, id, last, fresh, err, wantFresh)
	}
	return s, st
}

func publish(t *testing.T, tp *topics, topic, id string) (subs int) {
	t.Helper()
	p, _, err := tp.publish(topic, Message{ID: id})
	if err != "" {
		t.Fatalf("publish %s %s: %v", topic, id, err)
	}
	return p.Subscribers
}

// TestTopicsFiveSteps checks the Owner API's duties on both operations: no
// lease, no subscription and no publish; a subscription stored under an
// older lease is stale, and its stream ends "lost"; a message never leaves
// once the lease it was queued under ended.
func TestTopicsFiveSteps(t *testing.T) {
	f := &fakeLeases{}
	tp := newTestTopics(f)
	if _, _, _, err := tp.attach("news", "a", ""); err != owner.RefusedNotOwner {
		t.Fatalf("attach without a lease: %v, want %v", err, owner.RefusedNotOwner)
	}
	if _, _, err := tp.publish("news", Message{ID: "m0"}); err != owner.RefusedNotOwner {
		t.Fatalf("publish without a lease: %v, want %v", err, owner.RefusedNotOwner)
	}
	f.grant(1)
	s, st := mustAttach(t, tp, "news", "a", "", true)
	if n := publish(t, tp, "news", "m1"); n != 1 {
		t.Fatalf("publish reached %d subscriptions, want 1", n)
	}
	if ids, stop := deliver(tp, s, st); len(ids) != 1 || ids[0] != "m1" || stop != "" {
		t.Fatalf("delivered %v (stop %q), want [m1]", ids, stop)
	}

	// Step (4) on the writer: the lease ends with a message queued.
	publish(t, tp, "news", "m2")
	f.held = false
	if ids, stop := deliver(tp, s, st); len(ids) != 0 || stop != "lost" {
		t.Fatalf("after the lease ended: delivered %v, stop %q; want nothing and \"lost\"", ids, stop)
	}

	// Step (2): a new lease; the subscription made under 1 is stale.
	f.grant(2)
	s1, st1 := mustAttach(t, tp, "news", "b", "", true)
	f.grant(3)
	if n := publish(t, tp, "news", "m3"); n != 0 {
		t.Fatalf("publish under lease 3 reached %d subscriptions made under 2, want 0", n)
	}
	if _, stop := deliver(tp, s1, st1); stop != "lost" {
		t.Fatalf("stale subscription's stream: stop %q, want \"lost\"", stop)
	}
	// Resubscribing under the new lease starts afresh.
	mustAttach(t, tp, "news", "b", "", true)
}

// TestTopicsResume checks a subscriber that reconnects naming the last
// message written to it gets the messages queued since, once; one that
// names any other starts afresh (it may have missed some); and a queue
// past its limit drops the subscription.
func TestTopicsResume(t *testing.T) {
	f := &fakeLeases{}
	f.grant(1)
	tp := newTestTopics(f)
	s, st := mustAttach(t, tp, "news", "a", "", true)
	for _, id := range []string{"m1", "m2"} {
		publish(t, tp, "news", id)
	}
	deliver(tp, s, st)
	tp.detach(s, st)
	publish(t, tp, "news", "m3") // queued while detached
	s, st = mustAttach(t, tp, "news", "a", "m2", false)
	if ids, _ := deliver(tp, s, st); len(ids) != 1 || ids[0] != "m3" {
		t.Fatalf("resumed after m2: delivered %v, want [m3]", ids)
	}
	if _, stop := tp.next(s, st); stop != "" {
		t.Fatalf("stream ended %q", stop)
	}
	// Naming m2 again: m3 was written since, so the subscriber may have
	// missed it; the old stream ends "replaced" and the new one is fresh.
	s2, _ := mustAttach(t, tp, "news", "a", "m2", true)
	if _, stop := tp.next(s, st); stop != "replaced" {
		t.Fatalf("the old stream: stop %q, want \"replaced\"", stop)
	}
	for i := range 5 { // a queue past its limit (4) drops the subscription
		tp.detach(s2, s2.stream)
		publish(t, tp, "news", string(rune('a'+i)))
	}
	if subs := len(tp.subs); subs != 0 {
		t.Fatalf("%d subscriptions after overflowing, want 0", subs)
	}
}

// TestTopicsHandover checks a planned move: the copy holds the messages not
// yet written, publishes are refused during the copy, and the next owner
// takes the subscription up only with a migrated grant, under its own
// lease.
func TestTopicsHandover(t *testing.T) {
	fa, fb := &fakeLeases{}, &fakeLeases{}
	fa.grant(1)
	a, b := newTestTopics(fa), newTestTopics(fb)
	s, st := mustAttach(t, a, "news", "x", "", true)
	publish(t, a, "news", "m1")
	deliver(a, s, st)
	publish(t, a, "news", "m2")
	h := owner.Handover{Range: keyspace.Full, Lease: fa.n, To: "b", Deadline: time.Now().Add(time.Minute)}
	copied := a.beginHandover(h)
	if _, stop := a.next(s, st); stop != "moved" {
		t.Fatalf("stream after the copy: stop %q, want \"moved\"", stop)
	}
	if _, _, err := a.publish("news", Message{ID: "m3"}); err != owner.RefusedMoving {
		t.Fatalf("publish during the handover: %v, want %v", err, owner.RefusedMoving)
	}
	ws := copied["news"]
	if len(ws) != 1 || len(ws[0].Queue) != 1 || ws[0].Queue[0].ID != "m2" || ws[0].Last != "m1" {
		t.Fatalf("copied %+v, want subscription x with m2 queued and m1 written last", copied)
	}
	// Handed over (HandoverDone is asynchronous): until the Owner gives the lease up, a
	// publish must still be refused, or it would reach nobody.
	if _, _, err := a.publish("news", Message{ID: "m2b"}); err != owner.RefusedMoving {
		t.Fatalf("publish after the handover, the lease not yet given up: %v, want %v", err, owner.RefusedMoving)
	}
	fa.held = false // given up: the sweep forgets the range and its subscriptions
	a.sweep(false)
	if subs, moving := len(a.subs), len(a.moving); subs != 0 || moving != 0 {
		t.Fatalf("%d subscriptions and %d handovers left once the lease was given up, want 0", subs, moving)
	}

	// Without a migrated grant the copy is thrown away.
	b.receive("news", ws)
	fb.grant(5)
	b.changed(owner.OwnershipChange{Granted: fb.Held()})
	if subs := len(b.subs); subs != 0 {
		t.Fatalf("a grant without migration took %d subscriptions up, want 0", subs)
	}
	// State that arrives once the range is held here came too late.
	fb.migrated = true
	b.receive("news", ws)
	publish(t, b, "news", "m0")
	if subs := len(b.subs); subs != 0 {
		t.Fatalf("state handed over after the grant was taken up: %d subscriptions, want 0", subs)
	}

	// With a migrated grant (seen by the request before the upcall), the
	// subscriber resumes after m1 and gets m2 then m3.
	fb.held = false
	b.receive("news", ws)
	fb.grant(6)
	if _, _, err := b.publish("news", Message{ID: "m3"}); err != owner.RefusedMoving {
		t.Fatalf("publish before the grant is known migrated: %v, want %v", err, owner.RefusedMoving)
	}
	fb.migrated = true
	publish(t, b, "news", "m3")
	s, st = mustAttach(t, b, "news", "x", "m1", false)
	if s.lease != fb.n {
		t.Fatalf("taken up under %v, want %v", s.lease, fb.n)
	}
	if ids, _ := deliver(b, s, st); len(ids) != 2 || ids[0] != "m2" || ids[1] != "m3" {
		t.Fatalf("after the move: delivered %v, want [m2 m3]", ids)
	}
}
