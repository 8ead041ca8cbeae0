package sim

import (
	"fmt"
	"maps"
	"testing"
	"time"
)

// standbyTargeted adds the standby design's own faults (standby_faults.go,
// standby_moves.go) to the standby run c: holder–standby cuts at fills, at
// standby answers and at promotions; holders stalled past their
// promotion; Managers crashed as they send a promoted grant; and planned
// moves with their state (one run in eight hands nothing over, one
// handover in sixteen is given up), which the crashes' restarts bring.
// Graceful restarts and load-aware rebalancing, which double a run's
// cost, are TestSimulationStandbysRebalancing's (-sim.long).
func standbyTargeted(c *Config) {
	t := c.Timing
	c.StandbyFaults = StandbyFaults{FillCutOneIn: 64, AckCutOneIn: 40, PromotionCutOneIn: 1, StallHolderEvery: t.OwnerLease / 2, DeposeOneIn: 2}
	c.Migration, c.AppFaults = true, true
}

// sbFaultTotals adds up the standby faults of a sweep.
func sbFaultTotals(results []Result) StandbyFaultStats {
	var f StandbyFaultStats
	for _, r := range results {
		f.add(r.Stats.SBFaults)
	}
	return f
}

// sbFaultsRequired is what a standby sweep with the targeted faults must
// draw across its seeds (sweep fails it on a zero).
func sbFaultsRequired(f StandbyFaultStats, tot Stats) map[string]int {
	return map[string]int{
		"holder–standby cuts at a fill": f.FillCuts, "holder–standby cuts right after a standby's answer": f.AckCuts,
		"holder–standby cuts losing a standby's answer": f.AckLostCuts, "holder–standby cuts at a promotion": f.PromotionCuts,
		"holder–standby cuts both ways": f.BothWays, "holder→standby cuts": f.HolderToStandby, "standby→holder cuts": f.StandbyToHolder,
		"holder–standby messages lost to a cut":  f.PairMsgsCut,
		"holders stalled past their reservation": f.HolderStalls, "promotions while the old holder was stalled": f.PromotedWhileStalled,
		"old holders resuming after their promotion": f.ResumedAfterPromotion,
		"managers crashed sending a promoted grant":  f.Deposals, "deposed promoted grants dropped": f.DeposedDropped,
		"deposed promoted grants delivered late":                             f.DeposedLate,
		"deposed promoted grants listed again as grants by the next Manager": f.DeposedRegranted,
		"deposed promoted grants taken up from the next Manager's message":   f.DeposedRegrantedTakenUp,
		"handovers with standbys":                                            tot.Handovers, "migrated grants with standbys": tot.MigratedGrants,
		"standby keys handed over": f.StandbyHandoverWrites,
	}
}

// sbFaultLine describes a sweep's standby faults.
func sbFaultLine(f StandbyFaultStats) string {
	return fmt.Sprintf("holder–standby cuts: %d at a fill, %d right after an answer, %d losing it, %d at a promotion (%d both ways, %d holder→standby, %d standby→holder), %d messages lost to them, %d to random partitions; "+
		"%d holders stalled past their reservation, %d promotions while the old holder was stalled, %d old holders resumed after; "+
		"%d managers crashed sending a promoted grant (%d dropped, %d late): %d taken up (%d listed again as grants by the next Manager, %d taken up from its message), %d left the table untaken by a live run, %d not taken up by a run that ended; %d standby keys handed over",
		f.FillCuts, f.AckCuts, f.AckLostCuts, f.PromotionCuts, f.BothWays, f.HolderToStandby, f.StandbyToHolder, f.PairMsgsCut, f.PairMsgsPartitioned,
		f.HolderStalls, f.PromotedWhileStalled, f.ResumedAfterPromotion,
		f.Deposals, f.DeposedDropped, f.DeposedLate, f.DeposedTakenUp, f.DeposedRegranted, f.DeposedRegrantedTakenUp, f.DeposedFreed, f.DeposedOwnerGone, f.StandbyHandoverWrites)
}

// untargeted takes the targeted standby faults and the planned moves out
// of c: the broken twins' seeds were named in runs without them.
func untargeted(c *Config) {
	c.StandbyFaults = StandbyFaults{}
	c.Migration, c.AppFaults, c.DrainEvery, c.DrainGate = false, false, 0, 0
}

// standbyRebalancing is the standby run of seed s with graceful restarts
// (drain, leave, start again) about every other OwnerLease, two at most
// at once, and, every other pair of seeds, load-aware rebalancing (as
// migrating): planned moves follow the load and the membership while
// holders, standbys and the Manager fail.
func standbyRebalancing(s uint64) Config {
	c := standbyScenario(s)
	c.DrainEvery, c.DrainGate = 2*c.Timing.OwnerLease, 2
	if s%4 >= 2 {
		c.Workload, c.Rate = smallZipf(), 10_000
		c.Capacities = []float64{1, 2, 4}
		c.Rebalance, c.RebalanceEvery = weighted, 2*time.Second
		c.SettleTime = ConvergenceBound(c.Timing) + 30*time.Second
	}
	return c
}

// TestSimulationStandbysRebalancing sweeps the standby run with graceful
// restarts and rebalancing: no acknowledged write lost without a loss
// notification across planned moves with standbys, besides the other
// checkers. With -sim.long only (a quarter of the long sweep's seeds: a
// run costs two to four times a standby run); replay a seed with
// -sim.long -sim.seed N.
func TestSimulationStandbysRebalancing(t *testing.T) {
	longOnly(t, "the standby sweep with rebalancing")
	t.Parallel()
	results := seeds(t, sweepSeeds(max(sweepSize()/4, requiredSeeds)), standbyRebalancing)
	tot := sweep(t, results, func(s Stats) map[string]int {
		m := map[string]int{"graceful restarts": s.Drains, "rebalancing rounds": s.Plans, "handovers done": s.HandoversDone,
			"migrated grants": s.MigratedGrants, "losses": s.LossEvents, "notifications": s.Notified}
		maps.Copy(m, sbFaultsRequired(sbFaultTotals(results), s))
		return m
	})
	var a, prom int
	for _, r := range results {
		a += r.Stats.StandbyAcks
		prom += r.Stats.Promotions
	}
	t.Logf("%d seeds: %d graceful restarts, %d rebalancing rounds, %d handovers asked, %d done (%d given up), %d migrated grants; %d writes acknowledged, %d keys served from a promoted copy; %d owner crashes, %d manager restarts, %d losses, %d notifications",
		len(results), tot.Drains, tot.Plans, tot.Handovers, tot.HandoversDone, tot.HandoversGivenUp, tot.MigratedGrants, a, prom, tot.OwnerCrashes, tot.ManagerRestarts, tot.LossEvents, tot.Notified)
	t.Logf("  %s", sbFaultLine(sbFaultTotals(results)))
}
