package lease

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// promotedAcked: a (zone x) holds a lease whose standby b (zone y) is in
// sync; a falls silent, the lease is promoted to b, and b takes the grant
// up and acknowledges it. It returns the harness, a's and b's lease, and
// the range.
func promotedAcked(t *testing.T) (h *sbHarness, la, lb keyspace.LGN, r keyspace.Range) {
	t.Helper()
	h = newStandbys(t, faults.Set{}, 2, "a=x", "b=y")
	h.start("a", "b")
	la, r = h.leaseOf("a")
	h.req("b", inSync(h.pairing(la)))
	h.req("a")
	for end := h.now.Add(tm.ManagerLease + tm.Renew); h.now.Before(end) && h.entry(r).Owner != "b"; {
		h.now = h.now.Add(50 * ms)
		h.tick(h.now)
		if h.now.Sub(base)%tm.Renew == 0 {
			h.req("b")
		}
	}
	lb = h.entry(r).LGN
	if lb == la {
		t.Fatalf("a's lease was not promoted: %+v", h.entry(r))
	}
	h.req("b") // b took the grant up, and acknowledges it
	return h, la, lb, r
}

// listsAsRenewal fails unless m lists lease lb as a renewal.
func listsAsRenewal(t *testing.T, m *protocol.LeaseResponse, lb keyspace.LGN, who string) {
	t.Helper()
	found := false
	for _, l := range m.Leases {
		if l.LGN != lb {
			continue
		}
		found = true
		if l.Grant || l.Promoted || l.Migrated {
			t.Fatalf("%s lists b's acknowledged promoted lease as %+v, want a renewal", who, l)
		}
	}
	if !found {
		t.Fatalf("%s does not list b's promoted lease #%d: %+v", who, lb, m.Leases)
	}
}

// TestPromotionAcknowledgedBeforeLeaderChange: a promoted grant the
// standby acknowledged is forgotten from the replicated state at once, so
// the next leader lists it as a renewal — the standby holds it — and
// sends its takeover push to the standby at once, as to any Owner
// (sendPushed withholds it only while a promoted grant is pending).
func TestPromotionAcknowledgedBeforeLeaderChange(t *testing.T) {
	h, _, lb, r := promotedAcked(t)
	if p, ok := h.c.st.ns[protocol.DefaultNamespace].promoted[lb]; ok {
		t.Fatalf("b acknowledged its promoted lease #%d, and its mark %+v is still in the replicated state", lb, p)
	}
	h.c = Resume(h.c.cfg, h.c.State().Clone(), 2<<32|1<<24, h.now.Add(10*ms))
	push := h.to(h.deliver(h.c.Ready()), "b") // raced: b's request acknowledges it
	listsAsRenewal(t, push, lb, "the new leader's takeover push")
	h.now = h.now.Add(20 * ms)
	listsAsRenewal(t, h.to(h.req("b"), "b"), lb, "the new leader's answer")
	if e := h.entry(r); e.Owner != "b" || e.LGN != lb {
		t.Fatalf("the range is %+v, want b's promoted lease #%d", e, lb)
	}
}

// TestPromotionRestored: `leasehold restore` (State.Refound, then a
// leader resumed from it) starts a new epoch, in which no request
// acknowledges a message of the old one; a promotion mark carried over
// would have the restored leader list the lease as a promoted grant — to
// tell its holder to serve the copy it kept as standby — for as long as
// it lives. No mark is carried over, acknowledged or not.
func TestPromotionRestored(t *testing.T) {
	h, _, lb, _ := promotedAcked(t)
	st := h.c.State().Clone()
	st.Refound(7, "m7:7000", 0)
	h.c = Resume(h.c.cfg, st, 2<<32|1<<24, h.now.Add(10*ms))
	pushed := false
	for _, m := range h.deliver(h.c.Ready()).Owners {
		pushed = pushed || m.To == "b"
	}
	h.now = h.now.Add(20 * ms)
	req := h.peers["b"].request()
	req.Zone = "y"
	if pushed { // b heard the new epoch's push (raced), and acknowledges it
		req.AckEpoch = h.c.Epoch()
	}
	listsAsRenewal(t, h.to(h.stepLease(h.now, req), "b"), lb, "the restored leader's answer")

	// Not acknowledged when the backup was taken: forgotten all the same.
	h, _, lb, _, _ = promotedThenDeposed(t, faults.Set{})
	st = h.c.State().Clone()
	if _, ok := st.ns[protocol.DefaultNamespace].promoted[lb]; !ok {
		t.Fatalf("the unacknowledged promoted lease #%d has no mark", lb)
	}
	st.Refound(7, "m7:7000", 0)
	if p := st.ns[protocol.DefaultNamespace].promotedList(); len(p) > 0 {
		t.Fatalf("marks %+v carried over into the restored epoch", p)
	}
}

// TestPromotionPushWithheld (rule 21): a new leader sends nothing to an
// Owner with a promoted grant pending in its session before the Owner's
// first request. A takeover push answers no request of the Owner's run
// (AckSeq 0), so the Owner cannot take a grant from it (rule 2) — yet its
// next request acknowledges it, and the leader would take the grant for
// seen and list the lease as a renewal from then on, which the Owner
// refuses: the range freed, the copy kept for it thrown away. Here the
// takeover push is delivered (promotedThenDeposed), and b must end up
// holding its promoted lease; faults.PromotionPushEarly (the push sent at
// once) breaks it, and the same check fails.
func TestPromotionPushWithheld(t *testing.T) {
	check := func(broken faults.Set) error {
		h, la, lb, r, m := promotedThenDeposed(t, broken)
		b := h.peers["b"]
		for range 3 {
			if err := h.c.StepLease(h.now, b.request()); err != nil {
				return err
			}
			for _, om := range h.c.Ready().Owners {
				if om.To == "b" {
					takeAsOwner(b, om.Msg)
				}
			}
			h.now = h.now.Add(tm.Renew)
			h.c.Tick(h.now)
			h.c.Ready()
		}
		if !holds(b.held, protocol.Lease{Range: r, LGN: lb}) {
			return fmt.Errorf("b holds %v, not its promoted lease %v#%d: it never heard the grant in a message it could take it from", b.held, r, lb)
		}
		if e := h.entry(r); e.Owner != "b" || e.LGN != lb {
			return fmt.Errorf("the range is %+v, want b's promoted lease #%d", e, lb)
		}
		if lost := h.lostSince(m); len(lost) > 0 {
			return fmt.Errorf("Lookups are told %v lost, promoted from #%d", lost, la)
		}
		return nil
	}
	caughtBy(t, check, faults.Set{PromotionPushEarly: true}, "a push the standby cannot take its grant from is acknowledged all the same")
}
