package manager

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

// TestLoadAwareDesired: with a load-aware policy the desired assignment
// starts as consistent hashing, is replicated, and moves ranges off an
// Owner whose reports show it carries most of the load, within a round.
func TestLoadAwareDesired(t *testing.T) {
	pol, err := rebalance.Weighted(rebalance.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
	h := joinedCfg(t, CoreConfig{Rebalance: pol, RebalanceEvery: time.Second, Handover: -1}, a, b, c)
	d0 := h.c.Desired(DefaultNamespace)
	if len(d0) == 0 {
		t.Fatal("no desired assignment")
	}
	if got := h.c.State().ns[DefaultNamespace].desired; !slices.Equal(got, d0) {
		t.Fatalf("the desired assignment is not in the replicated state")
	}
	share := func(d []keyspace.Range) float64 {
		n := 0.0
		for _, r := range d {
			n += r.Size()
		}
		return n
	}
	wantA := func() []keyspace.Range {
		var out []keyspace.Range
		for _, s := range h.c.Desired(DefaultNamespace) {
			if s.Owner == "a" {
				out = append(out, s.Range)
			}
		}
		return out
	}
	before := share(wantA())

	// a reports 1000 requests/s on each of its ranges; b and c report 1.
	now := restartEnd.Add(100 * ms)
	for _, p := range []*peer{a, b, c} {
		req := p.request()
		req.Window = time.Second
		for _, l := range p.held {
			n := uint64(1)
			if p == a {
				n = 1000
			}
			req.Load = append(req.Load, protocol.RangeLoad{Range: l.Range, Requests: n})
		}
		h.stepLease(now, req)
	}
	h.tick(now.Add(time.Second))
	if h.c.Stats().Plans == 0 || h.c.Stats().PlannedMoves == 0 {
		t.Fatalf("stats %+v: no round moved anything off the loaded owner", h.c.Stats())
	}
	if after := share(wantA()); after >= before {
		t.Fatalf("a's desired share went from %g to %g of the key space; want it smaller", before, after)
	}
	if got := h.c.State().ns[DefaultNamespace].desired; !slices.Equal(got, h.c.Desired(DefaultNamespace)) {
		t.Fatalf("the new desired assignment is not in the replicated state")
	}

	// A new leader resumes from the replicated assignment.
	r := Resume(CoreConfig{Timing: tm, Rebalance: pol, RebalanceEvery: time.Second}, h.c.State(), 7<<32, now.Add(2*time.Second))
	if !slices.Equal(r.Desired(DefaultNamespace), h.c.Desired(DefaultNamespace)) {
		t.Fatalf("after takeover the desired assignment is %v, want the replicated one", r.Desired(DefaultNamespace))
	}
}
