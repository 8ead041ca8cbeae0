package owner

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// trail records the messages a test exchanged with a Core, so that a test
// reads a compact form the way the other side does: HeldAsAcked against the
// response it acknowledges, RenewHeld against the request it answers.
type trail struct {
	reqs  map[uint64]*protocol.LeaseRequest
	resps map[[2]uint64]*protocol.LeaseResponse // the first delivered, by epoch and Seq
}

var (
	trailsMu sync.Mutex
	trails   = map[*Core]*trail{}
)

func trailOf(c *Core) *trail {
	trailsMu.Lock()
	defer trailsMu.Unlock()
	tr := trails[c]
	if tr == nil {
		tr = &trail{reqs: map[uint64]*protocol.LeaseRequest{}, resps: map[[2]uint64]*protocol.LeaseResponse{}}
		trails[c] = tr
	}
	return tr
}

func (tr *trail) sent(reqs []*protocol.LeaseRequest) {
	for _, r := range reqs {
		tr.reqs[r.Seq] = r
	}
}

func (tr *trail) heard(m *protocol.LeaseResponse) {
	if m.Namespace != ns || m.Owner != me || m.Incarnation != inc {
		return
	}
	k := [2]uint64{m.Epoch, m.Seq}
	if tr.resps[k] == nil {
		tr.resps[k] = m
	}
}

// listed returns the complete held set req names, as (range, LGN) pairs:
// its Held, or by HeldAsAcked the leases of the response it acknowledges.
func listed(t *testing.T, c *Core, req *protocol.LeaseRequest) []protocol.Lease {
	t.Helper()
	if !req.HeldAsAcked {
		return req.Held
	}
	if len(req.Held) > 0 {
		t.Fatalf("request %d says HeldAsAcked and lists %v", req.Seq, req.Held)
	}
	m := trailOf(c).resps[[2]uint64{req.AckEpoch, req.AckSeq}]
	if m == nil {
		t.Fatalf("request %d says HeldAsAcked of response %d/%d, which it never heard", req.Seq, req.AckEpoch, req.AckSeq)
	}
	var out []protocol.Lease
	for _, l := range leasesOf(t, c, m) {
		out = append(out, held(l.Range, l.LGN))
	}
	return out
}

// leasesOf returns the complete lease list of m: its Leases, or by
// RenewHeld renewals of what the request it answers held.
func leasesOf(t *testing.T, c *Core, m *protocol.LeaseResponse) []protocol.Lease {
	t.Helper()
	if !m.RenewHeld {
		return m.Leases
	}
	req := trailOf(c).reqs[m.AckSeq]
	if req == nil {
		t.Fatalf("response %d renews the Held of request %d, which was never sent", m.Seq, m.AckSeq)
	}
	var out []protocol.Lease
	for _, l := range listed(t, c, req) {
		out = append(out, renew(l.Range, l.LGN))
	}
	return out
}

// renewHeld is a RenewHeld response: it renews what request ack held.
func renewHeld(seq, ack uint64) *protocol.LeaseResponse {
	m := resp(seq, ack)
	m.RenewHeld = true
	return m
}

// compact fails t unless req is in the compact form and acknowledges
// response ack.
func compact(t *testing.T, req *protocol.LeaseRequest, ack uint64) {
	t.Helper()
	if !req.HeldAsAcked || len(req.Held) != 0 || req.AckSeq != ack || req.AckEpoch != epoch {
		t.Fatalf("request %d: HeldAsAcked %v Held %v AckEpoch %d AckSeq %d, want the compact form acknowledging %d/%d",
			req.Seq, req.HeldAsAcked, req.Held, req.AckEpoch, req.AckSeq, epoch, ack)
	}
}

// full fails t unless req lists exactly want in full.
func full(t *testing.T, req *protocol.LeaseRequest, want ...protocol.Lease) {
	t.Helper()
	if req.HeldAsAcked || !slices.Equal(req.Held, want) {
		t.Fatalf("request %d: HeldAsAcked %v Held %v, want %v listed in full", req.Seq, req.HeldAsAcked, req.Held, want)
	}
}

// TestCompactSteadyState: while nothing changes, a renewal says "I hold
// what you last sent" and the answer says "renewed, all you hold" — and
// each means exactly the complete set it stands for.
func TestCompactSteadyState(t *testing.T) {
	a, b := rng(0, 100), rng(100, 200)
	c := started(t, grant(a, 5), grant(b, 6))

	// The grants are held exactly as response 1 listed them: the first
	// renewal says so, before any echo of them in full — the Manager
	// expands it with the same list.
	req := one(t, tick(c, at(500*ms)).reqs)
	compact(t, req, 1)
	if got, want := listed(t, c, req), []protocol.Lease{held(a, 5), held(b, 6)}; !slices.Equal(got, want) {
		t.Fatalf("request 2 stands for %v, want %v", got, want)
	}

	// RenewHeld renews what request 2 held, from when it was sent.
	step(c, at(600*ms), renewHeld(2, 2)).none(t)
	for _, l := range c.Held(at(600 * ms)) {
		if want := at(500*ms + tm.OwnerLease); !l.Expiry.Equal(want) {
			t.Fatalf("lease %v expires at %v, want %v: RenewHeld did not renew it", l.Range, l.Expiry, want)
		}
	}
	if got, want := heldSet(c.Held(at(600*ms))), []protocol.Lease{held(a, 5), held(b, 6)}; !slices.Equal(got, want) {
		t.Fatalf("held %v, want %v", got, want)
	}

	// And so on: the next renewal acknowledges the compact answer, still
	// in the compact form.
	req = one(t, tick(c, at(time.Second)).reqs)
	compact(t, req, 2)
	if got, want := listed(t, c, req), []protocol.Lease{held(a, 5), held(b, 6)}; !slices.Equal(got, want) {
		t.Fatalf("request 3 stands for %v, want %v", got, want)
	}
}

// TestCompactFallsBackToFull: whenever the held set is not exactly the list
// of the message the request acknowledges, the request lists it in full.
func TestCompactFallsBackToFull(t *testing.T) {
	a, b := rng(0, 100), rng(100, 200)

	t.Run("after a refusal", func(t *testing.T) {
		c := started(t, grant(a, 5))
		req := one(t, tick(c, at(500*ms)).reqs)
		// A renewal of b, which the Owner never held, is refused.
		ack := one(t, step(c, at(600*ms), resp(2, req.Seq, renew(a, 5), renew(b, 6))).reqs)
		full(t, ack, held(a, 5))
		// Once the Manager's answer lists what it holds, compact again.
		step(c, at(700*ms), resp(3, ack.Seq, renew(a, 5))).none(t)
		compact(t, one(t, tick(c, c.NextDeadline()).reqs), 3)
	})

	t.Run("after giving a range up for a handover", func(t *testing.T) {
		c := withHandovers(t, true)
		req := one(t, tick(c, at(tm.Renew)).reqs)
		r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
		c.HandoverDone(at(tm.Renew+20*ms), r.chs[0].Handovers[0], true)
		full(t, one(t, tick(c, at(tm.Renew+20*ms)).reqs), held(lo, 3))
	})

	t.Run("after declining a handover", func(t *testing.T) {
		c := withHandovers(t, false)
		req := one(t, tick(c, at(tm.Renew)).reqs)
		r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
		full(t, one(t, r.reqs), held(lo, 3))
	})

	t.Run("after a raced recall", func(t *testing.T) {
		c := started(t, grant(a, 5), grant(b, 6))
		compact(t, one(t, tick(c, at(500*ms)).reqs), 1)
		// The Manager recalls b in a message that raced request 2: the
		// Owner drops it but has heard it, so its next request
		// acknowledges it — while it still holds b. That request must
		// list the set in full: the compact form would say "I hold what
		// message 2 lists", and the Manager would release b.
		step(c, at(600*ms), resp(2, 1, renew(a, 5))).none(t)
		req := one(t, tick(c, c.NextDeadline()).reqs)
		if req.AckSeq != 2 {
			t.Fatalf("resend acknowledges %d, want 2", req.AckSeq)
		}
		full(t, req, held(a, 5), held(b, 6))
	})

	t.Run("raced message listing the held set", func(t *testing.T) {
		// A raced message that lists exactly what the Owner holds is as
		// good as any: the request acknowledging it can be compact.
		c := started(t, grant(a, 5), grant(b, 6))
		one(t, tick(c, at(500*ms)).reqs)
		step(c, at(600*ms), resp(2, 1, renew(a, 5), renew(b, 6))).none(t)
		req := one(t, tick(c, c.NextDeadline()).reqs)
		compact(t, req, 2)
		if got, want := listed(t, c, req), []protocol.Lease{held(a, 5), held(b, 6)}; !slices.Equal(got, want) {
			t.Fatalf("request stands for %v, want %v", got, want)
		}
	})
}

// TestRenewHeldOfForgottenRequest: the Owner keeps the Held of its last
// sentHeldKept requests. A malformed RenewHeld is dropped as if lost — not
// even its Seq is heard. A RenewHeld answer to an older request raced with
// the later ones, and is handled as raced: acknowledged, with a resend
// after a backoff (not at the next renewal), in full.
func TestRenewHeldOfForgottenRequest(t *testing.T) {
	a := rng(0, 100)
	c := started(t, grant(a, 5))
	now := at(200 * ms)
	var last *protocol.LeaseRequest
	for range sentHeldKept + 1 { // requests 2 … sentHeldKept+2
		c.Reconnected(now)
		last = one(t, readyOf(c).reqs)
		now = now.Add(ms)
	}
	deadline := c.NextDeadline()
	malformed := renewHeld(2, last.Seq)
	malformed.Leases = []protocol.Lease{renew(a, 5)}
	step(c, now, malformed).none(t)
	if got := c.NextDeadline(); !got.Equal(deadline) {
		t.Fatalf("after a malformed RenewHeld: NextDeadline %v, want %v: it was not dropped", got, deadline)
	}
	step(c, now, renewHeld(2, 2)).none(t) // request 2 is forgotten
	resend := c.NextDeadline()
	if !resend.Before(deadline) || resend.After(now.Add(tm.BackoffMax)) {
		t.Fatalf("after a RenewHeld to a forgotten request: next request at %v, want a resend within the backoff (by %v)", resend, now.Add(tm.BackoffMax))
	}
	req := one(t, tick(c, resend).reqs)
	if req.AckSeq != 2 || req.HeldAsAcked || len(req.Held) != 1 {
		t.Fatalf("the resend acknowledges %d (HeldAsAcked %v, Held %v), want 2, in full", req.AckSeq, req.HeldAsAcked, req.Held)
	}
	if !c.CheckLeaseContinuous(now, 50, num(5)) {
		t.Fatal("a RenewHeld to a forgotten request cost the Owner its lease")
	}
	// The answer to the resend renews the lease from it.
	recv := resend.Add(10 * ms)
	step(c, recv, renewHeld(3, req.Seq)).none(t)
	if l := c.Held(recv); len(l) != 1 || !l[0].Expiry.Equal(resend.Add(tm.OwnerLease)) ||
		!c.CheckLeaseContinuous(recv, 50, num(5)) {
		t.Fatalf("held %+v, want a/5 renewed until %v", l, resend.Add(tm.OwnerLease))
	}
}
