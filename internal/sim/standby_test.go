package sim

import (
	"maps"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// standbyScenario is the faulty run with standbys for seed s (standby.go):
// 8 Owners in 3 zones, crashes of holders, of standbys, of both
// together and of every Owner of a zone at once, stalls (a stalled old holder resumes after its standby was
// promoted, and resends what was in flight), partitions (holder and
// standby on either side among them), drops, delays and duplicates, and
// restarts of the Manager from its log, and the standby design's own
// faults at the moments that matter with planned moves (standbyTargeted:
// holder–standby cuts, holders stalled past their promotion, the Manager
// crashed as it sends a promoted grant); 6 Lookups, for 6 OwnerLeases (a
// fifth of the plain run's: every Owner step also writes).
func standbyScenario(s uint64) Config {
	t := protocol.Fast()
	if s%2 == 1 {
		t = shortLog()
	}
	c := Faulty(s, t)
	c.ManagerLosesState = false
	c.Standbys, c.Zones = true, 3
	c.StandbyPairCrashEvery = 4 * t.OwnerLease
	c.StandbyZoneCrashEvery = 6 * t.OwnerLease
	c.Lookups = 6
	c.FaultTime = 6 * t.OwnerLease
	standbyTargeted(&c) // standby_faults_test.go
	if raceEnabled {
		c.FaultTime /= 3
	}
	return c
}

// standbySeeds is the sweep's size: 4 by default (go test stays short),
// the long sweep's with -sim.long.
func standbySeeds() int {
	if *longFlag || *seedsFlag > 0 {
		return sweepSeeds(sweepSize())
	}
	return sweepSeeds(requiredSeeds)
}

// TestSimulationStandbys sweeps the faulty run with standbys: no
// violation of single copy (of the serving role, the lease), of recovery
// notification, or of the acknowledged-writes checker — no acknowledged
// write lost without a loss notification covering it.
func TestSimulationStandbys(t *testing.T) {
	t.Parallel()
	results := seeds(t, standbySeeds(), standbyScenario)
	var w, a, ref, fills, prom, pairs, zones int
	for _, r := range results {
		w += r.Stats.StandbyWrites
		a += r.Stats.StandbyAcks
		ref += r.Stats.StandbyRefused
		fills += r.Stats.Fills
		prom += r.Stats.Promotions
		pairs += r.Stats.PairCrashes
		zones += r.Stats.ZoneCrashes
	}
	tot := sweep(t, results, func(s Stats) map[string]int {
		m := map[string]int{
			"owner crashes": s.OwnerCrashes, "partitions": s.Partitions, "stalls": s.Stalls,
			"dropped messages": s.Dropped, "losses": s.LossEvents, "notifications": s.Notified,
			"writes acknowledged": a, "fills": fills, "promoted grants": prom, "holders crashed with their standby": pairs,
			"zones crashed whole": zones, "stale writes refused": ref,
		}
		maps.Copy(m, sbFaultsRequired(sbFaultTotals(results), s))
		return m
	})
	t.Logf("%d seeds: %d events, %d owner crashes (%d holders with their standby, %d whole zones), %d partitions, %d stalls, %d manager restarts, %d dropped; "+
		"%d writes, %d acknowledged, %d fills, %d keys served from a promoted copy, %d replicated writes and fills refused; %d losses, %d notifications",
		len(results), tot.Events, tot.OwnerCrashes, pairs, zones, tot.Partitions, tot.Stalls, tot.ManagerRestarts, tot.Dropped,
		w, a, fills, prom, ref, tot.LossEvents, tot.Notified)
	t.Logf("  %s", sbFaultLine(sbFaultTotals(results)))
}

// standbyBroken is the standby run with rule br broken, at full length
// under the race detector too: the named seeds below are those of that run.
func standbyBroken(br faults.Set) func(uint64) Config {
	return func(s uint64) Config {
		c := standbyScenario(s)
		c.FaultTime = 6 * c.Timing.OwnerLease
		c.StandbyZoneCrashEvery = 0 // the runs the seeds below were named in
		untargeted(&c)
		c.Break = &br
		return c
	}
}

// standbyTwin requires a checker in want to catch rule br broken: at the
// named seed by default (a run is a pure function of its Config, so the
// seed that caught it once catches it again; the named seed is the first
// that does in a plain Run, not under caught, whose stop timer is an event
// of the run too), and searching the seeds from 1 with -sim.long or
// -sim.seeds, as the other twins do.
func standbyTwin(t *testing.T, br faults.Set, seed uint64, want ...string) {
	t.Helper()
	standbyTwinOf(t, standbyBroken(br), seed, want...)
}

// standbyTwinOf is standbyTwin for the broken standby runs cfg.
func standbyTwinOf(t *testing.T, cfg func(uint64) Config, seed uint64, want ...string) {
	t.Helper()
	t.Parallel()
	if *longFlag || *seedsFlag > 0 {
		caught(t, sweepSize(), cfg, want...)
		return
	}
	r := Run(cfg(seed))
	if r.Violation == nil || !slices.Contains(want, r.Violation.Checker) {
		t.Fatalf("seed %d: want a %v violation, got %v; search the seeds with -sim.long", seed, want, r.Violation)
	}
	t.Logf("caught at seed %d: %v", seed, r.Violation)
}

// TestBrokenPromoteEarly: a standby promoted before the old holder's
// reservation ran out (rule 21) serves while the old holder still
// believes its lease. Caught at seed 2.
func TestBrokenPromoteEarly(t *testing.T) {
	standbyTwin(t, faults.Set{PromoteEarly: true}, 2, "single copy", "acknowledged writes")
}

// TestBrokenAckBeforeStandby: a holder that acknowledges a write before
// its standby stored it (rule 24) loses it on promotion, unnotified.
// Caught at seed 7.
func TestBrokenAckBeforeStandby(t *testing.T) {
	standbyTwin(t, faults.Set{AckBeforeStandby: true}, 7, "acknowledged writes")
}

// TestBrokenStandbyAcceptsStale: a standby that stores a write from a
// stale holder (rule 24) — an old holder resending what it had in flight,
// after a stall or a partition, to the Owner that has since been promoted
// or paired anew — overwrites what the current holder acknowledged.
// Caught at seed 22.
func TestBrokenStandbyAcceptsStale(t *testing.T) {
	standbyTwin(t, faults.Set{StandbyAcceptsStale: true}, 22, "acknowledged writes")
}

// TestBrokenInSyncWholeLease: a standby's report marks the whole lease in
// sync, not the pieces its fill covered (rule 23): a piece its holder
// dropped on a recall before it filled the standby, listed again under
// the lease, is promoted onto the standby's copy without the holder's
// acknowledged writes. Caught at seed 53.
func TestBrokenInSyncWholeLease(t *testing.T) {
	standbyTwin(t, faults.Set{InSyncWholeLease: true}, 53, "acknowledged writes")
}

// TestBrokenPromotionLeaderLocal: a new Manager leader that ignores the
// replicated promotion marks (rule 21) — as when only the leader that
// promoted knew a grant was a promotion — lists a promoted grant its
// standby never heard as a renewal, which the standby refuses: the range
// is freed and its copy thrown away. The Manager is crashed as it sends a
// promoted grant (StandbyFaults.DeposeOneIn, standby_deposed.go). Caught
// by the promotion-kept checker at seed 1.
func TestBrokenPromotionLeaderLocal(t *testing.T) {
	deposedTwin(t, faults.Set{PromotionLeaderLocal: true})
}

// TestBrokenPromotionPushEarly: a new Manager leader that pushes to a
// standby with a replicated promoted grant pending before the standby's
// first request (rule 21) sends it the grant in a message that answers no
// request of its run: the standby cannot take it up from that message,
// yet acknowledges it, so the leader lists the lease as a renewal next,
// which the standby refuses. The Manager is crashed as it sends a
// promoted grant (StandbyFaults.DeposeOneIn); the promotion-kept checker
// counts a grant heard only from a message the Owner could take it from
// (standby_deposed.go), and catches it at seed 1.
func TestBrokenPromotionPushEarly(t *testing.T) {
	deposedTwin(t, faults.Set{PromotionPushEarly: true})
}

// deposedTwin is the standby twin with f broken and the Manager crashed as
// it sends a promoted grant, one in two (StandbyFaults.DeposeOneIn): the
// promotion-kept checker must catch it at seed 1.
func deposedTwin(t *testing.T, f faults.Set) {
	t.Helper()
	standbyTwinOf(t, func(s uint64) Config {
		c := standbyBroken(f)(s)
		c.StandbyFaults.DeposeOneIn = 2
		return c
	}, 1, "promotion kept")
}

// TestSimulationStandbysReplicated3 runs the standby sweep on a Raft group
// of 3 Manager replicas, with leader and follower crashes and isolations:
// a new leader promotes only what the replicated state records in sync.
// With -sim.long only, and half its seeds (100), as the migration sweep: a
// replicated run costs about twice a single Manager's per virtual second,
// and TestSimulationStandbys runs the standby rules' full 200 beside it.
func TestSimulationStandbysReplicated3(t *testing.T) {
	longOnly(t, "a replicated standby sweep")
	t.Parallel()
	results := seeds(t, sweepSeeds(max(sweepSize()/2, requiredSeeds)), func(s uint64) Config {
		c := replicated(3)(s)
		c.Standbys, c.Zones, c.Lookups = true, 3, 6
		c.StandbyPairCrashEvery = 4 * c.Timing.OwnerLease
		standbyTargeted(&c) // the leader crashed as it sends a promoted grant, among them
		return c
	})
	var a, prom int
	for _, r := range results {
		a += r.Stats.StandbyAcks
		prom += r.Stats.Promotions
	}
	tot := sweep(t, results, func(s Stats) map[string]int {
		m := map[string]int{"leader crashes": s.LeaderCrashes, "owner crashes": s.OwnerCrashes,
			"writes acknowledged": a, "promoted grants": prom}
		maps.Copy(m, sbFaultsRequired(sbFaultTotals(results), s))
		return m
	})
	t.Logf("%d seeds, 3 replicas: %d leader crashes, %d takeovers, %d owner crashes; %d writes acknowledged, %d keys served from a promoted copy; %d losses, %d notifications",
		len(results), tot.LeaderCrashes, tot.Takeovers, tot.OwnerCrashes, a, prom, tot.LossEvents, tot.Notified)
	t.Logf("  %s", sbFaultLine(sbFaultTotals(results)))
}
