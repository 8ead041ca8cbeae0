package lookup

import "github.com/leasehold/leasehold/internal/faults"

// The simulation proves its checkers can fail by breaking protocol rules on
// purpose (internal/faults). A Lookup can break three, IgnoreSnapshotDiff,
// FreshAtReceipt and FreshWithoutDrift, switches read where the rules are
// kept. It is no part of CoreConfig, which
// embedders fill in: the simulation sets it through this hook on a Core it
// has just made.
func init() {
	faults.Lookup = func(core any, s faults.Set) { core.(*Core).broken = s }
}
