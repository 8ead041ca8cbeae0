package lease

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// promotedThenDeposed: a (zone x) holds a lease whose standby b (zone y)
// is in sync; a falls silent and its reservation runs out, and the lease
// is promoted to b — but every message to b from then on is lost, and the
// leader is deposed before b acknowledges the promoted grant. A new
// leader takes over the replicated state (a snapshot of it: Resume works
// on a decoded copy) with the rules broken as given; what it pushes at
// once is delivered, b taking it as an Owner does (takeAsOwner). It
// returns the harness, now on the new leader, the old and the promoted
// lease, and the range, with a mark of the table for the Lookups at the
// promotion.
func promotedThenDeposed(t *testing.T, broken faults.Set) (h *sbHarness, la, lb keyspace.LGN, r keyspace.Range, m mark) {
	t.Helper()
	h = newStandbys(t, broken, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r = h.leaseOf("a")
	h.req("b", inSync(h.pairing(la)))
	h.req("a") // a's last request: the answer reserves r until now + ManagerLease
	m = h.mark()
	b := h.peers["b"]
	delete(h.peers, "b") // what is sent to b is lost; b still asks
	for end := h.now.Add(tm.ManagerLease + tm.Renew); h.now.Before(end) && h.entry(r).Owner != "b"; {
		h.now = h.now.Add(50 * ms)
		h.tick(h.now)
		if h.now.Sub(base)%tm.Renew == 0 {
			h.stepLease(h.now, b.request())
		}
	}
	e := h.entry(r)
	if e.Owner != "b" || e.MigratedFrom != la {
		t.Fatalf("a's range after its reservation is %+v, want b's, promoted from #%d", e, la)
	}
	lb = e.LGN
	h.peers["b"] = b
	st, err := DecodeState(h.c.State().Encode(), tm.LogRetention)
	if err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(10 * ms)
	h.c = ResumeBroken(h.c.cfg, broken, st, 2<<32|1<<24, h.now)
	for _, om := range h.c.Ready().Owners {
		if om.To == "b" {
			takeAsOwner(b, om.Msg)
		}
	}
	return h, la, lb, r, m
}

// takeAsOwner has peer p take response m as an Owner does (rule 5): a
// grant is taken, a renewal only of a lease it holds; a renewal of one it
// never held is refused, and so left out of its next request.
func takeAsOwner(p *peer, m *protocol.LeaseResponse) {
	if m.Incarnation != p.inc || m.Seq <= p.ack || m.RenewHeld {
		return
	}
	p.ack = m.Seq
	if m.AckSeq != p.seq {
		return // raced
	}
	var next []protocol.Lease
	for _, l := range m.Leases {
		if l.Grant || holds(p.held, l) {
			next = append(next, protocol.Lease{Range: l.Range, LGN: l.LGN})
		}
	}
	p.held = next
}

// TestPromotionSurvivesLeaderChange (rule 21): a promotion is in the
// replicated state, so a leader that takes over before the standby
// acknowledged its promoted grant lists the lease to it as the promoted
// grant it is (Promoted, Migrated from the old LGN), not as a renewal of a
// lease it never held, which it would refuse: the standby takes it up with
// the copy it kept, the range stays its, and no Lookup is told of a loss.
// faults.PromotionLeaderLocal (the mark the promoting leader's alone)
// breaks it, and the same check fails.
func TestPromotionSurvivesLeaderChange(t *testing.T) {
	check := func(broken faults.Set) error {
		h, la, lb, r, m := promotedThenDeposed(t, broken)
		b := h.peers["b"]
		// b's first request to the new leader acknowledges the old
		// leader's last message b heard, from before the promotion; it
		// is answered, or, if it raced a message of the new leader's
		// (lost), that one is sent again after a backoff.
		if err := h.c.StepLease(h.now, b.request()); err != nil {
			return err
		}
		msgs := h.c.Ready().Owners
		h.now = h.now.Add(tm.BackoffMax)
		h.c.Tick(h.now)
		msgs = append(msgs, h.c.Ready().Owners...)
		var listed *protocol.Lease
		for _, om := range msgs {
			if om.To != "b" {
				continue
			}
			for _, l := range om.Msg.Leases {
				if l.Range == r && l.LGN == lb && listed == nil {
					listed = &l
				}
			}
			takeAsOwner(b, om.Msg)
		}
		switch {
		case listed == nil:
			return fmt.Errorf("the new leader's answer to b does not list %v#%d", r, lb)
		case !listed.Grant || !listed.Promoted || !listed.Migrated:
			return fmt.Errorf("the new leader lists b's promoted lease as %+v, want a grant marked Promoted and Migrated", *listed)
		}
		h.now = h.now.Add(tm.Renew)
		h.req("b") // in order: it acknowledges the grant
		if e := h.entry(r); e.Owner != "b" || e.LGN != lb {
			return fmt.Errorf("after b's request the range is %+v, want b's promoted lease #%d", e, lb)
		}
		if lost := h.lostSince(m); len(lost) > 0 {
			return fmt.Errorf("Lookups are told %v lost, promoted from #%d", lost, la)
		}
		// Acknowledged now: the leader after that lists it as a renewal.
		h.req("b")
		for _, l := range h.to(h.req("b"), "b").Leases {
			if l.LGN == lb && l.Grant {
				return fmt.Errorf("b's promoted lease is still listed as a grant once acknowledged: %+v", l)
			}
		}
		return nil
	}
	caughtBy(t, check, faults.Set{PromotionLeaderLocal: true}, "it cannot tell a promotion lost with its leader")
}

// TestPromotionMarkReplicated: the mark is in the replicated state's
// snapshot, and forgotten once its lease ends; a snapshot written before
// promotions were marked decodes with none.
func TestPromotionMarkReplicated(t *testing.T) {
	h, _, lb, _, _ := promotedThenDeposed(t, faults.Set{})
	n := h.c.st.ns[protocol.DefaultNamespace]
	p, ok := n.promoted[lb]
	if !ok || p.Owner != "b" || p.Seq == 0 {
		t.Fatalf("the promoted lease #%d's mark is %+v (%v), want b's with the Seq of its first message", lb, p, ok)
	}
	st, err := DecodeState(h.c.State().Encode(), tm.LogRetention)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.ns[protocol.DefaultNamespace].promoted[lb]; got != p {
		t.Fatalf("decoded mark %+v, want %+v", got, p)
	}
	// Written before the marks: the field is absent.
	old := h.c.State().Clone()
	old.ns[protocol.DefaultNamespace].promoted = map[keyspace.LGN]PromotedGrant{}
	st, err = DecodeState(old.Encode(), tm.LogRetention)
	if err != nil || len(st.ns[protocol.DefaultNamespace].promoted) != 0 {
		t.Fatalf("a snapshot without marks decodes with %v (%v)", st.ns[protocol.DefaultNamespace].promoted, err)
	}
	// b is lost in turn, never having taken the lease up: it ends, and
	// its mark goes with it.
	for end := h.now.Add(2*tm.ManagerLease + tm.Renew); h.now.Before(end); {
		h.now = h.now.Add(50 * ms)
		h.tick(h.now)
	}
	if e := h.table().At(0).Entry; e.LGN == lb {
		t.Fatalf("b's promoted lease is still in the table: %+v", e)
	}
	if _, ok := n.promoted[lb]; ok {
		t.Fatalf("the mark of the ended lease #%d is kept", lb)
	}
}
