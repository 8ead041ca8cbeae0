package owner

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

var (
	lo = rng(0, 1<<62)
	hi = rng(1<<62, 1<<63)
)

func handover(r keyspace.Range, lgn keyspace.LGN) protocol.Handover {
	return protocol.Handover{Range: r, LGN: lgn, To: "o2", Addr: "o2:7000", Incarnation: 9, Within: time.Second}
}

// withHandovers returns a core of an application that hands state over,
// holding lo (LGN 3) and hi (LGN 4) from request 1.
func withHandovers(t *testing.T, handovers bool) *Core {
	t.Helper()
	c := NewCore(CoreConfig{Namespace: ns, ID: me, Addr: "o1:7000", Incarnation: inc, Timing: tm, Seed: 1, Handovers: handovers})
	one(t, tick(c, base).reqs)
	step(c, at(100*ms), resp(1, 1, grant(lo, 3), grant(hi, 4)))
	return c
}

// TestHandoverUpcallOnce: a planned move reaches the application once, with
// the target and a deadline on the Owner's clock, although the Manager asks
// again in every message; the lease stays held meanwhile.
func TestHandoverUpcallOnce(t *testing.T) {
	c := withHandovers(t, true)
	req := one(t, tick(c, at(tm.Renew)).reqs)
	r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
	if len(r.reqs) != 0 || len(r.chs) != 1 || len(r.chs[0].Handovers) != 1 {
		t.Fatalf("got %+v, want one change asking for one handover", r)
	}
	h := r.chs[0].Handovers[0]
	want := Handover{Range: hi, Lease: num(4), To: "o2", Addr: "o2:7000", Incarnation: 9, Deadline: at(tm.Renew + 10*ms + time.Second)}
	if h != want {
		t.Fatalf("handover %+v, want %+v", h, want)
	}
	if _, ok := c.CheckLeaseNow(at(tm.Renew+20*ms), hi.Start); !ok {
		t.Fatal("the range being handed over is no longer held")
	}
	req = one(t, tick(c, at(2*tm.Renew)).reqs)
	if r := step(c, at(2*tm.Renew+10*ms), asking(resp(3, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4))); len(r.chs) != 0 {
		t.Fatalf("the repeated handover was passed up again: %+v", r.chs)
	}

	// Done: the range is given up at once, and reported handed in every
	// request for an owner lease.
	c.HandoverDone(at(2*tm.Renew+50*ms), h, true)
	r = readyOf(c)
	if len(r.reqs) != 0 {
		t.Fatalf("HandoverDone sent %v at once; want it at the next Tick, with any other handover done meanwhile", r.reqs)
	}
	if d := c.NextDeadline(); !d.Equal(at(2*tm.Renew + 50*ms)) {
		t.Fatalf("NextDeadline = %v, want now", d)
	}
	req = one(t, tick(c, at(2*tm.Renew+50*ms)).reqs)
	if len(r.chs) != 1 || !slices.Equal(r.chs[0].Revoked, []keyspace.Range{hi}) {
		t.Fatalf("changes %+v, want hi revoked", r.chs)
	}
	wantHanded := []protocol.Handed{{Range: hi, LGN: 4, To: "o2", Incarnation: 9}}
	if !slices.Equal(req.Handed, wantHanded) || !slices.Equal(listed(t, c, req), []protocol.Lease{held(lo, 3)}) {
		t.Fatalf("request held %v handed %v, want lo held and hi handed", listed(t, c, req), req.Handed)
	}
	req = one(t, tick(c, at(3*tm.Renew+50*ms)).reqs)
	if !slices.Equal(req.Handed, wantHanded) {
		t.Fatalf("the next request handed %v, want the report repeated", req.Handed)
	}
	req = one(t, tick(c, at(2*tm.Renew+50*ms+tm.OwnerLease)).reqs)
	if len(req.Handed) != 0 {
		t.Fatalf("a request an owner lease later still reports %v handed", req.Handed)
	}
	// A second HandoverDone for the same move does nothing.
	c.HandoverDone(at(5*tm.Renew), h, true)
	readyOf(c).none(t)
}

// TestHandoverNotOK: an application that could not hand over keeps the
// lease; the Manager recalls it at the deadline.
func TestHandoverNotOK(t *testing.T) {
	c := withHandovers(t, true)
	req := one(t, tick(c, at(tm.Renew)).reqs)
	r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
	c.HandoverDone(at(tm.Renew+20*ms), r.chs[0].Handovers[0], false)
	readyOf(c).none(t)
	if _, ok := c.CheckLeaseNow(at(tm.Renew+30*ms), hi.Start); !ok {
		t.Fatal("a failed handover gave the range up")
	}
}

// TestHandoverDeclined: an Owner whose application does not hand state over
// gives a range up at once when asked to, as if recalled.
func TestHandoverDeclined(t *testing.T) {
	c := withHandovers(t, false)
	req := one(t, tick(c, at(tm.Renew)).reqs)
	r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
	req = one(t, r.reqs)
	if len(r.chs) != 1 || !slices.Equal(r.chs[0].Revoked, []keyspace.Range{hi}) || len(r.chs[0].Handovers) != 0 {
		t.Fatalf("changes %+v, want hi revoked and no handover passed up", r.chs)
	}
	if !slices.Equal(listed(t, c, req), []protocol.Lease{held(lo, 3)}) || len(req.Handed) != 0 {
		t.Fatalf("request held %v handed %v, want lo only, nothing handed", listed(t, c, req), req.Handed)
	}
}

// TestMigratedGrant: a grant marked migrated reaches the application so,
// and the drain answer is kept.
func TestMigratedGrant(t *testing.T) {
	c := newCore(t)
	c.Drain(base)
	req := one(t, readyOf(c).reqs)
	if !req.Draining {
		t.Fatal("Drain sent a request without Draining")
	}
	m := resp(1, req.Seq, protocol.Lease{Range: lo, LGN: 5, Grant: true, Migrated: true}, grant(hi, 6))
	m.Drain = protocol.DrainWaiting
	r := step(c, at(10*ms), m)
	if len(r.chs) != 1 || len(r.chs[0].Granted) != 2 || !r.chs[0].Granted[0].Migrated || r.chs[0].Granted[1].Migrated {
		t.Fatalf("changes %+v, want lo granted migrated and hi not", r.chs)
	}
	if st, heard := c.DrainState(); st != protocol.DrainWaiting || !heard {
		t.Fatalf("DrainState = %v %v, want waiting, heard", st, heard)
	}
}

// asking adds planned moves to a response.
func asking(m *protocol.LeaseResponse, hs ...protocol.Handover) *protocol.LeaseResponse {
	m.Handovers = hs
	return m
}

// TestRacedGrantAdopted: a grant in a message that raced the Owner's
// request is taken up anyway, timed from the request it answers; otherwise
// the next request, which acknowledges that message, would read as its
// release, and a migrated grant's state would be lost.
func TestRacedGrantAdopted(t *testing.T) {
	c := withHandovers(t, true) // lo (3) and hi (4) from request 1 sent at base
	req2 := one(t, tick(c, at(tm.Renew)).reqs)
	req3 := one(t, tick(c, at(tm.Renew+tm.BackoffMax+tm.Renew)).reqs) // the answer to 2 is late
	mid := rng(1<<63, 1<<63+1<<62)
	m := resp(2, req2.Seq, renew(lo, 3), renew(hi, 4), protocol.Lease{Range: mid, LGN: 8, Grant: true, Migrated: true})
	r := step(c, at(2*tm.Renew+tm.BackoffMax+10*ms), m)
	if len(r.chs) != 1 || len(r.chs[0].Granted) != 1 || r.chs[0].Granted[0].Range != mid || !r.chs[0].Granted[0].Migrated {
		t.Fatalf("changes %+v, want the raced grant of mid taken up, migrated", r.chs)
	}
	if got, want := r.chs[0].Granted[0].Expiry, at(tm.Renew+tm.OwnerLease); !got.Equal(want) {
		t.Fatalf("the raced grant runs until %v, want from request %d's send: %v", got, req2.Seq, want)
	}
	next := one(t, tick(c, at(2*tm.Renew+2*tm.BackoffMax+10*ms)).reqs) // the race resend
	if !slices.Contains(listed(t, c, next), held(mid, 8)) || next.AckSeq != 2 || next.Seq <= req3.Seq {
		t.Fatalf("the next request holds %v (ack %d), want mid listed", listed(t, c, next), next.AckSeq)
	}
}

// TestRepeatedGrantAfterGiveUp: the Manager lists a grant in every message
// until a request acknowledges it, so a message it sent before it learned
// the Owner handed the range over may list it again. The Owner refuses it
// (believing the lease again after a gap would vouch for state it gave
// away) until the Manager answers a request sent after the give-up.
func TestRepeatedGrantAfterGiveUp(t *testing.T) {
	c := withHandovers(t, true)
	req := one(t, tick(c, at(tm.Renew)).reqs)
	r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
	h := r.chs[0].Handovers[0]
	c.HandoverDone(at(tm.Renew+20*ms), h, true)
	handedReq := one(t, tick(c, at(tm.Renew+20*ms)).reqs)

	// An answer to the request before, still listing hi as a grant: raced.
	step(c, at(tm.Renew+30*ms), resp(3, req.Seq, renew(lo, 3), grant(hi, 4)))
	if _, ok := c.CheckLeaseNow(at(tm.Renew+31*ms), hi.Start); ok {
		t.Fatal("a raced message's repeated grant gave back the range handed over")
	}
	// An answer to the latest request that still lists it (the Manager
	// had not yet processed the report): refused, and said so at once.
	r = step(c, at(tm.Renew+40*ms), resp(4, handedReq.Seq, renew(lo, 3), grant(hi, 4)))
	if _, ok := c.CheckLeaseNow(at(tm.Renew+41*ms), hi.Start); ok {
		t.Fatal("a repeated grant gave back the range handed over")
	}
	if len(r.chs) != 0 {
		t.Fatalf("changes %+v for a refused grant", r.chs)
	}
	refusal := one(t, r.reqs)
	if !slices.Equal(listed(t, c, refusal), []protocol.Lease{held(lo, 3)}) {
		t.Fatalf("the refusal holds %v, want lo only", listed(t, c, refusal))
	}
	// Once the Manager has answered a request sent after the give-up, the
	// Owner forgets it: a grant of LGN 4 can no longer come.
	step(c, at(tm.Renew+50*ms), resp(5, refusal.Seq, renew(lo, 3)))
	if len(c.gone) != 0 {
		t.Fatalf("still remembers %v given up after the Manager answered", c.gone)
	}
}

// TestRepeatedGrantTakenOnce: a grant listed again in the next message, the
// first having been lost, is taken up there; listed again once held, it
// renews the lease without a second upcall.
func TestRepeatedGrantTakenOnce(t *testing.T) {
	c := newCore(t)
	req := one(t, tick(c, base).reqs)
	// resp 1 (granting lo) was lost; resp 2 repeats it.
	r := step(c, at(100*ms), resp(2, req.Seq, grant(lo, 3)))
	if len(r.chs) != 1 || len(r.chs[0].Granted) != 1 {
		t.Fatalf("changes %+v, want lo granted", r.chs)
	}
	req = one(t, tick(c, at(tm.Renew)).reqs)
	r = step(c, at(tm.Renew+10*ms), resp(3, req.Seq, grant(lo, 3)))
	if len(r.chs) != 0 || len(r.reqs) != 0 {
		t.Fatalf("a repeated grant of a held lease changed %+v, sent %v", r.chs, r.reqs)
	}
	if l := c.Held(at(tm.Renew + 20*ms)); len(l) != 1 || !l[0].Expiry.Equal(at(tm.Renew+tm.OwnerLease)) {
		t.Fatalf("held %+v, want lo renewed from the request at %v", l, at(tm.Renew))
	}
}
