package owner

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// TestPairedAfterGranted (rule 24): a promoted grant and its lease's new
// pairing come in one message; the application hears the grant first, so
// a fill started on the pairing copies the state the grant carries.
// faults.PairedBeforeGranted breaks it.
func TestPairedAfterGranted(t *testing.T) {
	order := func(broken faults.Set) (granted, paired int) {
		c := standbyCore(t, broken)
		m := resp(2, 1, renew(rng(0, 100), 5),
			protocol.Lease{Range: rng(100, 200), LGN: 9, Grant: true, Migrated: true, Promoted: true})
		m.Standbys = []protocol.Standby{{Range: rng(100, 200), LGN: 9, SGN: 2, Owner: "s1", Addr: "s1:1", Incarnation: 4}}
		c.Step(at(20*ms), m)
		granted, paired = -1, -1
		for i, ch := range readyOf(c).chs {
			if granted < 0 && slices.ContainsFunc(ch.Granted, func(l Lease) bool { return l.Num == num(9) }) {
				granted = i
			}
			if paired < 0 && slices.ContainsFunc(ch.Paired, func(p Pairing) bool { return p.Lease == num(9) }) {
				paired = i
			}
		}
		return granted, paired
	}
	if g, p := order(faults.Set{}); g < 0 || p < 0 || p < g {
		t.Fatalf("grant reported at change %d, its pairing at %d: want both, the grant first", g, p)
	}
	if g, p := order(faults.Set{PairedBeforeGranted: true}); p >= g {
		t.Fatalf("with faults.PairedBeforeGranted the grant is at change %d and its pairing at %d", g, p)
	}
}

// TestRacedGrantKeepsStandbyFor (rule 24): a raced message that carries a
// grant (here the promotion of the lease this Owner stands by for, which
// no longer lists it) leaves the leases stood by for as they were: the
// grant may be declined and resent, and the copy it carries must be kept
// until then. The next message in order brings the list.
// faults.StandbyForFromRaced breaks it.
func TestRacedGrantKeepsStandbyFor(t *testing.T) {
	kept := func(broken faults.Set) bool {
		c := standbyCore(t, broken)
		m := resp(2, 1, renew(rng(0, 100), 5))
		m.StandbyFor = []protocol.Standby{{Range: rng(100, 200), LGN: 8, SGN: 4, Owner: "h", Addr: "h:1", Incarnation: 3}}
		c.Step(at(20*ms), m)
		readyOf(c)
		for i := 1; c.seq < 2; i++ {
			tick(c, at(time.Duration(i)*tm.Renew))
		}
		raced := resp(3, 1, renew(rng(0, 100), 5),
			protocol.Lease{Range: rng(100, 200), LGN: 9, Grant: true, Migrated: true, Promoted: true})
		c.Step(c.sentAts[2].Add(ms), raced)
		ok := slices.ContainsFunc(c.StandbyFor(), func(p Pairing) bool { return p.Lease == num(8) })
		inOrder := resp(4, c.seq, renew(rng(0, 100), 5))
		c.Step(c.sentAts[c.seq].Add(2*ms), inOrder)
		if len(c.StandbyFor()) != 0 {
			t.Fatalf("StandbyFor %+v after a message in order listing none", c.StandbyFor())
		}
		return ok
	}
	if !kept(faults.Set{}) {
		t.Fatal("a raced message with a grant dropped the lease stood by for")
	}
	if kept(faults.Set{StandbyForFromRaced: true}) {
		t.Fatal("with faults.StandbyForFromRaced the raced message's list is kept")
	}
}

// TestPairingWaitsForItsGrant (rule 24): the pairing of a lease whose
// grant came in a raced message and was declined is not reported until a
// later step takes the grant up, and then after it.
func TestPairingWaitsForItsGrant(t *testing.T) {
	c := standbyCore(t, faults.Set{})
	promoted := protocol.Lease{Range: rng(100, 200), LGN: 9, Grant: true, Migrated: true, Promoted: true}
	pairing := []protocol.Standby{{Range: rng(100, 200), LGN: 9, SGN: 2, Owner: "s1", Addr: "s1:1", Incarnation: 4}}
	raced := resp(2, 0, renew(rng(0, 100), 5), promoted) // answers no request it has the send time of: declined
	raced.Standbys = pairing
	c.Step(at(20*ms), raced)
	for _, ch := range readyOf(c).chs {
		if len(ch.Paired) > 0 || len(ch.Granted) > 0 {
			t.Fatalf("a declined grant's step reported %+v", ch)
		}
	}
	m := resp(3, c.seq, renew(rng(0, 100), 5), promoted)
	m.Standbys = pairing
	c.Step(c.sentAts[c.seq].Add(ms), m)
	granted, paired := -1, -1
	for i, ch := range readyOf(c).chs {
		if granted < 0 && slices.ContainsFunc(ch.Granted, func(l Lease) bool { return l.Num == num(9) }) {
			granted = i
		}
		if paired < 0 && slices.ContainsFunc(ch.Paired, func(p Pairing) bool { return p.Lease == num(9) }) {
			paired = i
		}
	}
	if granted < 0 || paired < granted {
		t.Fatalf("grant reported at change %d, its pairing at %d: want both, the grant first", granted, paired)
	}
}
