package lease

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// TestOrphansSurviveFailover: the ranges of an Owner's earlier run stay
// orphans under a new leader, which tells them apart by the replicated
// OwnerRecord.Since: it neither renews them to the new run nor lets the new
// run's requests, which do not list them, release them. They are freed
// (and their loss reported) when the takeover reservation ends, and only
// then granted again.
func TestOrphansSurviveFailover(t *testing.T) {
	a := newPeer("a")
	h := joined(t, 2, a)
	last := restartEnd.Add(300 * ms)
	h.send(last, a)
	old := slices.Clone(a.held)
	lsn := h.mark()
	a.restart()
	h.send(last.Add(100*ms), a)
	if rec := h.c.State().Owners(protocol.DefaultNamespace)["a"]; rec.Incarnation != 2 || rec.Since < old[len(old)-1].LGN {
		t.Fatalf("a's record %+v: want incarnation 2 and Since at least %d", rec, old[len(old)-1].LGN)
	}

	takeover := last.Add(time.Second)
	h.c = Resume(Settings{Timing: tm, Policy: assign.Fixed{Pieces: 2}, Handover: -1, Epoch: epoch, Seed: 1}, h.c.State(), 5<<32, takeover)
	h.c.Ready()
	end := takeover.Add(tm.ManagerLease)
	for now := takeover.Add(100 * ms); now.Before(end); now = now.Add(tm.Renew) {
		h.tick(now)
		if m := h.to(h.send(now, a), "a"); len(m.Leases) != 0 {
			t.Fatalf("at %v the new leader sent the new run %v (the old run's ranges until %v)", now, m.Leases, end)
		}
		for _, l := range old {
			if e := h.entry(l.Range); e.Owner != "a" || e.LGN != l.LGN {
				t.Fatalf("at %v %v = %v, want the old run's lease %d kept", now, l.Range, e, l.LGN)
			}
		}
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a Lookup reports %v lost before the takeover reservation ends", got)
	}
	m := h.to(h.tick(end), "a")
	checkGrants(t, m.Leases, ranges(old), 2)
	if got, want := h.lostSince(lsn), coalesced(ranges(old)...); !slices.Equal(got, want) {
		t.Fatalf("a Lookup reports %v lost, want %v", got, want)
	}
}

// TestFreeAtRestartBroken: with the old rule (faults.FreeAtRestart) the
// restart frees the old run's ranges at once and the loss is reported while
// the old run may still hold them; TestNewIncarnation fails with it.
func TestFreeAtRestartBroken(t *testing.T) {
	a := newPeer("a")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 2}, Handover: -1}, a)
	h.c.broken.FreeAtRestart = true
	last := restartEnd.Add(300 * ms)
	h.send(last, a)
	old := slices.Clone(a.held)
	lsn := h.mark()
	a.restart()
	h.send(last.Add(100*ms), a)
	if got, want := h.lostSince(lsn), coalesced(ranges(old)...); !slices.Equal(got, want) {
		t.Fatalf("with the old rule a Lookup reports %v lost at the restart, want %v", got, want)
	}
}

// TestHandedAfterDeadline: a handover reported done after the Manager's
// deadline for it is not granted on migrated: the range was recalled at
// the deadline, and the holder may have taken writes on it since, which
// the state it handed over lacks. The piece is freed, its loss reported,
// and granted to the next Owner plainly. Before the deadline the same
// report migrates the piece; with faults.LateHandoverDone it migrates
// after the deadline too.
func TestHandedAfterDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    time.Duration // from the deadline
		faults   *faults.Set
		migrated bool
	}{
		{"before", -ms, nil, true},
		{"after", 10 * ms, nil, false},
		{"after, rule broken", 10 * ms, &faults.Set{LateHandoverDone: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPeer("a"), newPeer("b")
			h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}}, a)
			if tc.faults != nil {
				h.c.broken = *tc.faults
			}
			h.add(b)
			now := restartEnd.Add(100 * ms)
			r := h.send(now, b)
			m := h.to(r, "a")
			if len(m.Handovers) == 0 {
				t.Fatal("a was asked for no handover")
			}
			ho := m.Handovers[0]
			deadline := now.Add(ho.Within)
			report := deadline.Add(tc.after)
			// Keep both sessions alive up to the report without a's
			// renewal crossing the deadline (its answer would recall).
			h.renewals(now.Add(tm.Renew), report.Add(-tm.Renew), a, b)
			h.tick(report)
			lsn := h.mark()
			req := a.request()
			req.Handed = []protocol.Handed{{Range: ho.Range, LGN: ho.LGN, To: "b", Incarnation: b.inc}}
			req.Held = slices.DeleteFunc(req.Held, func(l protocol.Lease) bool { return l.Range == ho.Range })
			a.held = req.Held
			h.stepLease(report, req)
			e := h.entry(ho.Range)
			// The other piece, past its deadline too, may be recalled
			// meanwhile: only ho.Range's fate is looked at.
			lost := slices.DeleteFunc(h.lostSince(lsn), func(r keyspace.Range) bool { return !r.Overlaps(ho.Range) })
			if tc.migrated {
				if e.Owner != "b" || !e.Migrated || e.MigratedFrom != ho.LGN || len(lost) != 0 {
					t.Fatalf("%v = %v, lost %v: want b's, migrated from %d, nothing lost", ho.Range, e, lost, ho.LGN)
				}
				return
			}
			if e.Migrated || !slices.Equal(lost, []keyspace.Range{ho.Range}) {
				t.Fatalf("%v = %v, lost %v: want it freed or granted unmigrated, and reported lost", ho.Range, e, lost)
			}
		})
	}
}
