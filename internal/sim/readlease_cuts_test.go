package sim

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/protocol"
)

// oneWayScenario runs a group of managers replicas, every one a read-lease
// holder, on a network that loses nothing, with no fault but one-way cuts
// between replicas: every ordered pair in turn (starting at a pair the
// seed picks), each cut for two OwnerLeases, every other one with a stall
// of a replica of the pair that does not lead, for half the cut. The
// leader and a quorum stay connected throughout, so no Owner may lose a
// lease (NoLosses) and no answer may be held past the bound (the write
// liveness checker), besides linearizability.
func oneWayScenario(managers int, broken *faults.Set) func(uint64) Config {
	return func(seed uint64) Config {
		t := protocol.Fast()
		var pairs [][2]int
		for a := range managers {
			for b := range managers {
				if a != b {
					pairs = append(pairs, [2]int{a, b})
				}
			}
		}
		cut, gap := 2*t.OwnerLease, t.OwnerLease
		c := Config{Seed: seed, Managers: managers, Owners: 16, Lookups: 4, Timing: t,
			FaultTime: gap + time.Duration(len(pairs))*(cut+gap), MinDelay: 2 * time.Millisecond, ClockSkew: true,
			ReadLease: &ReadLeaseConfig{Lease: replica.ReadLease{All: true}, NoLosses: true}, Break: broken,
			// Writes throughout, none of them a loss: Owners join one
			// after another over the whole run, and take their ranges
			// over from the others with their state.
			Migration: true}
		c.StartSpread = c.FaultTime
		c.Script = func(ctl *Control) {
			for k := range pairs {
				p := pairs[(k+int(seed))%len(pairs)]
				ctl.At(gap+time.Duration(k)*(cut+gap), func() {
					ctl.CutOneWay(p[0], p[1], cut)
					if k%2 == 1 {
						stalled := p[0]
						if stalled == ctl.Leader() {
							stalled = p[1]
						}
						ctl.StallManager(stalled, cut/2)
					}
				})
			}
		}
		return c
	}
}

// TestReadLeaseOneWayCuts cuts every pair of 3 replicas (and, with
// -sim.long, of 5) one way, in both directions, alone and with a stall: no
// violation of any checker, no lease lost.
func TestReadLeaseOneWayCuts(t *testing.T) {
	t.Parallel()
	groups, n := []int{3}, 2
	if *longFlag {
		groups, n = []int{3, 5}, 20
	}
	for _, managers := range groups {
		results := seeds(t, sweepSeeds(n), oneWayScenario(managers, nil))
		var ls LeaseStats
		stalls, failed := 0, false
		for _, r := range results {
			if r.Violation != nil {
				t.Error(replay(t, r))
				failed = true
			}
			ls.add(r.Leases)
			stalls += r.Stats.Stalls
		}
		t.Logf("%d seeds, %d replicas: %d one-way cuts (%d with a stall), %d lease reads, %d held answers, the longest held %s; %d losses",
			len(results), managers, ls.OneWayCuts, stalls, ls.Reads, ls.Held, ls.LongestHold, total(results).LossEvents)
		if !failed && ls.OneWayCuts < len(results)*managers*(managers-1) {
			t.Errorf("%d one-way cuts over %d seeds: not every pair was cut", ls.OneWayCuts, len(results))
		}
	}
}
