package replica

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestFeedHeartbeats: a session that takes heartbeats and has been sent
// nothing for HeartbeatEvery gets an empty delta at the table's LSN naming
// its newest request and the time since it arrived; a push to it vouches
// the same way. Only while the replica could answer a poll; never to a
// session that takes none.
func TestFeedHeartbeats(t *testing.T) {
	st := lease.NewState(tm.LogRetention)
	if err := st.Apply(base, []lease.Change{{Op: lease.OpEpoch, Epoch: epoch}, {Op: lease.OpNamespace, NS: protocol.DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	set := func(lgn keyspace.LGN) {
		t.Helper()
		if err := st.Apply(base, []lease.Change{{Op: lease.OpSet, NS: protocol.DefaultNamespace, Range: keyspace.Full,
			Entry: leasetable.Entry{Owner: "a", Addr: "a:1", LGN: lgn}}}); err != nil {
			t.Fatal(err)
		}
	}
	set(1)
	serving := true
	f := NewFeed(st, tm)
	f.SetServes(func(time.Time) bool { return serving })
	at := func(d time.Duration) time.Time { return base.Add(d) }
	for id, beats := range map[uint64]bool{7: true, 8: false} {
		if err := f.StepSync(base, id, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 3, Heartbeats: beats, MaxDrift: tm.MaxDrift}); err != nil {
			t.Fatal(err)
		}
	}
	f.Ready() // the answers
	every := tm.HeartbeatEvery()
	run := func(now time.Time) []LookupMessage {
		if d := f.NextDeadline(); !d.IsZero() && !now.Before(d) {
			f.PushDue(now)
		}
		return f.Ready()
	}
	// The round runs every HeartbeatEvery/4: nothing before the session
	// has been idle for HeartbeatEvery.
	var got []LookupMessage
	var when time.Time
	for d := time.Duration(0); d <= 2*every && len(got) == 0; d += 10 * time.Millisecond {
		when, got = at(d), run(at(d))
	}
	if len(got) != 1 || got[0].To != 7 {
		t.Fatalf("heartbeats %+v, want one, to session 7", got)
	}
	if d := when.Sub(base); d < every || d > every+every/4+10*time.Millisecond {
		t.Fatalf("heartbeat after %v idle, want within [%v, %v]", d, every, every+every/4)
	}
	m := got[0].Msg
	if m.ID != 0 || m.Request != 3 || m.SinceRequest != when.Sub(base) || m.Update.From != 1 || m.Update.To != 1 || len(m.Update.Changes) != 0 {
		t.Fatalf("heartbeat %+v, want an empty delta at LSN 1 naming request 3, %v after it", m, when.Sub(base))
	}
	// A push vouches too, to the session that takes heartbeats only.
	set(2)
	f.Changed(when.Add(time.Millisecond))
	for _, lm := range f.Ready() {
		if vouches := lm.Msg.Request != 0; vouches != (lm.To == 7) {
			t.Fatalf("push to session %d: Request %d", lm.To, lm.Msg.Request)
		}
	}
	// A replica that could not answer a poll sends no heartbeat, and its
	// pushes vouch for nothing.
	serving = false
	for d := when.Sub(base); d < 10*every; d += 10 * time.Millisecond {
		if got := run(at(d)); len(got) != 0 {
			t.Fatalf("a replica that may not serve sent %+v", got[0].Msg)
		}
	}
	set(3)
	f.Changed(at(10 * every))
	for _, lm := range f.Ready() {
		if lm.Msg.Request != 0 {
			t.Fatalf("a replica that may not serve vouched in a push: %+v", lm.Msg)
		}
	}
	// The broken rule sends them all the same.
	f.unserved = true
	var beats int
	for d := 10 * every; d < 12*every; d += 10 * time.Millisecond {
		beats += len(run(at(d)))
	}
	if beats == 0 {
		t.Fatal("HeartbeatUnserved sent no heartbeat")
	}
}

// TestFeedKeepsHeartbeatSessions: a session that takes heartbeats polls
// seldom, so the Feed keeps it LookupPollMax longer than one that polls
// every Sync; both go in the end.
func TestFeedKeepsHeartbeatSessions(t *testing.T) {
	st := lease.NewState(tm.LogRetention)
	if err := st.Apply(base, []lease.Change{{Op: lease.OpEpoch, Epoch: epoch}, {Op: lease.OpNamespace, NS: protocol.DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	f := NewFeed(st, tm)
	for id, beats := range map[uint64]bool{7: true, 8: false} {
		if err := f.StepSync(base, id, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1, Heartbeats: beats, MaxDrift: tm.MaxDrift}); err != nil {
			t.Fatal(err)
		}
	}
	f.Tick(base.Add(2*tm.SyncTimeout + time.Millisecond))
	if n := f.Lookups(protocol.DefaultNamespace); n != 1 {
		t.Fatalf("%d sessions after two SyncTimeouts of silence, want the one that takes heartbeats", n)
	}
	f.Tick(base.Add(2*tm.SyncTimeout + tm.LookupPollMax() + time.Millisecond))
	if n := f.Lookups(protocol.DefaultNamespace); n != 0 || len(f.beats[protocol.DefaultNamespace]) != 0 {
		t.Fatalf("%d sessions after LookupPollMax more, want none", n)
	}
}
