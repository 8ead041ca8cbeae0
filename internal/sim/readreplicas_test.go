package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
)

// readReplicated is the faulty replicated run with readers read replicas
// beside voters voters: every fault of replicated, and each read replica
// crashed, stalled or cut off alone about every OwnerLease on top.
func readReplicated(voters, readers int) func(uint64) Config {
	return func(s uint64) Config {
		c := replicated(voters)(s)
		c.ReadReplicas = readers
		c.ReadReplicaFaultEvery = c.Timing.OwnerLease
		return c
	}
}

// TestSimulationReadReplicas runs the faulty sweep with read replicas among
// the Manager's nodes — three voters and two read replicas, and one voter
// and two read replicas — with crashes, stalls and partitions of the read
// replicas on top of every other fault: single copy, recovery notification
// within the bound (the Lookups spread over every replica, read replicas
// included, and move when one fails), convergence (the read replicas apply
// the leader's table), and no read replica ever campaigns, leads or is
// counted among the voters.
func TestSimulationReadReplicas(t *testing.T) {
	for _, g := range []struct{ voters, readers int }{{3, 2}, {1, 2}} {
		t.Run(fmt.Sprintf("%d+%d", g.voters, g.readers), func(t *testing.T) {
			t.Parallel()
			// Two seeds of each by default (about 2 s on 2 cores); the
			// sweep's size with -sim.long or -sim.seeds.
			n := sweepSeeds(sweepSize())
			if !*longFlag && *seedsFlag == 0 {
				n = 2
			}
			results := seeds(t, n, readReplicated(g.voters, g.readers))
			var rr ReadReplicaStats
			var worst, bound time.Duration
			for _, r := range results {
				worst, bound = max(worst, r.Stats.WorstDelay), max(bound, r.Stats.Bound)
				if r.Violation != nil {
					t.Fatal(replay(t, r))
				}
				x := r.Readers
				rr.Added += x.Added
				rr.Crashes += x.Crashes
				rr.Stalls += x.Stalls
				rr.Cuts += x.Cuts
				rr.Answers += x.Answers
				rr.Moves += x.Moves
			}
			t.Logf("%d seeds, %d voters + %d read replicas: %d added, %d crashed, %d stalled, %d cut off alone; %d answers to Lookups from read replicas, %d Lookup moves; worst notification delay %s (bound %s)",
				len(results), g.voters, g.readers, rr.Added, rr.Crashes, rr.Stalls, rr.Cuts, rr.Answers, rr.Moves, worst, bound)
			if rr.Added < len(results)*g.readers || rr.Answers == 0 || rr.Crashes+rr.Stalls+rr.Cuts == 0 {
				t.Fatalf("the sweep did not exercise its read replicas: %+v", rr)
			}
		})
	}
}

// brokenReadReplicated breaks f in the read-replica sweep's runs.
func brokenReadReplicated(voters, readers int, f faults.Set) func(uint64) Config {
	return func(s uint64) Config {
		c := readReplicated(voters, readers)(s)
		c.FaultTime = 6 * c.Timing.OwnerLease // the race detector's third too: a cut needs time to show
		c.Break = &f
		return c
	}
}

// TestBrokenReadReplicaPromoted lets the leader promote a read replica once
// it has caught up: the read-replica checker sees it among the voters.
func TestBrokenReadReplicaPromoted(t *testing.T) {
	caught(t, 10, brokenReadReplicated(1, 2, faults.Set{ReadReplicaPromoted: true}), "read replica")
}

// TestBrokenReadReplicaStale lets a read replica answer Lookups without the
// ReadIndex proof of rule 17: cut off alone, it goes on answering, its
// Lookups stay fresh on a table that stopped moving, and a loss reaches
// them past the bound.
func TestBrokenReadReplicaStale(t *testing.T) {
	caught(t, 20, brokenReadReplicated(3, 2, faults.Set{ReadReplicaStale: true}), "recovery notification")
}
