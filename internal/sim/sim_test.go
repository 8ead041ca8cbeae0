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

// The sweeps run quickSeeds seeds each by default, so that go test ./...
// stays short enough to wait for (README.md, "Testing", has the figures);
// -sim.long runs longSeeds, as CI does. quickSeeds is requiredSeeds: the
// fewest that still inject every kind of fault a sweep counts, so a default
// sweep still fails if the correct protocol breaks a checker on a seed it
// runs or if its faults stop being drawn, while what a broken rule looks
// like is the broken twins' part (each caught at its seed by default). The
// replicated sweeps run replicatedQuickSeeds: with fewer, some seeds of 3
// or 5 replicas draw no follower crash or leader stall. The broken-rule
// tests run until their checker catches the rule, however many seeds that
// takes; the few whose rule shows only after dozens of seeds run with
// -sim.long alone (longOnly), each beside another twin of its checker that
// runs by default.
const (
	quickSeeds           = requiredSeeds
	replicatedQuickSeeds = 8
	longSeeds            = 200
)

// requiredSeeds is the smallest sweep that must inject every kind of fault
// it counts: the default sweeps and the long ones, not a replay of one seed
// nor a race run's shortened runs.
const requiredSeeds = 4

var (
	longFlag  = flag.Bool("sim.long", false, "the long sweep, as CI runs it: 200 seeds per sweep instead of 4 (8 for the replicated sweeps), the broken-rule tests searched from seed 1, and the reports of figures (the production timings over 10 virtual minutes, thin Lookups)")
	seedsFlag = flag.Int("sim.seeds", 0, "number of seeds per sweep (0: 4, 8 of the replicated sweeps, or 200 with -sim.long)")
	soakFlag  = flag.Int("sim.soak", 0, "if set, run this many seeds instead, also under the race detector (a long soak)")
	seedFlag  = flag.Uint64("sim.seed", 0, "replay only this seed")
	traceFlag = flag.String("sim.trace", "", "with -sim.seed: print the messages of this node (e.g. owner-03, lookup-07), or every loss the Manager records (losses)")
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

// sweepSize is how many seeds a sweep runs, by the flags.
func sweepSize() int {
	switch {
	case *seedsFlag > 0:
		return *seedsFlag
	case *longFlag:
		return longSeeds
	}
	return quickSeeds
}

// sweepSeeds is how many seeds a sweep of n runs: half under the race
// detector (a race run is about the harness's concurrency; every seed is a
// third as long there too), unless a soak asks for more.
func sweepSeeds(n int) int {
	if raceEnabled && *soakFlag == 0 {
		return max(n/2, 1)
	}
	return n
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

// longOnly skips t unless -sim.long (CI's long sweep): a broken-rule test
// whose rule shows only after dozens of seeds, or a report of figures. why
// says which.
func longOnly(t *testing.T, why string) {
	t.Helper()
	if !*longFlag {
		t.Skip(why + "; run it with -sim.long, as CI does")
	}
}

func replay(t *testing.T, r Result) string {
	return fmt.Sprintf("seed %d: %v\n  replay: go test ./internal/sim -run '^%s$' -sim.seed %d -v [-sim.trace NODE]", r.Seed, r.Violation, t.Name(), r.Seed)
}

// replicated is the faulty run of a group of managers replicas used for
// seed s: leader and follower crashes, partitions that isolate the leader,
// and the network's faults on Raft traffic, for 6 OwnerLeases (a fifth of
// the single Manager's time: a replicated run costs more per virtual
// second, and 200 seeds still see hundreds of leader crashes and
// isolations). Every other seed uses the short change log. Under the race
// detector each seed runs a third as long again.
func replicated(managers int) func(uint64) Config {
	return func(s uint64) Config {
		t := protocol.Fast()
		if s%2 == 1 {
			t = shortLog()
		}
		c := FaultyReplicated(s, t, managers)
		c.FaultTime = 6 * t.OwnerLease
		if raceEnabled {
			c.FaultTime /= 3
		}
		return c
	}
}

// total adds up the statistics of a sweep.
func total(results []Result) Stats {
	var tot Stats
	for _, r := range results {
		s := r.Stats
		tot.Events += s.Events
		tot.OwnerCrashes += s.OwnerCrashes
		tot.LookupCrashes += s.LookupCrashes
		tot.ManagerRestarts += s.ManagerRestarts
		tot.LeaderCrashes += s.LeaderCrashes
		tot.Partitions += s.Partitions
		tot.LeaderIsolations += s.LeaderIsolations
		tot.Takeovers += s.Takeovers
		tot.Messages += s.Messages
		tot.Dropped += s.Dropped
		tot.Duplicated += s.Duplicated
		tot.RaftMessages += s.RaftMessages
		tot.RaftBatches += s.RaftBatches
		tot.LongestBatch = max(tot.LongestBatch, s.LongestBatch)
		tot.Snapshots += s.Snapshots
		tot.SnapshotsSent += s.SnapshotsSent
		tot.Refusals += s.Refusals
		tot.CompactPushes += s.CompactPushes
		tot.FromCopyChanges += s.FromCopyChanges
		tot.OwnerFromCopyChanges += s.OwnerFromCopyChanges
		tot.LossEvents += s.LossEvents
		tot.Notified += s.Notified
		tot.Handovers += s.Handovers
		tot.HandoversDone += s.HandoversDone
		tot.HandoversGivenUp += s.HandoversGivenUp
		tot.MigratedGrants += s.MigratedGrants
		tot.Transfers += s.Transfers
		tot.Drains += s.Drains
		tot.Plans += s.Plans
		tot.Stalls += s.Stalls
		tot.Deposals += s.Deposals
		tot.LeaderStalls += s.LeaderStalls
		tot.Duplicates += s.Duplicates
		tot.LateHandovers += s.LateHandovers
		tot.LookupNotices += s.LookupNotices
		tot.LookupPolls += s.LookupPolls
		tot.Heartbeats += s.Heartbeats
		tot.Vouching += s.Vouching
		tot.WorstDelay = max(tot.WorstDelay, s.WorstDelay)
		tot.Bound = max(tot.Bound, s.Bound)
	}
	return tot
}

// sweep reports a sweep's violations and statistics, and fails it if some
// kind of fault was never injected: a sweep that injected none proves
// nothing about it.
func sweep(t *testing.T, results []Result, required func(Stats) map[string]int) Stats {
	t.Helper()
	for _, r := range results {
		if r.Violation != nil {
			t.Error(replay(t, r))
		}
	}
	tot := total(results)
	if len(results) >= requiredSeeds && (!raceEnabled || *soakFlag > 0) {
		for name, n := range required(tot) {
			if n == 0 {
				t.Errorf("no %s across %d seeds", name, len(results))
			}
		}
	}
	return tot
}

func TestSimulationFaulty(t *testing.T) {
	t.Parallel()
	results := seeds(t, sweepSeeds(sweepSize()), scenario)
	tot := sweep(t, results, func(s Stats) map[string]int {
		return map[string]int{
			"owner crashes": s.OwnerCrashes, "manager restarts": s.ManagerRestarts,
			"lookup crashes": s.LookupCrashes, "partitions": s.Partitions,
			"dropped messages": s.Dropped, "duplicated messages": s.Duplicated,
			"losses": s.LossEvents, "notifications": s.Notified,
			"stalls": s.Stalls, "duplicate owner processes": s.Duplicates,
			"compact pushes": s.CompactPushes, "ranges read from a Lookup's copy": s.FromCopyChanges, "owners read from a Lookup's copy": s.OwnerFromCopyChanges,
		}
	})
	t.Logf("%d seeds: %d events, %d owner crashes, %d manager restarts, %d lookup crashes, %d partitions, %d stalls, %d duplicate owner processes, %d dropped, %d duplicated, %d losses, %d notifications, worst delay %s (bound %s)",
		len(results), tot.Events, tot.OwnerCrashes, tot.ManagerRestarts, tot.LookupCrashes, tot.Partitions, tot.Stalls, tot.Duplicates,
		tot.Dropped, tot.Duplicated, tot.LossEvents, tot.Notified, tot.WorstDelay, tot.Bound)
	t.Logf("  %d compact pushes to full Lookups, %d ranges and %d owners read from the copy", tot.CompactPushes, tot.FromCopyChanges, tot.OwnerFromCopyChanges)
}

// TestSimulationReplicated3 and TestSimulationReplicated5 run the faulty
// sweep on a Raft group of 3 and 5 Manager replicas.
func TestSimulationReplicated3(t *testing.T) { testReplicated(t, 3) }
func TestSimulationReplicated5(t *testing.T) { testReplicated(t, 5) }

func testReplicated(t *testing.T, managers int) {
	t.Parallel()
	n := sweepSize()
	if !*longFlag && *seedsFlag == 0 {
		n = replicatedQuickSeeds
	}
	results := seeds(t, sweepSeeds(n), replicated(managers))
	tot := sweep(t, results, func(s Stats) map[string]int {
		return map[string]int{
			"leader crashes": s.LeaderCrashes, "follower crashes": s.ManagerRestarts - s.LeaderCrashes,
			"partitions isolating the leader": s.LeaderIsolations, "takeovers after the first": s.Takeovers - len(results),
			"owner crashes": s.OwnerCrashes, "lookup crashes": s.LookupCrashes, "partitions": s.Partitions,
			"dropped messages": s.Dropped, "duplicated messages": s.Duplicated, "refusals": s.Refusals,
			"Raft snapshots sent": s.SnapshotsSent, "batches of Raft messages": s.RaftBatches, "losses": s.LossEvents, "notifications": s.Notified,
			"leader stalls": s.LeaderStalls, "other stalls": s.Stalls - s.LeaderStalls, "duplicate owner processes": s.Duplicates,
			"compact pushes": s.CompactPushes, "ranges read from a Lookup's copy": s.FromCopyChanges, "owners read from a Lookup's copy": s.OwnerFromCopyChanges,
		}
	})
	t.Logf("%d seeds, %d replicas: %d events, %d leader crashes, %d follower crashes, %d partitions (%d isolating the leader), %d takeovers, %d owner crashes, %d lookup crashes, %d stalls (%d of the leader), %d duplicate owner processes",
		len(results), managers, tot.Events, tot.LeaderCrashes, tot.ManagerRestarts-tot.LeaderCrashes, tot.Partitions, tot.LeaderIsolations,
		tot.Takeovers, tot.OwnerCrashes, tot.LookupCrashes, tot.Stalls, tot.LeaderStalls, tot.Duplicates)
	t.Logf("  %d messages (%d Raft, stepped in %d batches of several, the longest %d; %d refusals), %d dropped, %d duplicated, %d Raft snapshots taken, %d sent; %d losses, %d notifications, worst delay %s (bound %s)",
		tot.Messages, tot.RaftMessages, tot.RaftBatches, tot.LongestBatch, tot.Refusals, tot.Dropped, tot.Duplicated, tot.Snapshots, tot.SnapshotsSent,
		tot.LossEvents, tot.Notified, tot.WorstDelay, tot.Bound)
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

// TestFailoverLosesNothing restarts the leader from its Raft log every
// other minute and, with several replicas, cuts it off from everyone in the
// minutes between, under production timings on a network that loses
// nothing: Owners keep their leases across every takeover, so the Manager
// records no loss and no Lookup is told of one.
func TestFailoverLosesNothing(t *testing.T) {
	t.Parallel()
	for _, managers := range []int{1, 3, 5} {
		restarts, cuts := 0, 0
		r := Run(Config{
			Seed: 1, Managers: managers, Owners: 10, Lookups: 5, Timing: protocol.Production(),
			FaultTime: 10 * time.Minute, MinDelay: time.Millisecond, ClockSkew: true,
			Script: func(c *Control) {
				c.Every(time.Minute, func() {
					l := c.Leader()
					switch {
					case l < 0 || c.Now() > 9*time.Minute:
					case managers == 1 || c.Now()/time.Minute%2 == 0:
						restarts++
						c.RestartManager(l, 5*time.Second)
					default:
						cuts++
						c.Cut(20*time.Second, []int{l}, nil, nil)
					}
				})
			},
		})
		s := r.Stats
		t.Logf("%d replicas: %d restarts of the leader, %d cut off, %d takeovers, %d losses, %d refusals",
			managers, restarts, cuts, s.Takeovers, s.LossEvents, s.Refusals)
		if r.Violation != nil {
			t.Fatalf("%d replicas: %v", managers, r.Violation)
		}
		if restarts+cuts < 8 || s.Takeovers < 1+restarts+cuts {
			t.Errorf("%d replicas: %d restarts and %d cuts of the leader, %d takeovers: the failovers did not happen", managers, restarts, cuts, s.Takeovers)
		}
		if s.LossEvents != 0 {
			t.Errorf("%d replicas: %d losses across failovers, want none", managers, s.LossEvents)
		}
	}
}

// TestRunsReplayExactly runs a single-Manager seed and two replicated ones
// twice, at the same time as each other and then one after another: each
// run must be the same, event for event. Raft's election timeouts come from
// crypto/rand, which Run serves from the run's seed (raftrand.go).
func TestRunsReplayExactly(t *testing.T) {
	t.Parallel()
	long := func(c Config) Config { // the same under the race detector
		c.FaultTime = 10 * c.Timing.OwnerLease
		return c
	}
	cfgs := []Config{long(Faulty(7, protocol.Fast())), long(FaultyReplicated(8, shortLog(), 3)), long(FaultyReplicated(9, protocol.Fast(), 5))}
	together := make([]Result, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() { together[i] = Run(c) })
	}
	wg.Wait()
	for i, c := range cfgs {
		alone := Run(c)
		if alone.Stats != together[i].Stats || fmt.Sprint(alone.Violation) != fmt.Sprint(together[i].Violation) {
			t.Errorf("seed %d with %d replicas ran differently:\n  %+v\n  %+v", c.Seed, max(c.Managers, 1), together[i].Stats, alone.Stats)
		}
		if alone.Stats.Takeovers < 2 {
			t.Errorf("seed %d with %d replicas: %d takeovers; pick a seed whose elections matter", c.Seed, max(c.Managers, 1), alone.Stats.Takeovers)
		}
	}
}
