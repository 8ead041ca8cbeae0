package sim

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

var (
	seedsFlag = flag.Int("sim.seeds", 200, "number of seeds per simulation test")
	soakFlag  = flag.Int("sim.soak", 0, "if set, run this many seeds instead (a long soak)")
	seedFlag  = flag.Uint64("sim.seed", 0, "replay only this seed")
	traceFlag = flag.String("sim.trace", "", "with -sim.seed: print the messages of this node (e.g. owner-03, lookup-07)")
)

// shortLog is Fast with a change log that keeps about one sync period, so
// Lookups that miss a poll get snapshots and the snapshot diff is exercised.
func shortLog() protocol.Timing {
	t := protocol.Fast()
	t.LogRetention = t.SyncTimeout
	return t
}

// scenario is the faulty run used for seed s: every other seed uses the
// short change log. Under the race detector each seed runs a third as long.
func scenario(s uint64) Config {
	t := protocol.Fast()
	if s%2 == 1 {
		t = shortLog()
	}
	c := Faulty(s, t)
	if raceEnabled {
		c.FaultTime /= 3
	}
	return c
}

// seeds runs cfg for each seed in parallel and returns the results in seed order.
func seeds(t *testing.T, n int, cfg func(uint64) Config) []Result {
	t.Helper()
	list := make([]uint64, 0, n)
	if *seedFlag != 0 {
		list = append(list, *seedFlag)
		traceNode = *traceFlag
	} else {
		if *soakFlag > 0 {
			n = *soakFlag
		}
		for s := range n {
			list = append(list, uint64(s+1))
		}
	}
	results := make([]Result, len(list))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, s := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = Run(cfg(s))
		}()
	}
	wg.Wait()
	return results
}

func replay(t *testing.T, r Result) string {
	return fmt.Sprintf("seed %d: %v\n  replay: go test ./internal/sim -run '^%s$' -sim.seed %d -v [-sim.trace NODE]", r.Seed, r.Violation, t.Name(), r.Seed)
}

func TestSimulationFaulty(t *testing.T) {
	results := seeds(t, *seedsFlag, scenario)
	var total Stats
	for _, r := range results {
		if r.Violation != nil {
			t.Error(replay(t, r))
		}
		total.OwnerCrashes += r.Stats.OwnerCrashes
		total.ManagerRestarts += r.Stats.ManagerRestarts
		total.LookupCrashes += r.Stats.LookupCrashes
		total.Partitions += r.Stats.Partitions
		total.Dropped += r.Stats.Dropped
		total.Duplicated += r.Stats.Duplicated
		total.LossEvents += r.Stats.LossEvents
		total.Notified += r.Stats.Notified
		total.Events += r.Stats.Events
		total.WorstDelay = max(total.WorstDelay, r.Stats.WorstDelay)
	}
	t.Logf("%d seeds: %d events, %d owner crashes, %d manager restarts, %d lookup crashes, %d partitions, %d dropped, %d duplicated, %d losses, %d notifications, worst delay %s (bound %s)",
		len(results), total.Events, total.OwnerCrashes, total.ManagerRestarts, total.LookupCrashes, total.Partitions,
		total.Dropped, total.Duplicated, total.LossEvents, total.Notified, total.WorstDelay, protocol.Fast().NotificationBound())
	// A sweep that injected no faults of some kind proves nothing about it.
	if len(results) >= 20 {
		for name, n := range map[string]int{
			"owner crashes": total.OwnerCrashes, "manager restarts": total.ManagerRestarts,
			"lookup crashes": total.LookupCrashes, "partitions": total.Partitions,
			"dropped messages": total.Dropped, "duplicated messages": total.Duplicated,
			"losses": total.LossEvents, "notifications": total.Notified,
		} {
			if n == 0 {
				t.Errorf("no %s across %d seeds", name, len(results))
			}
		}
	}
}

// TestConvergenceCheckerCatches ends runs right after the faults stop, long
// before the convergence bound: the checker must notice.
func TestConvergenceCheckerCatches(t *testing.T) {
	for s := uint64(1); s <= 20; s++ {
		c := scenario(s)
		c.FaultTime = 10 * c.Timing.OwnerLease
		c.SettleTime = time.Millisecond
		if r := Run(c); r.Violation != nil {
			if r.Violation.Checker != "convergence" {
				t.Fatalf("seed %d: expected a convergence violation, got %v", s, r.Violation)
			}
			t.Logf("caught at seed %d: %v", s, r.Violation)
			return
		}
	}
	t.Fatal("the convergence checker passed 20 runs that had no time to converge")
}
