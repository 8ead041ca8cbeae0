package sim

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// quiet is a fault-free run of managers replicas (0: one) for two virtual
// minutes, with every clock at its own rate within the drift.
func quiet(seed uint64, managers int, noHeartbeats bool) Config {
	t := protocol.Fast()
	return Config{
		Seed: seed, Managers: managers, Owners: 8, Lookups: 20, Timing: t,
		SettleTime: time.Minute, MinDelay: t.OwnerLease / 400, ClockSkew: true,
		NoHeartbeats: noHeartbeats,
	}
}

// TestHeartbeatsCutPolls: on a healthy network the Lookups' copies stay
// fresh on heartbeats and pushes, and they poll at least five times less
// than Lookups that take no heartbeats, which poll every Sync
// (docs/protocol.md, "Heartbeats"). With one replica and with three (whose
// followers vouch while their ReadIndex proof is fresh).
func TestHeartbeatsCutPolls(t *testing.T) {
	t.Parallel()
	for _, managers := range []int{1, 3} {
		var polls [2]float64
		for i, off := range []bool{false, true} {
			r := Run(quiet(1, managers, off))
			if r.Violation != nil {
				t.Fatalf("%d replicas, heartbeats off=%v: %v", managers, off, r.Violation)
			}
			s := r.Stats
			polls[i] = float64(s.LookupPolls) / 20 / s.Virtual.Minutes()
			t.Logf("%d replicas, heartbeats off=%v: %.1f polls per Lookup-minute, %d heartbeats, %d vouching pushes, %d sync bytes",
				managers, off, polls[i], s.Heartbeats, s.Vouching, s.SyncBytes)
			if !off && s.Heartbeats == 0 {
				t.Errorf("%d replicas: no heartbeats sent", managers)
			}
			if off && s.Heartbeats+s.Vouching != 0 {
				t.Errorf("%d replicas: %d heartbeats and %d vouching pushes to Lookups that take none", managers, s.Heartbeats, s.Vouching)
			}
		}
		if polls[0]*5 > polls[1] {
			t.Errorf("%d replicas: %.1f polls per Lookup-minute with heartbeats, %.1f without: not five times fewer", managers, polls[0], polls[1])
		}
	}
}

// lagging is the faulty run on a network where half the messages take
// 0.2–0.4 s, with partitions twice as often: a heartbeat is often still on
// its way when the table changes, and its Lookup is often cut off just
// after it arrives. A Lookup that counted its copy fresh at the arrival
// would vouch for changes it never saw.
func lagging(s uint64) Config {
	c := scenario(s)
	c.MaxDelay, c.LongDelayRate = c.Timing.OwnerLease/5, 0.5
	c.PartitionEvery /= 2
	return c
}

// TestSimulationLagging runs lagging with every rule kept: it must hold for
// the broken twins below to mean anything.
func TestSimulationLagging(t *testing.T) {
	t.Parallel()
	results := seeds(t, sweepSeeds(sweepSize()), lagging)
	tot := sweep(t, results, func(s Stats) map[string]int {
		return map[string]int{"heartbeats": s.Heartbeats, "losses": s.LossEvents, "partitions": s.Partitions}
	})
	t.Logf("%d seeds: %d heartbeats, %d vouching pushes, %d polls, %d losses, %d notifications, worst delay %s (bound %s)",
		len(results), tot.Heartbeats, tot.Vouching, tot.LookupPolls, tot.LossEvents, tot.Notified, tot.WorstDelay, tot.Bound)
}

// TestBrokenFreshAtReceipt counts a copy fresh when a heartbeat or a
// vouching push arrives instead of at the named request's send time plus
// the replica's elapsed time: on the lagging network the copy passes for up
// to 0.4 s newer than it is, and a Lookup cut off just then reports every
// range lost that much too late.
func TestBrokenFreshAtReceipt(t *testing.T) {
	caughtFrom(t, 3, 200, brokenOn(lagging, faults.Set{FreshAtReceipt: true}), "recovery notification")
}

// TestBrokenFreshWithoutDrift adds the replica's elapsed time as it is: a
// replica whose clock runs fast vouches for a time the Lookup's clock has
// not reached, by up to MaxDrift of the time since the Lookup's last poll.
// It shows at seed 22 (about 10 s of CPU); TestBrokenFreshAtReceipt, on the
// same network and checker, runs by default.
func TestBrokenFreshWithoutDrift(t *testing.T) {
	longOnly(t, "22 lagging runs before it shows")
	caught(t, 200, brokenOn(lagging, faults.Set{FreshWithoutDrift: true}), "recovery notification")
}

// TestBrokenHeartbeatUnserved lets a replica vouch for freshness when it
// could not answer a poll: a follower cut off from its leader, or a deposed
// leader, keeps the Lookups on its side of a partition fresh on a table
// that no longer moves, and they never poll.
func TestBrokenHeartbeatUnserved(t *testing.T) {
	caughtFrom(t, 4, 200, brokenReplicated(3, faults.Set{HeartbeatUnserved: true}), "recovery notification")
}

func brokenOn(cfg func(uint64) Config, f faults.Set) func(uint64) Config {
	return func(s uint64) Config {
		c := cfg(s)
		c.Break = &f
		return c
	}
}
