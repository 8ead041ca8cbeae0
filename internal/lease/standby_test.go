package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// sbHarness drives a Manager core with standbys (docs/design.md rules
// 21-24): peers with zones, a clock that advances by rounds.
type sbHarness struct {
	*harness
	zones map[string]string
	now   time.Time
}

// newStandbys starts a core of one standby per range, pieces pieces dealt
// to the members (assign.Fixed), and the peers "id=zone".
func newStandbys(t *testing.T, broken faults.Set, pieces int, peers ...string) *sbHarness {
	t.Helper()
	cfg := Settings{Policy: assign.Fixed{Pieces: pieces}, Handover: -1, MembershipEvery: -1,
		Standbys: map[string]int{protocol.DefaultNamespace: 1}, Timing: tm, Epoch: epoch, Seed: 1}
	h := &sbHarness{harness: &harness{t: t, c: ResumeBroken(cfg, broken, NewState(tm.LogRetention), 0, base), peers: map[string]*peer{}},
		zones: map[string]string{}, now: base}
	for _, p := range peers {
		id, zone, _ := cutEq(p)
		h.peers[id] = newPeer(id)
		h.zones[id] = zone
	}
	return h
}

func cutEq(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// req has peer id send its next request at h.now, with its zone and the
// in-sync reports given.
func (h *sbHarness) req(id string, inSync ...protocol.StandbySync) round {
	h.t.Helper()
	r := h.peers[id].request()
	r.Zone, r.InSync = h.zones[id], inSync
	return h.stepLease(h.now, r)
}

// rounds advances the clock by Renew n times, ticking and having the
// peers named send a request each time.
func (h *sbHarness) rounds(n int, ids ...string) {
	h.t.Helper()
	for range n {
		h.now = h.now.Add(tm.Renew)
		h.tick(h.now)
		for _, id := range ids {
			h.req(id)
		}
	}
}

// start runs the peers named past the restart reservation, until every
// lease is granted and paired.
func (h *sbHarness) start(ids ...string) {
	h.t.Helper()
	for _, id := range ids {
		h.req(id)
	}
	h.rounds(int(tm.ManagerLease/tm.Renew)+2, ids...)
}

// leaseOf returns the LGN and range of id's first lease in the table.
func (h *sbHarness) leaseOf(id string) (keyspace.LGN, keyspace.Range) {
	h.t.Helper()
	for _, s := range h.table().Segments() {
		if s.Entry.Owner == id {
			return s.Entry.LGN, s.Range
		}
	}
	h.t.Fatalf("%s holds nothing: %v", id, h.table().Segments())
	return 0, keyspace.Range{}
}

func (h *sbHarness) pairing(lgn keyspace.LGN) StandbyRecord {
	return h.c.st.ns[protocol.DefaultNamespace].standbys[lgn]
}

func inSync(rec StandbyRecord) protocol.StandbySync {
	return protocol.StandbySync{Range: rec.Range, LGN: rec.LGN, SGN: rec.SGN}
}

// promotionRun: a (zone x) holds a lease whose standby b (zone y)
// reports in sync; a falls silent. It returns when the lease's range left
// a, and when a's reservation of it ran out (rule 3).
func promotionRun(t *testing.T, broken faults.Set, report bool) (h *sbHarness, la keyspace.LGN, r keyspace.Range, moved, resEnd time.Time) {
	return promotionRunWith(t, broken, func(rec StandbyRecord) []protocol.StandbySync {
		if !report {
			return nil
		}
		return []protocol.StandbySync{inSync(rec)}
	})
}

// promotionRunWith is promotionRun with b's reports of a's pairing given
// by reports (none: b reports nothing).
func promotionRunWith(t *testing.T, broken faults.Set, reports func(StandbyRecord) []protocol.StandbySync) (h *sbHarness, la keyspace.LGN, r keyspace.Range, moved, resEnd time.Time) {
	h = newStandbys(t, broken, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r = h.leaseOf("a")
	rec := h.pairing(la)
	if rec.Owner != "b" || rec.InSync {
		t.Fatalf("a#%d's pairing is %+v, want b, not in sync", la, rec)
	}
	if rs := reports(rec); len(rs) > 0 {
		h.req("b", rs...)
		if !h.pairing(la).InSync {
			t.Fatalf("b's report left the pairing %+v", h.pairing(la))
		}
	}
	h.req("a") // a's last request: the answer reserves r until now + ManagerLease
	resEnd = h.now.Add(tm.ManagerLease)
	for h.now.Before(resEnd.Add(tm.Renew)) {
		h.now = h.now.Add(50 * ms)
		h.tick(h.now)
		if h.now.Sub(base)%tm.Renew == 0 {
			h.req("b")
		}
		if e := h.table().At(r.Start).Entry; moved.IsZero() && e.Owner != "a" {
			moved = h.now
		}
	}
	return h, la, r, moved, resEnd
}

// TestPromoteAfterReservation (rule 21): the in-sync standby is granted the
// range, migrated from exactly the old LGN and marked promoted, no sooner
// than the old holder's reservation ran out; Lookups see no loss.
// faults.PromoteEarly breaks it, and the same check fails.
func TestPromoteAfterReservation(t *testing.T) {
	check := func(broken faults.Set) error {
		h, la, r, moved, resEnd := promotionRun(t, broken, true)
		e := h.entry(r)
		switch {
		case moved.Before(resEnd):
			return fmt.Errorf("promoted at %v, before a's reservation ran out at %v", moved.Sub(base), resEnd.Sub(base))
		case e.Owner != "b" || !e.Migrated || e.MigratedFrom != la:
			return fmt.Errorf("after a's reservation the range is %+v, want b's, migrated from #%d", e, la)
		case h.c.Stats().Promotions == 0:
			return fmt.Errorf("no promotion counted")
		}
		if lost := leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, e); lost {
			return fmt.Errorf("a Lookup reports the promoted range lost")
		}
		return nil
	}
	caughtBy(t, check, faults.Set{PromoteEarly: true}, "it cannot tell an early promotion")
}

// caughtBy fails t unless check passes as the rules are and fails with
// broken, the rule broken on purpose: a check that cannot tell the broken
// rule proves nothing (why says what it could not tell).
func caughtBy(t *testing.T, check func(faults.Set) error, broken faults.Set, why string) {
	t.Helper()
	if err := check(faults.Set{}); err != nil {
		t.Fatal(err)
	}
	if err := check(broken); err == nil {
		t.Fatalf("with %+v the check passes: %s", broken, why)
	}
}

// TestPromotedGrantSaysSo: the promoted grant is listed to the standby as
// a grant marked Promoted and Migrated.
func TestPromotedGrantSaysSo(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r := h.leaseOf("a")
	h.req("b", inSync(h.pairing(la)))
	h.req("a")
	var saw bool
	for end := h.now.Add(tm.ManagerLease + tm.Renew); h.now.Before(end); {
		h.now = h.now.Add(50 * ms)
		msgs := h.tick(h.now).Owners
		if h.now.Sub(base)%tm.Renew == 0 {
			msgs = append(msgs, h.req("b").Owners...)
		}
		for _, m := range msgs {
			for _, l := range m.Msg.Leases {
				if m.To == "b" && l.Range == r && l.Grant {
					saw = saw || (l.Promoted && l.Migrated)
				}
			}
		}
	}
	if !saw {
		t.Fatal("b was not sent a grant marked Promoted and Migrated")
	}
}

// TestPromoteOnlyPiecesInSync (rules 21, 23): a fill covers the pieces
// its holder held when it copied them, and the standby reports those; a
// piece its holder had dropped before the fill (recalled, then listed
// again under the lease before the omission reached the Manager) is not
// in the copy. At the reservation's end only the pieces reported are
// promoted; the rest is freed and its loss reported. faults
// .InSyncWholeLease (the mark for the whole lease) breaks it, and the same
// check fails.
func TestPromoteOnlyPiecesInSync(t *testing.T) {
	check := func(broken faults.Set) error {
		var synced, dropped keyspace.Range
		h, la, _, _, _ := promotionRunWith(t, broken, func(rec StandbyRecord) []protocol.StandbySync {
			mid := rec.Range.Start + keyspace.Key(uint64(rec.Range.Last()-rec.Range.Start)/2)
			synced = keyspace.Range{Start: rec.Range.Start, End: mid}
			dropped = keyspace.Range{Start: mid, End: rec.Range.End}
			return []protocol.StandbySync{{Range: synced, LGN: rec.LGN, SGN: rec.SGN}}
		})
		e := h.entry(synced)
		if e.Owner != "b" || !e.Migrated || e.MigratedFrom != la {
			return fmt.Errorf("the piece reported in sync, %v, is %+v after a's reservation; want b's, promoted from #%d", synced, e, la)
		}
		for _, s := range h.table().Overlapping(dropped) {
			if !leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, s.Entry) {
				return fmt.Errorf("the piece never reported in sync, %v, is %+v after a's reservation: promoted onto a copy the fill did not cover, no loss reported", s.Range, s.Entry)
			}
		}
		return nil
	}
	caughtBy(t, check, faults.Set{InSyncWholeLease: true}, "it cannot tell a piece promoted out of sync")
}

// TestInSyncOnlyPiecesOfTheLease (rule 23): a report records only the
// pieces it names that the lease has: one naming none of them records
// nothing, and the standby is told in sync per piece (StandbyFor).
func TestInSyncOnlyPiecesOfTheLease(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r := h.leaseOf("a")
	rec := h.pairing(la)
	outside := keyspace.Range{Start: r.End, End: r.End + 10}
	if r.End == 0 {
		outside = keyspace.Range{Start: 0, End: r.Start}
	}
	h.req("b", protocol.StandbySync{Range: outside, LGN: la, SGN: rec.SGN})
	if got := h.pairing(la); got.InSync || len(got.Synced) > 0 {
		t.Fatalf("a report naming %v, outside a#%d's %v, left the pairing %+v", outside, la, r, got)
	}
	half := keyspace.Range{Start: r.Start, End: r.Start + 16}
	out := h.req("b", protocol.StandbySync{Range: keyspace.Range{Start: r.Start - min(r.Start, 5), End: half.End}, LGN: la, SGN: rec.SGN})
	if got := h.pairing(la); !got.InSync || len(got.Synced) != 1 || got.Synced[0] != half {
		t.Fatalf("after a report naming %v, the pairing is %+v; want in sync on %v only", half, got, half)
	}
	for _, m := range out.Owners {
		for _, s := range m.Msg.StandbyFor {
			if m.To == "b" && s.LGN == la && s.InSync != half.Covers(s.Range) {
				t.Fatalf("b is told %+v, with a#%d in sync on %v only", s, la, half)
			}
		}
	}
	statusInSync := func() bool {
		for _, s := range h.c.State().Standbys(protocol.DefaultNamespace) {
			if s.LGN == la {
				return s.InSync
			}
		}
		t.Fatalf("status lists no pairing of a#%d", la)
		return false
	}
	if statusInSync() {
		t.Fatalf("status says a#%d's standby is in sync, filled on %v of %v only", la, half, r)
	}
	h.req("b", protocol.StandbySync{Range: r, LGN: la, SGN: rec.SGN})
	if !statusInSync() {
		t.Fatalf("status says a#%d's standby is not in sync, filled on the whole lease %+v", la, h.pairing(la))
	}
}

// TestNoPromotionNotInSync (rules 21, 23): a standby that never reported
// its copy filled is not promoted; the range is freed, a loss.
func TestNoPromotionNotInSync(t *testing.T) {
	h, la, r, _, _ := promotionRun(t, faults.Set{}, false)
	if e := h.entry(r); e.Owner == "b" && e.Migrated {
		t.Fatalf("a standby not in sync was promoted: %+v", e)
	} else if !leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, e) {
		t.Fatalf("the range after a's loss is %+v: no loss reported", e)
	}
	if h.c.Stats().Promotions != 0 {
		t.Fatalf("%d promotions", h.c.Stats().Promotions)
	}
}

// TestNoPromotionStandbyRestarted (rule 21): a standby that restarted
// after its report has lost its copy; its pairing is dropped and the
// range freed when the holder is lost.
func TestNoPromotionStandbyRestarted(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r := h.leaseOf("a")
	h.req("b", inSync(h.pairing(la)))
	h.peers["b"].restart()
	h.req("b")
	if rec := h.pairing(la); rec.InSync || rec.Incarnation == 1 {
		t.Fatalf("after b restarted a#%d's pairing is %+v, want b's first run dropped", la, rec)
	}
	h.req("a")
	h.rounds(int(tm.ManagerLease/tm.Renew)+2, "b")
	if e := h.entry(r); e.Migrated {
		t.Fatalf("promoted to a restarted standby: %+v", e)
	}
}

// TestBothLostNotified (rule 21): holder and standby lost together: the
// range is freed and the loss reported.
func TestBothLostNotified(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 2, "a=x", "b=y", "c=y")
	h.start("a", "b", "c")
	la, r := h.leaseOf("a")
	sb := h.pairing(la).Owner
	h.req(sb, inSync(h.pairing(la)))
	var live []string
	for _, id := range []string{"a", "b", "c"} {
		if id != "a" && id != sb {
			live = append(live, id)
		}
	}
	h.rounds(int(tm.ManagerLease/tm.Renew)+3, live...)
	e := h.entry(r)
	if e.Migrated || !leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, e) {
		t.Fatalf("a and its standby %s lost: the range is %+v, want a loss", sb, e)
	}
}

// TestInSyncOnlyUnderCurrentSGN (rule 23): a report is recorded only from
// the pairing's standby run under the pairing's SGN.
func TestInSyncOnlyUnderCurrentSGN(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 3, "a=x", "b=y", "c=z")
	h.start("a", "b", "c")
	la, _ := h.leaseOf("a")
	rec := h.pairing(la)
	other := "b"
	if rec.Owner == "b" {
		other = "c"
	}
	stale := inSync(rec)
	stale.SGN--
	h.req(rec.Owner, stale)
	h.req(other, inSync(rec))
	if h.pairing(la).InSync {
		t.Fatalf("recorded in sync on a stale SGN or another Owner's report: %+v", h.pairing(la))
	}
	h.req(rec.Owner, inSync(rec))
	if !h.pairing(la).InSync {
		t.Fatalf("the standby's report under the current SGN was not recorded: %+v", h.pairing(la))
	}
	if s := h.c.Stats(); s.StandbysFilled != 1 || s.LastFill <= 0 {
		t.Fatalf("fill not counted: %+v", s)
	}
}

// TestStandbyOtherZone (rule 22): a lease's standby is of another zone
// than its holder's whenever one has a live Owner.
func TestStandbyOtherZone(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 8, "a=x", "b=x", "c=y", "d=y")
	h.start("a", "b", "c", "d")
	for _, s := range h.table().Segments() {
		rec := h.pairing(s.Entry.LGN)
		if rec.Owner == "" || h.zones[rec.Owner] == h.zones[s.Entry.Owner] {
			t.Errorf("%s#%d (zone %s) paired with %q (zone %s)", s.Entry.Owner, s.Entry.LGN, h.zones[s.Entry.Owner], rec.Owner, h.zones[rec.Owner])
		}
	}
}

// TestStandbySameZoneOnlyWhenAlone (rule 22): with one zone, standbys are
// named in it all the same.
func TestStandbySameZoneOnlyWhenAlone(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 2, "a=x", "b=x")
	h.start("a", "b")
	la, _ := h.leaseOf("a")
	if rec := h.pairing(la); rec.Owner != "b" {
		t.Fatalf("a#%d's pairing is %+v, want b", la, rec)
	}
}

// TestStandbysSpread (rule 22): a zone's leases' standbys spread evenly
// over the Owners of the other zones.
func TestStandbysSpread(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 12, "a=x", "b=y", "c=z", "d=z")
	h.start("a", "b", "c", "d")
	count := map[string]int{}
	for _, s := range h.table().Segments() {
		if s.Entry.Owner == "a" {
			count[h.pairing(s.Entry.LGN).Owner]++
		}
	}
	// a's 3 leases over b, c and d: one each.
	if count["b"] != 1 || count["c"] != 1 || count["d"] != 1 {
		t.Fatalf("a's standbys %v, want one each on b, c and d", count)
	}
}

// TestStandbyRenamedAfterLoss (rule 22): a standby that falls silent is
// dropped (a fresh SGN, no standby) and another named under a fresh SGN.
func TestStandbyRenamedAfterLoss(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 3, "a=x", "b=y", "c=y")
	h.start("a", "b", "c")
	la, _ := h.leaseOf("a")
	first := h.pairing(la)
	var live []string
	for _, id := range []string{"a", "b", "c"} {
		if id != first.Owner {
			live = append(live, id)
		}
	}
	h.rounds(int(tm.ManagerLease/tm.Renew)+2, live...)
	rec := h.pairing(la)
	if rec.Owner == first.Owner || rec.Owner == "" || rec.SGN <= first.SGN+1 || rec.InSync {
		t.Fatalf("after %s fell silent a#%d's pairing is %+v (was %+v): want another standby, not in sync, under an SGN past the drop's",
			first.Owner, la, rec, first)
	}
	if s := h.c.Stats(); s.StandbysLost == 0 {
		t.Fatalf("no standby loss counted: %+v", s)
	}
}

// TestStandbyStateSurvivesSnapshot: the pairings and the SGN counter are
// in the replicated state's snapshot, so a new leader promotes only what
// the old one recorded in sync.
func TestStandbyStateSurvivesSnapshot(t *testing.T) {
	h := newStandbys(t, faults.Set{}, 2, "a=x", "b=y")
	h.start("a", "b")
	la, _ := h.leaseOf("a")
	h.req("b", inSync(h.pairing(la)))
	st, err := DecodeState(h.c.State().Encode(), tm.LogRetention)
	if err != nil {
		t.Fatal(err)
	}
	got, want := st.Standbys(protocol.DefaultNamespace), h.c.Standbys(protocol.DefaultNamespace)
	if fmt.Sprint(got) != fmt.Sprint(want) || st.ns[protocol.DefaultNamespace].sgn != h.c.st.ns[protocol.DefaultNamespace].sgn {
		t.Fatalf("decoded pairings %v, want %v", got, want)
	}
}

// TestPromoteOnLapsedRelease (rule 21): a holder whose lease ran out on its
// side while the Manager still renewed it (no renewal reached it) omits
// the lease from its next request. Its standby, in sync, has every write
// it acknowledged: the range is granted to the standby, promoted, and no
// loss is reported — as it would be had the holder stayed silent until its
// reservation ran out.
func TestPromoteOnLapsedRelease(t *testing.T) {
	h, la, r := lapsedRelease(t, faults.Set{}, func(rec StandbyRecord) protocol.StandbySync { return inSync(rec) })
	e := h.entry(r)
	if e.Owner != "b" || !e.Migrated || e.MigratedFrom != la {
		t.Fatalf("after a gave up a#%d, lapsed, the range is %+v; want b's, promoted from #%d", la, e, la)
	}
	if leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, e) {
		t.Fatal("a Lookup reports the range lost though its standby was in sync")
	}
}

// TestLapsedReleasePromotesOnlyPiecesInSync (rules 21, 23): at a lapsed
// holder's release, as at a reservation's end, only the pieces the standby
// is recorded in sync on are promoted. The long sweep drew the other case
// (TestSimulationStandbys -sim.long, seed 104, with the mark for the whole
// lease): a piece its holder dropped on a recall before it filled a new
// standby, listed again as a renewal, then omitted, was promoted onto the
// standby's empty copy. faults.InSyncWholeLease breaks it, and the same
// check fails.
func TestLapsedReleasePromotesOnlyPiecesInSync(t *testing.T) {
	check := func(broken faults.Set) error {
		var synced, dropped keyspace.Range
		h, la, _ := lapsedRelease(t, broken, func(rec StandbyRecord) protocol.StandbySync {
			mid := rec.Range.Start + keyspace.Key(uint64(rec.Range.Last()-rec.Range.Start)/2)
			synced = keyspace.Range{Start: rec.Range.Start, End: mid}
			dropped = keyspace.Range{Start: mid, End: rec.Range.End}
			return protocol.StandbySync{Range: synced, LGN: rec.LGN, SGN: rec.SGN}
		})
		if e := h.entry(synced); e.Owner != "b" || !e.Migrated || e.MigratedFrom != la {
			return fmt.Errorf("the piece in sync, %v, is %+v after a's release; want b's, promoted from #%d", synced, e, la)
		}
		for _, s := range h.table().Overlapping(dropped) {
			if !leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, s.Entry) {
				return fmt.Errorf("the piece never reported in sync, %v, is %+v after a's release: promoted onto a copy the fill did not cover", s.Range, s.Entry)
			}
		}
		return nil
	}
	caughtBy(t, check, faults.Set{InSyncWholeLease: true}, "it cannot tell a piece promoted out of sync")
}

// lapsedRelease: a (zone x) holds a lease whose standby b (zone y)
// reports report; a is renewed, then its lease runs out on its side and
// its next request omits it. It returns a's lease and range.
func lapsedRelease(t *testing.T, broken faults.Set, report func(StandbyRecord) protocol.StandbySync) (*sbHarness, keyspace.LGN, keyspace.Range) {
	h := newStandbys(t, broken, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r := h.leaseOf("a")
	h.req("b", report(h.pairing(la)))
	if !h.pairing(la).InSync {
		t.Fatalf("b's report left the pairing %+v", h.pairing(la))
	}
	h.req("a") // renewed: the answer lists r
	a := h.peers["a"]
	var kept []protocol.Lease
	for _, l := range a.held {
		if l.LGN != la {
			kept = append(kept, l)
		}
	}
	a.held = kept // ran out on a's side
	h.now = h.now.Add(10 * ms)
	h.req("a")
	return h, la, r
}
