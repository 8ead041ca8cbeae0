package lease

import (
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
