package sim

import (
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// TestProductionReport runs the production timings (60 s leases renewed
// every 15 s, 30 s sync) with 100 owners and 20 lookups for 10 virtual
// minutes (2 with -short), without faults and with
// owner crashes and partitions, and reports what the papers
// measured: lease messages per owner per minute, the size of a Lookup's copy
// for 100 owners (C§2.2: ~200 KB), and the worst notification delay against
// the documented bound.
//
// It runs with -sim.long, as CI does, and not under the race detector:
// what it measures does not depend on how goroutines interleave, the
// sweeps exercise the harness's concurrency, and its two runs of 100
// Owners would take minutes there. go test ./... leaves it out (about 2 s
// of CPU at 2 virtual minutes): what it checks is the papers' figures
// (lease messages per Owner per minute, the Lookup copy's size, the
// notification bound under crashes and partitions at production timings),
// and the production timings under the Manager's restarts and failovers
// are TestFailoverLosesNothing's, which runs by default.
func TestProductionReport(t *testing.T) {
	if raceEnabled {
		t.Skip("a report of the production timings; run it without -race")
	}
	longOnly(t, "a report of the production timings' figures")
	t.Parallel()
	tm := protocol.Production()
	minutes := 2 * time.Minute
	if !testing.Short() {
		minutes = 10 * time.Minute
	}

	// Steady state: no faults, so every message is a renewal or its answer;
	// and the same under faults (below), run at the same time.
	var quiet, faulty Result
	var wg sync.WaitGroup
	wg.Go(func() {
		quiet = Run(Config{Seed: 1, Owners: 100, Lookups: 20, Timing: tm, FaultTime: minutes, MinDelay: time.Millisecond, ClockSkew: true})
	})
	wg.Go(func() {
		faulty = Run(Config{
			Seed: 1, Owners: 100, Lookups: 20, Timing: tm, FaultTime: minutes,
			DropRate: 0.01, MinDelay: time.Millisecond, MaxDelay: 200 * time.Millisecond, LongDelayRate: 0.01,
			OwnerCrashEvery: time.Minute, PartitionEvery: 3 * time.Minute, ClockSkew: true,
		})
	})
	wg.Wait()
	if quiet.Violation != nil {
		t.Fatalf("quiet run: %v", quiet.Violation)
	}
	q := quiet.Stats
	perMin := q.MessagesPerOwnerMinute(100)
	t.Logf("production profile, 100 owners, 20 lookups, no faults, %s virtual:", q.Virtual)
	t.Logf("  lease messages per owner per minute: %.2f (a request and its answer every 15 s: 8)", perMin)
	t.Logf("  lease bytes per owner per minute: %.0f", float64(q.LeaseBytes)/100/q.Virtual.Minutes())
	t.Logf("  lookup copy for 100 owners: %d segments, %d bytes (C§2.2: ~200 KB per 100 owners)", q.Segments, q.ViewBytes)

	// The same under faults: the guarantees hold and losses are notified
	// within the bound.
	if faulty.Violation != nil {
		t.Fatalf("%v\n  replay: go test ./internal/sim -run '^TestProductionReport$' -sim.long -v", faulty.Violation)
	}
	f := faulty.Stats
	t.Logf("with faults (%d owner crashes, %d partitions, 1%% loss), %s virtual:", f.OwnerCrashes, f.Partitions, f.Virtual)
	t.Logf("  lease messages per owner per minute: %.2f (recalls, grants and their acknowledgements added)", f.MessagesPerOwnerMinute(100))
	t.Logf("  worst notification delay %s, bound %s = SyncTimeout × (1 + MaxDrift); %d losses, %d notified",
		f.WorstDelay, f.Bound, f.LossEvents, f.Notified)

	// Bounds that fail if the protocol starts chattering or the copy bloats.
	if perMin < 7.5 || perMin > 8.5 {
		t.Errorf("steady-state lease messages per owner per minute = %.2f, want about 8", perMin)
	}
	if q.ViewBytes > 300<<10 {
		t.Errorf("lookup copy for 100 owners = %d bytes, want at most 300 KiB", q.ViewBytes)
	}
	if f.WorstDelay > f.Bound {
		t.Errorf("worst notification delay %s exceeds the bound %s", f.WorstDelay, f.Bound)
	}
	if f.LossEvents == 0 || f.Notified == 0 {
		t.Errorf("no losses were notified (%d losses): the run exercised nothing", f.LossEvents)
	}
}
