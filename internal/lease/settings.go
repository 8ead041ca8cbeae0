// The Core's settings.

package lease

import (
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

// Settings configure a Core: the lease logic's part of manager.Config,
// whose fields of the same names document them for embedders. The Core
// reads them as given: manager.Config.Validate fills in the defaults and
// checks them, and the simulation may run settings that break the
// protocol's rules on purpose.
type Settings struct {
	// Timing is the protocol's timers. Owners and Lookups adopt the
	// Manager's.
	Timing protocol.Timing
	// Namespaces served besides the default one.
	Namespaces []string
	// Policy computes the desired assignment; nil means consistent hashing
	// with 64 virtual nodes per Owner (C§2.1.2).
	Policy assign.Policy
	// Epoch names the lease table; 0 means 1. It must grow every time the
	// Manager starts without its previous state.
	Epoch uint64
	// Seed seeds the leader's race-backoff jitter.
	Seed uint64
	// Handover is how long a planned move waits for the state (rule 13);
	// 0 means one OwnerLease, negative recalls instead.
	Handover time.Duration
	// DrainGate caps the Owners of a namespace draining at once; 0 means 1.
	DrainGate int
	// Rebalance, if set, plans load-aware moves every RebalanceEvery (0
	// means 5 s) instead of using Policy.
	Rebalance      rebalance.Policy
	RebalanceEvery time.Duration
	// MembershipEvery paces the planning of membership changes: 0 means
	// 1 s or Timing.Renew/4 if shorter, negative plans every change at once.
	MembershipEvery time.Duration
	// MaxOwners and MaxRanges cap a namespace's Owners and lease-table
	// segments; 0 means DefaultMaxOwners and DefaultMaxRanges.
	MaxOwners int
	MaxRanges int
	// Standbys gives, by namespace name, the standby Owners per range: 0
	// (absent) is the papers' behaviour, 1 names a standby beside every
	// lease's holder (docs/design.md rules 21-24).
	Standbys map[string]int
}

// MaxStandbys is the most standbys per range a namespace may ask for.
const MaxStandbys = 1

// standbys returns namespace ns's standbys per range.
func (c *Settings) standbys(ns string) int { return c.Standbys[ns] }

// The defaults of MaxOwners and MaxRanges: 10,000 Owners of 64 ranges each
// fit, with room; a Lookup's snapshot of the largest table still fits the
// Lookup's message limit.
const (
	DefaultMaxOwners = 10000
	DefaultMaxRanges = 1 << 20
)

// OwnerLimit returns MaxOwners, or its default.
func (c *Settings) OwnerLimit() int {
	if c.MaxOwners > 0 {
		return c.MaxOwners
	}
	return DefaultMaxOwners
}

// RangeLimit returns MaxRanges, or its default.
func (c *Settings) RangeLimit() int {
	if c.MaxRanges > 0 {
		return c.MaxRanges
	}
	return DefaultMaxRanges
}
