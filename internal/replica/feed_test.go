package replica

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestFeedBehindWaits: a replica whose table is behind a Lookup's copy (the
// Lookup last synced with a replica further ahead) answers nothing until it
// has caught up, then pushes from the Lookup's LSN: a copy never moves back.
func TestFeedBehindWaits(t *testing.T) {
	st := lease.NewState(tm.LogRetention)
	set := func(lgn keyspace.LGN) {
		t.Helper()
		if err := st.Apply(base, []lease.Change{{Op: lease.OpSet, NS: protocol.DefaultNamespace, Range: keyspace.Full,
			Entry: leasetable.Entry{Owner: "a", Addr: "a:1", LGN: lgn}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Apply(base, []lease.Change{{Op: lease.OpEpoch, Epoch: epoch}, {Op: lease.OpNamespace, NS: protocol.DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	set(1) // LSN 1
	f := NewFeed(st, tm)
	if err := f.StepSync(base, 7, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1, Epoch: epoch, LSN: 3}); err != nil {
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
func feedWith(tb testing.TB, segments, sessions int) (*lease.State, *Feed) {
	st := lease.NewState(tm.LogRetention)
	if err := st.Apply(base, []lease.Change{{Op: lease.OpEpoch, Epoch: epoch}, {Op: lease.OpNamespace, NS: protocol.DefaultNamespace}}); err != nil {
		tb.Fatal(err)
	}
	grantAll(tb, st, segments, 1)
	f := NewFeed(st, tm)
	for id := range uint64(sessions) {
		req := &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1, Epoch: epoch, LSN: st.Table(protocol.DefaultNamespace).LSN()}
		if err := f.StepSync(base, id+1, req); err != nil {
			tb.Fatal(err)
		}
	}
	f.Ready()
	return st, f
}

// grantAll grants each of n equal pieces of the key space anew, in one
// entry: n changes.
func grantAll(tb testing.TB, st *lease.State, n int, lgn keyspace.LGN) {
	step := keyspace.Key(^uint64(0)/uint64(n) + 1)
	var chs []lease.Change
	for i := range n {
		r := keyspace.Range{Start: keyspace.Key(i) * step, End: keyspace.Key(i+1) * step}
		if i == n-1 {
			r.End = 0
		}
		chs = append(chs, lease.Change{Op: lease.OpSet, NS: protocol.DefaultNamespace, Range: r,
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

// coalesceFeed returns a Feed coalescing by every over a table of 16
// granted pieces, sessions 1..3 synced at its LSN, and a copy of the
// table as a Lookup holds it (the View session 1 keeps).
func coalesceFeed(t *testing.T, every time.Duration) (*lease.State, *Feed, *leasetable.View) {
	t.Helper()
	st, f := feedWith(t, 16, 3)
	f.SetPushEvery(every)
	v := leasetable.NewView()
	if _, err := v.Apply(st.Table(protocol.DefaultNamespace).Snapshot()); err != nil {
		t.Fatal(err)
	}
	return st, f, v
}

// regrantFirst regrants one piece of the key space with a fresh LGN: one change.
func regrantFirst(t *testing.T, st *lease.State, lgn keyspace.LGN) {
	t.Helper()
	r := keyspace.Range{Start: 0, End: keyspace.Key(1) << 60}
	if err := st.Apply(base, []lease.Change{{Op: lease.OpSet, NS: protocol.DefaultNamespace, Range: r,
		Entry: leasetable.Entry{Owner: "owner-x", Addr: "10.0.0.2:7000", LGN: lgn}}}); err != nil {
		t.Fatal(err)
	}
}

// pushRound checks that msgs is one push round to sessions 1..3, each the
// delta from..to, and applies session 1's to v.
func pushRound(t *testing.T, msgs []LookupMessage, from, to keyspace.LSN, v *leasetable.View) {
	t.Helper()
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want a push round to the 3 sessions: %+v", len(msgs), msgs)
	}
	for i, m := range msgs {
		u := m.Msg.Update
		if m.To != uint64(i+1) || m.Msg.ID != 0 || u.Snapshot || u.From != from || u.To != to || len(u.Changes) != int(to-from) {
			t.Fatalf("message %d: to %d, ID %d, update %d..%d (snapshot %v, %d changes); want a push to %d of the delta %d..%d",
				i, m.To, m.Msg.ID, u.From, u.To, u.Snapshot, len(u.Changes), i+1, from, to)
		}
	}
	if _, err := v.Apply(msgs[0].Msg.Update); err != nil {
		t.Fatal(err)
	}
}

// TestFeedCoalescesPushes: a push round runs at once when the namespace's
// last round was PushEvery ago or more, and otherwise at that round +
// PushEvery, carrying everything applied meanwhile; NextDeadline reports
// when; a sync is answered at once meanwhile; the Lookup's copy ends equal
// to the table.
func TestFeedCoalescesPushes(t *testing.T) {
	const every = 100 * ms
	st, f, v := coalesceFeed(t, every)
	tab := st.Table(protocol.DefaultNamespace)
	t0 := base.Add(time.Minute)
	lsn0 := tab.LSN()

	// A change after a quiet time: pushed at once (the leading edge).
	regrantFirst(t, st, 1000)
	f.Changed(t0)
	pushRound(t, f.Ready(), lsn0, lsn0+1, v)
	if d := f.NextDeadline(); !d.IsZero() {
		t.Fatalf("NextDeadline %v after a leading round with nothing pending; want none", d)
	}

	// A burst within PushEvery: nothing until the trailing edge.
	for i, d := range []time.Duration{10 * ms, 20 * ms, 30 * ms} {
		regrantFirst(t, st, keyspace.LGN(1001+i))
		f.Changed(t0.Add(d))
		if got := f.Ready(); len(got) != 0 {
			t.Fatalf("change %d ms after a round was pushed at once: %+v", d/ms, got)
		}
		if got := f.NextDeadline(); !got.Equal(t0.Add(every)) {
			t.Fatalf("NextDeadline = %v, want the trailing edge %v", got, t0.Add(every))
		}
	}
	// A sync meanwhile is answered at once, and the round skips it.
	if err := f.StepSync(t0.Add(35*ms), 9, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 5, Epoch: epoch, LSN: lsn0}); err != nil {
		t.Fatal(err)
	}
	if got := f.Ready(); len(got) != 1 || got[0].To != 9 || got[0].Msg.ID != 5 || got[0].Msg.Update.To != lsn0+4 {
		t.Fatalf("a sync during a burst: %+v, want session 9 answered at once up to LSN %d", got, lsn0+4)
	}
	f.PushDue(t0.Add(every - 1))
	if got := f.Ready(); len(got) != 0 {
		t.Fatalf("pushed before the trailing edge: %+v", got)
	}
	f.PushDue(t0.Add(every))
	pushRound(t, f.Ready(), lsn0+1, lsn0+4, v) // the whole burst in one delta each
	f.Close(protocol.DefaultNamespace, 9)
	if d := f.NextDeadline(); !d.IsZero() {
		t.Fatalf("NextDeadline %v after the trailing round; want none", d)
	}
	if !slices.Equal(v.Segments(), tab.Segments()) {
		t.Fatalf("the Lookup's copy at LSN %d differs from the table at LSN %d", v.LSN(), tab.LSN())
	}

	// The trailing round counts as a round: a change 50 ms after it waits.
	t1 := t0.Add(every)
	regrantFirst(t, st, 1010)
	f.Changed(t1.Add(50 * ms))
	if got := f.Ready(); len(got) != 0 {
		t.Fatalf("a change 50 ms after the trailing round was pushed at once: %+v", got)
	}
	if got := f.NextDeadline(); !got.Equal(t1.Add(every)) {
		t.Fatalf("NextDeadline = %v, want %v", got, t1.Add(every))
	}
	f.PushDue(t1.Add(every))
	pushRound(t, f.Ready(), lsn0+4, lsn0+5, v)

	// Nothing applied starts no round; a change after a quiet time again
	// goes at once, and so does one applied after a due round its driver
	// ran late.
	t2 := t1.Add(every)
	f.Changed(t2.Add(time.Second))
	if got, d := f.Ready(), f.NextDeadline(); len(got) != 0 || !d.IsZero() {
		t.Fatalf("Changed with the table unchanged: %+v, deadline %v", got, d)
	}
	regrantFirst(t, st, 1011)
	f.Changed(t2.Add(time.Second))
	pushRound(t, f.Ready(), lsn0+5, lsn0+6, v)
	regrantFirst(t, st, 1012)
	t3 := t2.Add(time.Second + 10*ms)
	f.Changed(t3)
	regrantFirst(t, st, 1013)
	f.Changed(t3.Add(every + 5*ms)) // PushDue was not called at t3 - 10 ms + every
	pushRound(t, f.Ready(), lsn0+6, lsn0+8, v)
	if d := f.NextDeadline(); !d.IsZero() {
		t.Fatalf("NextDeadline %v with nothing pending", d)
	}
	if !slices.Equal(v.Segments(), tab.Segments()) || v.LSN() != tab.LSN() {
		t.Fatalf("the Lookup's copy at LSN %d differs from the table at LSN %d", v.LSN(), tab.LSN())
	}
}

// TestFeedPushEveryOff: with a negative PushEvery every change is pushed
// as it is applied.
func TestFeedPushEveryOff(t *testing.T) {
	st, f, v := coalesceFeed(t, -1)
	lsn := st.Table(protocol.DefaultNamespace).LSN()
	for i := range 5 {
		regrantFirst(t, st, keyspace.LGN(1000+i))
		f.Changed(base.Add(time.Duration(i) * ms))
		pushRound(t, f.Ready(), lsn, lsn+1, v)
		lsn++
		if d := f.NextDeadline(); !d.IsZero() {
			t.Fatalf("NextDeadline %v without coalescing", d)
		}
	}
}

// TestFeedReusesRecentSnapshot: a Lookup that needs a snapshot gets the
// last one sent, while the table has changed by less than an eighth of its
// segments since, as a push, and as the answer to its sync the delta after
// it: its copy ends equal to the table, and it counts the copy fresh only
// with the delta. Further behind, it gets a new snapshot.
func TestFeedReusesRecentSnapshot(t *testing.T) {
	const segments = 2000
	st, f := feedWith(t, segments, 0)
	tab := st.Table(protocol.DefaultNamespace)
	sync := func(id uint64) []LookupMessage {
		t.Helper()
		// A new Lookup: no epoch, no LSN.
		if err := f.StepSync(base, id, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: id}); err != nil {
			t.Fatal(err)
		}
		return f.Ready()
	}
	first := sync(1)
	if len(first) != 1 || first[0].Msg.ID != 1 || !first[0].Msg.Update.Snapshot || first[0].Msg.Update.To != tab.LSN() {
		t.Fatalf("first sync answered %+v, want one snapshot at LSN %d", first, tab.LSN())
	}
	snap := first[0].Msg.Update
	for i := range 3 {
		regrantFirst(t, st, keyspace.LGN(10_000+i))
	}
	got := sync(2)
	if len(got) != 2 {
		t.Fatalf("second sync sent %+v, want the snapshot and the delta after it", got)
	}
	u := got[0].Msg.Update
	if got[0].To != 2 || got[0].Msg.ID != 0 || !u.Snapshot || u.To != snap.To || &u.Segments[0] != &snap.Segments[0] {
		t.Fatalf("second sync sent first %d..%d (snapshot %v, ID %d), want the first snapshot (at %d) again, as a push",
			u.From, u.To, u.Snapshot, got[0].Msg.ID, snap.To)
	}
	if a := got[1]; a.To != 2 || a.Msg.ID != 2 || a.Msg.Update.Snapshot || a.Msg.Update.From != snap.To || a.Msg.Update.To != tab.LSN() {
		t.Fatalf("then %+v, want the answer: the delta %d..%d", a, snap.To, tab.LSN())
	}
	v := leasetable.NewView()
	for _, m := range got {
		if _, err := v.Apply(m.Msg.Update); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(v.Segments(), tab.Segments()) || v.LSN() != tab.LSN() {
		t.Fatal("the copy from the reused snapshot and the delta differs from the table")
	}
	for i := range segments / 8 {
		regrantFirst(t, st, keyspace.LGN(20_000+i))
	}
	got = sync(3)
	if len(got) != 1 || got[0].Msg.ID != 3 || !got[0].Msg.Update.Snapshot || got[0].Msg.Update.To != tab.LSN() {
		t.Fatalf("a sync %d changes after the snapshot answered %+v, want a new snapshot at %d", tab.LSN()-snap.To, got, tab.LSN())
	}
}
