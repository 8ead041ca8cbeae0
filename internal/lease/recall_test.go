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

// The recall of a range whose standby is in sync (docs/design.md rules 13,
// 21 and 23): a holder asked to hand its ranges over that does not report
// the handover by the deadline has them recalled, and acknowledges the
// recall by omitting them. The pieces the lease's standby is recorded in
// sync on go to the standby, promoted; the rest are freed and reported
// lost.

// recallRun: a (zone x) holds its ranges with standbys among b (zone y)
// and c (zone z) — never d, a's zone's other Owner, which the plan may
// give a's ranges to instead (a handover toward a third Owner) — which
// report their pairings of a's leases as report
// says (nothing: no report). a is drained with planned moves on, never
// hands anything over, and at each handover's deadline the Manager recalls
// the range; a's next request omits it. It returns, for each of a's
// leases, the table on its range at the moment the range left a, and the
// pairing a's lease had then.
func recallRun(t *testing.T, broken faults.Set, report func(StandbyRecord) *protocol.StandbySync) (h *sbHarness, left map[keyspace.LGN][]leasetable.Segment, paired map[keyspace.LGN]StandbyRecord) {
	return recallRunWith(t, broken, 0, report)
}

// recallRunWith is recallRun with Settings.Handover set to handover (< 0:
// planned moves off, a drain recalls every range without a handover).
func recallRunWith(t *testing.T, broken faults.Set, handover time.Duration, report func(StandbyRecord) *protocol.StandbySync) (h *sbHarness, left map[keyspace.LGN][]leasetable.Segment, paired map[keyspace.LGN]StandbyRecord) {
	t.Helper()
	cfg := Settings{Policy: assign.Fixed{Pieces: 12}, MembershipEvery: -1, Handover: handover,
		Standbys: map[string]int{protocol.DefaultNamespace: 1}, Timing: tm, Epoch: epoch, Seed: 1}
	h = &sbHarness{harness: &harness{t: t, c: ResumeBroken(cfg, broken, NewState(tm.LogRetention), 0, base), peers: map[string]*peer{}},
		zones: map[string]string{"a": "x", "b": "y", "c": "z", "d": "x"}, now: base}
	for id := range h.zones {
		h.peers[id] = newPeer(id)
	}
	h.start("a", "b", "c", "d")
	ranges := map[keyspace.LGN]keyspace.Range{}
	paired = map[keyspace.LGN]StandbyRecord{}
	for _, s := range h.table().Segments() {
		if s.Entry.Owner != "a" {
			continue
		}
		ranges[s.Entry.LGN] = s.Range
		rec := h.pairing(s.Entry.LGN)
		if rec.Owner == "" || rec.InSync {
			t.Fatalf("a#%d's pairing is %+v, want a standby not yet in sync", s.Entry.LGN, rec)
		}
		if sync := report(rec); sync != nil {
			h.req(rec.Owner, *sync)
		}
		paired[s.Entry.LGN] = h.pairing(s.Entry.LGN)
	}
	if len(ranges) == 0 {
		t.Fatal("a holds nothing")
	}
	if err := h.c.Drain(h.now, protocol.DefaultNamespace, "a"); err != nil {
		t.Fatal(err)
	}
	h.deliver(h.c.Ready())
	left = map[keyspace.LGN][]leasetable.Segment{}
	for i := 0; len(left) < len(ranges); i++ {
		if i == int(3*tm.OwnerLease/tm.Renew) {
			t.Fatalf("a, drained, still holds %d of its %d leases after 3 owner leases", len(ranges)-len(left), len(ranges))
		}
		h.rounds(1, "a", "b", "c", "d")
		for la, r := range ranges {
			if _, ok := left[la]; ok {
				continue
			}
			if segs := h.table().Overlapping(r); len(segs) != 1 || segs[0].Entry.Owner != "a" {
				left[la] = segs
			}
		}
	}
	return h, left, paired
}

// TestRecallPromotesInSync (rules 13 and 21): a range recalled at its
// handover's deadline, whose standby is in sync on it, goes to the standby
// as a promoted grant, migrated from exactly the recalled lease, and
// Lookups see no loss. The holder acknowledged the recall by omitting the
// range (its belief ended before that request, as for any release, rule
// 7), and every write it acknowledged on the range was stored at the
// standby first (rule 24), the handover's copy-out included. Freed, as it
// was, the range's writes were reported lost: a live holder that could
// not get its copies through within the deadline lost 14 ranges with
// their standbys in sync (docs/results.md).
func TestRecallPromotesInSync(t *testing.T) {
	h, left, paired := recallRun(t, faults.Set{}, func(rec StandbyRecord) *protocol.StandbySync {
		s := inSync(rec)
		return &s
	})
	elsewhere := 0 // recalled toward another Owner than the standby
	for la, segs := range left {
		rec := paired[la]
		if !rec.InSync {
			t.Fatalf("a#%d's pairing %+v is not in sync after its standby's report", la, rec)
		}
		e := segs[0].Entry
		if len(segs) != 1 || e.Owner != rec.Owner || !e.Migrated || e.MigratedFrom != la {
			t.Fatalf("a#%d, recalled with its standby %s in sync, left a as %v; want one grant to %s promoted from #%d",
				la, rec.Owner, segs, rec.Owner, la)
		}
		if leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, e) {
			t.Fatalf("a#%d: a Lookup reports the recalled range lost though its standby was in sync", la)
		}
		if want := h.desiredOf(segs[0].Range); want != rec.Owner {
			elsewhere++
		}
	}
	if elsewhere == 0 {
		t.Fatal("every recall was toward the standby itself: the case of a handover to a third Owner is not covered")
	}
	if s := h.c.Stats(); s.Promotions == 0 {
		t.Fatalf("no promotion counted: %+v", s)
	}
}

// TestRecallFreesNotInSync (rules 13, 21 and 23): a recalled piece its
// standby is not recorded in sync on is freed and its loss reported, as
// at a reservation's end: of a lease whose standby reported half of it,
// that half is promoted and the other freed; a lease whose standby never
// reported is freed whole. faults.InSyncWholeLease (the mark for the whole
// lease) breaks it, and the same check fails.
func TestRecallFreesNotInSync(t *testing.T) {
	check := func(broken faults.Set) error {
		half := map[keyspace.LGN]keyspace.Range{} // the piece reported in sync, by lease
		n := 0
		_, left, paired := recallRun(t, broken, func(rec StandbyRecord) *protocol.StandbySync {
			n++
			if n%2 == 0 {
				return nil // this lease's standby never reports
			}
			mid := rec.Range.Start + keyspace.Key(uint64(rec.Range.Last()-rec.Range.Start)/2)
			half[rec.LGN] = keyspace.Range{Start: rec.Range.Start, End: mid}
			return &protocol.StandbySync{Range: half[rec.LGN], LGN: rec.LGN, SGN: rec.SGN}
		})
		whole := 0
		for la, segs := range left {
			synced, reported := half[la]
			if !reported {
				whole++
			}
			var in keyspace.RangeSet
			if reported {
				in = keyspace.NewRangeSet(synced)
			}
			for _, s := range segs {
				seg := keyspace.NewRangeSet(s.Range)
				promoted := s.Entry.Owner == paired[la].Owner && s.Entry.Migrated && s.Entry.MigratedFrom == la
				if !seg.Intersect(in).Empty() && !promoted {
					return fmt.Errorf("a#%d's piece %v, in sync at %s, left a as %+v; want it promoted", la, s.Range, paired[la].Owner, s.Entry)
				}
				if !seg.Subtract(in).Empty() && !leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, s.Entry) {
					return fmt.Errorf("a#%d's piece %v, never reported in sync, left a as %+v: promoted onto a copy no fill covered", la, s.Range, s.Entry)
				}
			}
		}
		if whole == 0 || len(half) == 0 {
			return fmt.Errorf("the run recalled %d leases reported in half and %d not reported: want both", len(half), whole)
		}
		return nil
	}
	caughtBy(t, check, faults.Set{InSyncWholeLease: true}, "it cannot tell a recalled piece promoted out of sync")
}

// TestRecallWithMovesOffFrees (rule 13): with planned moves off a drain
// recalls every range without a handover, and a recall moves the range
// without its state to the Owner the plan names, its loss reported. A
// range whose standby is in sync is freed there too, not promoted: a
// grant to the standby would never be listed to it (the plan gives the
// range to another Owner), and would only be freed a request later, the
// range unserved in between.
func TestRecallWithMovesOffFrees(t *testing.T) {
	_, left, paired := recallRunWith(t, faults.Set{}, -1, func(rec StandbyRecord) *protocol.StandbySync {
		s := inSync(rec)
		return &s
	})
	for la, segs := range left {
		for _, s := range segs {
			if !leasetable.Lost(leasetable.Entry{Owner: "a", LGN: la}, s.Entry) {
				t.Fatalf("a#%d, recalled with planned moves off and its standby %s in sync, left a as %+v; want it freed, its loss reported",
					la, paired[la].Owner, s.Entry)
			}
		}
	}
}

// desiredOf returns the Owner the desired assignment gives r's start.
func (h *sbHarness) desiredOf(r keyspace.Range) string {
	var want string
	h.c.ns[protocol.DefaultNamespace].eachDesired(keyspace.Range{Start: r.Start, End: r.Start + 1}, func(_ keyspace.Range, o string) { want = o })
	return want
}
