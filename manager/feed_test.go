package manager

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestFeedBehindWaits: a replica whose table is behind a Lookup's copy (the
// Lookup last synced with a replica further ahead) answers nothing until it
// has caught up, then pushes from the Lookup's LSN: a copy never moves back.
func TestFeedBehindWaits(t *testing.T) {
	st := NewState(tm.LogRetention)
	set := func(lgn keyspace.LGN) {
		t.Helper()
		if err := st.Apply(base, []Change{{Op: OpSet, NS: DefaultNamespace, Range: keyspace.Full,
			Entry: leasetable.Entry{Owner: "a", Addr: "a:1", LGN: lgn}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Apply(base, []Change{{Op: OpEpoch, Epoch: epoch}, {Op: OpNamespace, NS: DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	set(1) // LSN 1
	f := NewFeed(st, tm)
	if err := f.StepSync(base, 7, &protocol.SyncRequest{Namespace: DefaultNamespace, ID: 1, Epoch: epoch, LSN: 3}); err != nil {
		t.Fatal(err)
	}
	f.Push()
	if got := f.Ready(); len(got) != 0 {
		t.Fatalf("a replica at LSN 1 answered a copy at LSN 3: %+v", got)
	}
	set(2) // LSN 2: still behind
	f.Push()
	if got := f.Ready(); len(got) != 0 {
		t.Fatalf("a replica at LSN 2 pushed to a copy at LSN 3: %+v", got)
	}
	set(3)
	set(4) // LSN 4
	f.Push()
	got := f.Ready()
	if len(got) != 1 || got[0].To != 7 {
		t.Fatalf("after catching up: %+v, want one push to session 7", got)
	}
	if u := got[0].Msg.Update; u.Snapshot || u.From != 3 || u.To != 4 || len(u.Changes) != 1 {
		t.Fatalf("push %+v, want the one change after LSN 3", u)
	}
}

// feedWith returns a Feed over a State whose table has been split into
// segments pieces, each granted, and sessions Lookups synced at its LSN.
func feedWith(tb testing.TB, segments, sessions int) (*State, *Feed) {
	st := NewState(tm.LogRetention)
	if err := st.Apply(base, []Change{{Op: OpEpoch, Epoch: epoch}, {Op: OpNamespace, NS: DefaultNamespace}}); err != nil {
		tb.Fatal(err)
	}
	grantAll(tb, st, segments, 1)
	f := NewFeed(st, tm)
	for id := range uint64(sessions) {
		req := &protocol.SyncRequest{Namespace: DefaultNamespace, ID: 1, Epoch: epoch, LSN: st.Table(DefaultNamespace).LSN()}
		if err := f.StepSync(base, id+1, req); err != nil {
			tb.Fatal(err)
		}
	}
	f.Ready()
	return st, f
}

// grantAll grants each of n equal pieces of the key space anew, in one
// entry: n changes.
func grantAll(tb testing.TB, st *State, n int, lgn keyspace.LGN) {
	step := keyspace.Key(^uint64(0)/uint64(n) + 1)
	var chs []Change
	for i := range n {
		r := keyspace.Range{Start: keyspace.Key(i) * step, End: keyspace.Key(i+1) * step}
		if i == n-1 {
			r.End = 0
		}
		chs = append(chs, Change{Op: OpSet, NS: DefaultNamespace, Range: r,
			Entry: leasetable.Entry{Owner: fmt.Sprintf("owner-%d", i%100), Addr: "10.0.0.1:7000", LGN: lgn + keyspace.LGN(i)}})
	}
	if err := st.Apply(base, chs); err != nil {
		tb.Fatal(err)
	}
}

// TestFeedPushSharesOneUpdate: a push round sends every session at one LSN
// the same delta (or snapshot), not a copy each. With a copy per session, a
// Manager with thousands of Lookups held one copy of every big delta per
// Lookup (24 GB at 1,000 Owners and 4,000 Lookups in the simulation).
func TestFeedPushSharesOneUpdate(t *testing.T) {
	const segments, sessions = 2000, 300
	for _, snap := range []bool{false, true} {
		t.Run(map[bool]string{false: "delta", true: "snapshot"}[snap], func(t *testing.T) {
			st, f := feedWith(t, segments, sessions)
			grantAll(t, st, segments, 10000) // a delta of 2,000 changes
			if snap {
				grantAll(t, st, segments, 20000) // 4,000 changes > 2,000 segments: a snapshot
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			f.Push()
			runtime.ReadMemStats(&after)
			out := f.Ready()
			if len(out) != sessions {
				t.Fatalf("%d messages for %d sessions", len(out), sessions)
			}
			first := out[0].Msg.Update
			if first.Snapshot != snap || (!snap && len(first.Changes) != segments) || (snap && len(first.Segments) != segments) {
				t.Fatalf("pushed snapshot=%v with %d changes, %d segments", first.Snapshot, len(first.Changes), len(first.Segments))
			}
			for _, m := range out {
				u := m.Msg.Update
				if snap && &u.Segments[0] != &first.Segments[0] || !snap && &u.Changes[0] != &first.Changes[0] {
					t.Fatalf("session %d got its own copy of the update", m.To)
				}
			}
			// One copy of the update (about 150 KB) and a small message per
			// session; a copy each would be 300 × 150 KB = 45 MB.
			perSession := float64(after.TotalAlloc-before.TotalAlloc) / sessions
			if perSession > 2000 {
				t.Errorf("Push allocated %.0f bytes per session; want a few hundred (one shared update)", perSession)
			}
			t.Logf("Push: %.0f bytes per session", perSession)
		})
	}
}

// BenchmarkFeedPush: one push round of a 2,000-change delta to 1,000
// Lookup sessions. B/op is what the round allocates: a few hundred bytes
// per session when they share the delta, 160 KB per session with a copy
// each.
func BenchmarkFeedPush(b *testing.B) {
	st, f := feedWith(b, 2000, 1000)
	lgn := keyspace.LGN(10000)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		grantAll(b, st, 2000, lgn)
		lgn += 2000
		b.StartTimer()
		f.Push()
		f.Ready()
	}
}
