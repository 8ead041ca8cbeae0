package sim

import (
	"fmt"
)

// standbyTargeted adds the standby design's own faults (standby_faults.go,
// standby_moves.go) to the standby run c: holder–standby cuts at fills, at
// standby answers and at promotions; holders stalled past their
// promotion; Managers crashed as they send a promoted grant; and planned
// moves with their state (one run in eight hands nothing over, one
// handover in sixteen is given up) and graceful restarts.
func standbyTargeted(c *Config) {
	t := c.Timing
	c.StandbyFaults = StandbyFaults{FillCutOneIn: 64, AckCutOneIn: 40, PromotionCutOneIn: 1, StallHolderEvery: t.OwnerLease / 2, DeposeOneIn: 2}
	c.Migration, c.AppFaults = true, true
	c.DrainEvery, c.DrainGate = 4*t.OwnerLease, 2
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
		"deposed promoted grants delivered late": f.DeposedLate,
		"handovers with standbys":                tot.Handovers, "migrated grants with standbys": tot.MigratedGrants,
		"standby keys handed over": f.StandbyHandoverWrites, "graceful restarts with standbys": tot.Drains,
	}
}

// sbFaultLine describes a sweep's standby faults.
func sbFaultLine(f StandbyFaultStats) string {
	return fmt.Sprintf("holder–standby cuts: %d at a fill, %d right after an answer, %d losing it, %d at a promotion (%d both ways, %d holder→standby, %d standby→holder), %d messages lost to them, %d to random partitions; "+
		"%d holders stalled past their reservation, %d promotions while the old holder was stalled, %d old holders resumed after; "+
		"%d managers crashed sending a promoted grant (%d dropped, %d late): %d taken up, %d left the table untaken by a live run, %d not taken up by a run that ended; %d standby keys handed over",
		f.FillCuts, f.AckCuts, f.AckLostCuts, f.PromotionCuts, f.BothWays, f.HolderToStandby, f.StandbyToHolder, f.PairMsgsCut, f.PairMsgsPartitioned,
		f.HolderStalls, f.PromotedWhileStalled, f.ResumedAfterPromotion,
		f.Deposals, f.DeposedDropped, f.DeposedLate, f.DeposedTakenUp, f.DeposedFreed, f.DeposedOwnerGone, f.StandbyHandoverWrites)
}

// untargeted takes the targeted standby faults and the planned moves out
// of c: the broken twins' seeds were named in runs without them.
func untargeted(c *Config) {
	c.StandbyFaults = StandbyFaults{}
	c.Migration, c.AppFaults, c.DrainEvery, c.DrainGate = false, false, 0, 0
}
