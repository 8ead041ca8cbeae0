package owner

import "github.com/leasehold/leasehold/internal/faults"

// The simulation proves its checkers can fail by breaking protocol rules on
// purpose (internal/faults). An Owner can break five: CompactAsAccepted,
// NoRaceFilter, TimerAtReceipt, LateHandoverDone and RetakeGone, each a
// switch read where its rule is kept. The switches are no part of CoreConfig, which embedders fill in:
// the simulation sets them through this hook on a Core it has just made.
func init() {
	faults.Owner = func(core any, s faults.Set) { core.(*Core).broken = s }
}
