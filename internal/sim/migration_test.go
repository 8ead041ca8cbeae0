package sim

import (
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/rebalance"
)

// migrating is the faulty run of seed s with Owners whose application
// hands state over on planned moves (one run in eight declines, one
// handover in sixteen is given up, and the network loses the state or its
// acknowledgement like any message), and that restart gracefully — drain,
// leave, start again — about every other OwnerLease, two at most at once.
//
// Every other pair of seeds adds load-aware rebalancing: Zipf(0.8) load
// over 10,000 keys, Owners of capacities 1, 2 and 4, and the Weighted
// policy planning every 2 s, so planned moves follow the load as well as
// the membership.
func migrating(s uint64) Config {
	c := scenario(s)
	c.Migration, c.AppFaults = true, true
	c.DrainEvery = 2 * c.Timing.OwnerLease
	c.DrainGate = 2
	if s%4 >= 2 {
		c.Workload, c.Rate = smallZipf(), 10_000
		c.Capacities = []float64{1, 2, 4}
		c.Rebalance, c.RebalanceEvery = weighted, 2*time.Second
		// After the faults the policy has the crashes' imbalance to undo,
		// a budgeted round at a time, before the table can settle.
		c.SettleTime = ConvergenceBound(c.Timing) + 30*time.Second
	}
	return c
}

var (
	smallZipf = sync.OnceValue(func() *rebalance.Workload { return rebalance.Zipf(10_000, 0.8) })
	weighted  = func() rebalance.Policy {
		p, err := rebalance.Weighted(rebalance.Config{Interval: 2 * time.Second, SplitLoad: 0.25})
		if err != nil {
			panic(err)
		}
		return p
	}()
)

// TestSimulationMigration runs the faulty sweep with planned moves: every
// migrated grant an Owner takes up must carry the state it names (the
// migration checker), and every move that falls back to a recall must be
// reported lost in time (recovery notification), besides single copy,
// continuity and convergence.
//
// It runs half as many seeds as the other sweeps (4 by default, 100 with
// -sim.long), and a twentieth (at least one) under the race detector: its runs cost more,
// a rebalancing one several times a plain one, and the plain protocol under
// them is swept by TestSimulationFaulty.
func TestSimulationMigration(t *testing.T) {
	t.Parallel()
	n := max(sweepSize()/2, requiredSeeds)
	if raceEnabled && *soakFlag == 0 {
		n = sweepSize() / 20
	}
	results := seeds(t, max(n, 1), migrating)
	tot := sweep(t, results, func(s Stats) map[string]int {
		return map[string]int{
			"graceful restarts": s.Drains, "handovers": s.Handovers, "handovers done": s.HandoversDone,
			"handovers given up": s.HandoversGivenUp, "migrated grants": s.MigratedGrants,
			"owner crashes": s.OwnerCrashes, "manager restarts": s.ManagerRestarts, "partitions": s.Partitions,
			"rebalancing rounds": s.Plans, "handovers done late": s.LateHandovers,
			"stalls": s.Stalls, "duplicate owner processes": s.Duplicates,
			"dropped messages": s.Dropped, "losses": s.LossEvents, "notifications": s.Notified,
		}
	})
	t.Logf("%d seeds: %d stalls, %d duplicate owner processes, %d handovers done past their deadline", len(results), tot.Stalls, tot.Duplicates, tot.LateHandovers)
	t.Logf("%d seeds: %d graceful restarts, %d rebalancing rounds, %d handovers asked, %d done (%d given up), %d migrated grants taken up with their state, %d messages between Owners; %d owner crashes, %d manager restarts, %d partitions, %d losses, %d notifications, worst delay %s (bound %s)",
		len(results), tot.Drains, tot.Plans, tot.Handovers, tot.HandoversDone, tot.HandoversGivenUp, tot.MigratedGrants, tot.Transfers,
		tot.OwnerCrashes, tot.ManagerRestarts, tot.Partitions, tot.LossEvents, tot.Notified, tot.WorstDelay, tot.Bound)
}

// TestBrokenMigrateUnhanded lets the Manager grant a range its holder gave
// up without handing it over to the next Owner marked migrated: the next
// Owner then takes up a grant whose state it never received.
func TestBrokenMigrateUnhanded(t *testing.T) {
	caught(t, 100, func(s uint64) Config {
		c := migrating(s)
		c.Break = &faults.Set{MigrateUnhanded: true}
		return c
	}, "migration")
}
