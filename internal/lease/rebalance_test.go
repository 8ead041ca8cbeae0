package lease

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
	h := joinedCfg(t, Settings{Rebalance: pol, RebalanceEvery: time.Second, Handover: -1}, a, b, c)
	d0 := h.c.Desired(protocol.DefaultNamespace)
	if len(d0) == 0 {
		t.Fatal("no desired assignment")
	}
	if got := h.c.State().ns[protocol.DefaultNamespace].desired; !slices.Equal(got, d0) {
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
		for _, s := range h.c.Desired(protocol.DefaultNamespace) {
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
	if got := h.c.State().ns[protocol.DefaultNamespace].desired; !slices.Equal(got, h.c.Desired(protocol.DefaultNamespace)) {
		t.Fatalf("the new desired assignment is not in the replicated state")
	}

	// A new leader resumes from the replicated assignment.
	r := Resume(Settings{Timing: tm, Rebalance: pol, RebalanceEvery: time.Second}, h.c.State(), 7<<32, now.Add(2*time.Second))
	if !slices.Equal(r.Desired(protocol.DefaultNamespace), h.c.Desired(protocol.DefaultNamespace)) {
		t.Fatalf("after takeover the desired assignment is %v, want the replicated one", r.Desired(protocol.DefaultNamespace))
	}
}

// TestJoinsWhileNothingHeld: Owners that join one by one while a new
// Manager holds every range back (its first ManagerLease) are placed by
// consistent hashing, not walked there a budgeted round at a time: no move
// costs a handover yet.
func TestJoinsWhileNothingHeld(t *testing.T) {
	pol, err := rebalance.Weighted(rebalance.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ps := []*peer{newPeer("a"), newPeer("b"), newPeer("c"), newPeer("d")}
	h := newHarnessCfg(t, Settings{Rebalance: pol, Handover: -1}, ps...)
	for i, p := range ps {
		h.send(base.Add(time.Duration(i)*100*ms), p) // a round per join, or per MembershipEvery
	}
	h.tick(h.c.NextDeadline()) // the round of the joins still waiting
	// A budgeted walk from everything on the first to join would leave a
	// with most of the key space; consistent hashing gives each about a
	// quarter, and the round after it moves at most a tenth.
	shares := map[string]float64{}
	for _, s := range h.c.Desired(protocol.DefaultNamespace) {
		shares[s.Owner] += s.Range.Size() / (1 << 64)
	}
	for _, p := range ps {
		if sh := shares[p.id]; sh < 0.15 || sh > 0.35 {
			t.Fatalf("after four joins with nothing held %s's share of the key space is %.3f; want about a quarter (%v)", p.id, sh, shares)
		}
	}
}

// TestLoadRoundWaitsForEveryReport: a round for load alone is planned only
// once every Owner has reported since the last round, so no round mixes a
// fresh report with one from before the last round's moves.
func TestLoadRoundWaitsForEveryReport(t *testing.T) {
	pol, err := rebalance.Weighted(rebalance.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newPeer("a"), newPeer("b")
	every := 200 * ms // well inside a ManagerLease, so both stay members throughout
	h := joinedCfg(t, Settings{Rebalance: pol, RebalanceEvery: every, Handover: -1}, a, b)
	report := func(now time.Time, p *peer) {
		req := p.request()
		req.Window = time.Second
		for _, l := range p.held {
			req.Load = append(req.Load, protocol.RangeLoad{Range: l.Range, Requests: 100})
		}
		h.stepLease(now, req)
	}
	now := restartEnd.Add(100 * ms)
	report(now, a)
	report(now, b)
	h.tick(now.Add(every))
	plans := h.c.Stats().Plans
	if plans == 0 {
		t.Fatal("no round after both Owners reported")
	}
	// Only a reports again: the next rounds wait.
	report(now.Add(2*every), a)
	for i := 3; i <= 6; i++ {
		h.tick(now.Add(time.Duration(i) * every))
	}
	if got := h.c.Stats().Plans; got != plans {
		t.Fatalf("%d rounds planned with only one of two Owners reporting since the last; want none", got-plans)
	}
	report(now.Add(6*every+ms), b)
	h.tick(now.Add(7 * every))
	if got := h.c.Stats().Plans; got != plans+1 {
		t.Fatalf("%d rounds after both reported again; want one", got-plans)
	}
}
