package owner

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// confirming returns a core with ConfirmReleases that sent request 1 at
// base and was granted leases by the answer, received at base+100ms.
func confirming(t *testing.T, leases ...protocol.Lease) *Core {
	t.Helper()
	c := NewCore(CoreConfig{Namespace: ns, ID: me, Addr: "o1:7000", Incarnation: inc, Timing: tm, Seed: 1, ConfirmReleases: true})
	one(t, tick(c, base).reqs)
	if reqs := step(c, at(100*ms), resp(1, 1, leases...)).reqs; len(reqs) != 0 {
		t.Fatalf("grant at start: unexpected requests %v", reqs)
	}
	return c
}

// TestConfirmReleasesKeepsRecallListed: with ConfirmReleases a recalled
// range is reported revoked and refused by CheckLeaseNow at once, but the
// request that follows still lists it, and so does every one until
// Released names it: the Manager must not free a range the agent's
// application may still serve. Without ConfirmReleases the recall is
// acknowledged by omission at once, as before.
func TestConfirmReleasesKeepsRecallListed(t *testing.T) {
	for _, confirm := range []bool{false, true} {
		c := started(t, grant(rng(0, 100), 5), grant(rng(100, 200), 6))
		if confirm {
			c = confirming(t, grant(rng(0, 100), 5), grant(rng(100, 200), 6))
		}
		r := step(c, at(600*ms), resp(2, 1, renew(rng(0, 100), 5))) // [100,200) recalled
		if len(r.chs) != 1 || !slices.Equal(r.chs[0].Revoked, []keyspace.Range{rng(100, 200)}) {
			t.Fatalf("confirm=%v: changes %+v, want [100,200) revoked", confirm, r.chs)
		}
		if _, ok := c.CheckLeaseNow(at(600*ms), 150); ok {
			t.Fatalf("confirm=%v: CheckLeaseNow holds a recalled key", confirm)
		}
		req := one(t, r.reqs)
		want := []protocol.Lease{held(rng(0, 100), 5)}
		if confirm {
			want = append(want, held(rng(100, 200), 6))
		}
		if got := expanded(c, req); !slices.Equal(got, want) {
			t.Fatalf("confirm=%v: the request after the recall lists %v, want %v", confirm, got, want)
		}
		if !confirm {
			continue
		}
		// A renewal of the listed piece is neither taken up nor refused.
		if r := step(c, at(700*ms), resp(3, req.Seq, renew(rng(0, 100), 5), renew(rng(100, 200), 6))); len(r.reqs) != 0 || len(r.chs) != 0 {
			t.Fatalf("a renewal of a piece being released: requests %v, changes %+v, want none", r.reqs, r.chs)
		}
		if _, ok := c.CheckLeaseNow(at(700*ms), 150); ok {
			t.Fatal("a renewal of a piece being released made it held again")
		}
		req = one(t, tick(c, at(600*ms+tm.Renew)).reqs)
		if got := expanded(c, req); !slices.Equal(got, want) {
			t.Fatalf("the renewal before Released lists %v, want %v", got, want)
		}
		c.Released(at(1200*ms), []keyspace.Range{rng(100, 200)})
		req = one(t, tick(c, at(1200*ms)).reqs)
		if got := expanded(c, req); !slices.Equal(got, []protocol.Lease{held(rng(0, 100), 5)}) {
			t.Fatalf("the request after Released lists %v, want only [0,100)", got)
		}
	}
}

// TestConfirmReleasesEndsWithTheLease: a piece never Released stops being
// listed when its lease would have run out (the application's deadline
// for it has passed by then), and Leave lists nothing.
func TestConfirmReleasesEndsWithTheLease(t *testing.T) {
	c := confirming(t, grant(rng(0, 100), 5))
	r := step(c, at(600*ms), resp(2, 1)) // recalled
	if got := expanded(c, one(t, r.reqs)); !slices.Equal(got, []protocol.Lease{held(rng(0, 100), 5)}) {
		t.Fatalf("after the recall the request lists %v, want [0,100)", got)
	}
	req := one(t, tick(c, at(tm.OwnerLease)).reqs) // past the lease (sent at base)
	if got := expanded(c, req); len(got) != 0 {
		t.Fatalf("past the lease the request lists %v, want nothing", got)
	}

	c = confirming(t, grant(rng(0, 100), 5))
	step(c, at(600*ms), resp(2, 1))
	c.Leave(at(700 * ms))
	if req := readyOf(c).reqs; len(req) != 1 || len(expanded(c, req[0])) != 0 {
		t.Fatalf("Leave: requests %v, want one listing nothing", req)
	}
}

// expanded is the held set a request stands for.
func expanded(c *Core, req *protocol.LeaseRequest) []protocol.Lease {
	if req.HeldAsAcked {
		return c.peerLeases
	}
	return req.Held
}
