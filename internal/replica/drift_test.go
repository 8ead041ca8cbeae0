package replica

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestFeedVouchesOnlyToLookupsWithItsDrift: a replica run with MaxDrift
// 0.2 answers every poll and says its MaxDrift in each answer, but sends
// heartbeats, and pushes that vouch, only to a session whose newest request
// says it judges freshness with at least 0.2. A Lookup that says 0.05, or
// nothing (one of the release before), would take a heartbeat for fresher
// than it is.
func TestFeedVouchesOnlyToLookupsWithItsDrift(t *testing.T) {
	ftm := tm
	ftm.MaxDrift = 0.2
	st := lease.NewState(ftm.LogRetention)
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
	f := NewFeed(st, ftm)
	f.SetServes(func(time.Time) bool { return true })
	at := func(d time.Duration) time.Time { return base.Add(d) }
	poll := func(now time.Time, id uint64, drift float64) {
		t.Helper()
		if err := f.StepSync(now, id, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1, Heartbeats: true, MaxDrift: drift}); err != nil {
			t.Fatal(err)
		}
		for _, lm := range f.Ready() {
			if lm.Msg.MaxDrift != ftm.MaxDrift {
				t.Fatalf("answer to session %d says MaxDrift %g, want the replica's %g", lm.To, lm.Msg.MaxDrift, ftm.MaxDrift)
			}
		}
	}
	// beats runs the heartbeat rounds of [from, from+2×HeartbeatEvery) and
	// returns the sessions that got one.
	every := ftm.HeartbeatEvery()
	beats := func(from time.Duration) []uint64 {
		var to []uint64
		for d := from; d < from+2*every; d += 10 * time.Millisecond {
			if dl := f.NextDeadline(); !dl.IsZero() && !at(d).Before(dl) {
				f.PushDue(at(d))
			}
			for _, lm := range f.Ready() {
				if lm.Msg.Request != 0 && !slices.Contains(to, lm.To) {
					to = append(to, lm.To)
				}
			}
		}
		slices.Sort(to)
		return to
	}

	poll(base, 7, 0.2)
	poll(base, 8, 0.05)
	poll(base, 9, 0) // a Lookup that says no MaxDrift
	if got := beats(0); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("heartbeats to sessions %v, want [7]: only the Lookup judging with 0.2", got)
	}
	set(2)
	f.Changed(at(2 * every))
	for _, lm := range f.Ready() {
		if vouches := lm.Msg.Request != 0; vouches != (lm.To == 7) {
			t.Fatalf("push to session %d: Request %d", lm.To, lm.Msg.Request)
		}
	}
	// Session 8 has adopted the replica's MaxDrift and says so; session 7
	// now says less. The newest request rules.
	poll(at(3*every), 8, 0.2)
	poll(at(3*every), 7, 0.1)
	if got := beats(3 * every); !slices.Equal(got, []uint64{8}) {
		t.Fatalf("heartbeats to sessions %v, want [8]", got)
	}
}
