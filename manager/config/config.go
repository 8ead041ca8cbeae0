// Package config holds the settings of one Manager replica: the lease logic
// its leader runs, the feed that keeps Lookups in sync, and the pace of its
// Raft node. manager.ServerConfig embeds them; the replica that runs them
// (internal to leasehold) reads the same struct, so every setting reaches
// it without being copied field by field.
package config

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

// Replica configures a Manager replica. The zero value serves the default
// namespace with production timings. Every replica of a group should be
// given the same settings.
type Replica struct {
	// Timing is the protocol's timers; the zero value means
	// protocol.Production(). Owners and Lookups adopt the Manager's.
	Timing protocol.Timing
	// Namespaces served besides the default one.
	Namespaces []string
	// Policy computes the desired assignment; nil means consistent hashing
	// with 64 virtual nodes per Owner (C§2.1.2).
	Policy assign.Policy
	// Epoch names the lease table. It must grow every time the Manager
	// starts without its previous state, so Owners and Lookups can tell a
	// restarted Manager from a delayed message of a dead one. A server
	// takes 0 as its start time in Unix nanoseconds; a group that restarts
	// from its data directory keeps the epoch it has.
	Epoch uint64
	// Seed seeds the leader's race-backoff jitter; any value will do.
	Seed uint64

	// Handover is how long the holder of a range that moves between two
	// live Owners is given to hand its state over (C§2.1.2) before the
	// range is recalled without it; 0 means one OwnerLease. Negative turns
	// planned moves off: ranges are always recalled.
	Handover time.Duration
	// DrainGate caps how many Owners of a namespace may drain at once (the
	// maintenance gate); 0 means 1.
	DrainGate int
	// Rebalance, if set, makes the desired assignment load-aware: every
	// RebalanceEvery (0 means 5 s) it plans a round of moves from the
	// Owners' load reports (rebalance.Weighted, or the Centrifuge baseline)
	// and Policy is not used.
	Rebalance      rebalance.Policy
	RebalanceEvery time.Duration
	// MembershipEvery paces the planning of membership changes (joins,
	// leaves, drains, capacities), which recomputes the desired assignment
	// over every member: a change is planned at once if none was in the
	// last MembershipEvery, and otherwise at the end of it, together with
	// every change that came meanwhile. A lone join is served at once; the
	// joins of a starting cluster cost one plan per MembershipEvery, not
	// one per Owner. 0 means 1 s, or a quarter of Timing.Renew if that is
	// shorter (125 ms in the fast profile); negative plans every change at
	// once.
	MembershipEvery time.Duration
	// PushEvery is the least time between two rounds of pushes to the
	// Lookups of a namespace: a change applied sooner after the last round
	// waits for the next, which carries everything applied meanwhile. 0
	// means 100 ms; negative pushes every applied change at once.
	PushEvery time.Duration

	// RaftTick and ElectionTicks pace Raft: a heartbeat every tick, an
	// election after ElectionTicks (randomised up to twice that) without a
	// leader. Defaults: see SetDefaults.
	RaftTick      time.Duration
	ElectionTicks int
	// SnapshotEntries is how many applied entries trigger a snapshot and
	// log compaction; 0 means 10,000.
	SnapshotEntries uint64
	// LearnerTimeout is how long a replica added to the group (leasehold
	// cluster add) may take to catch up with the leader's log before it is
	// removed again; it votes only once caught up. 0 means 30 s.
	LearnerTimeout time.Duration

	// MaxOwners caps the Owners a namespace records (leasehold manager
	// --max-owners); 0 means DefaultMaxOwners. A new Owner past it is
	// refused before anything is recorded or planned.
	MaxOwners int
	// MaxRanges caps the lease-table segments of a namespace (--max-ranges);
	// 0 means DefaultMaxRanges. A new or returning Owner, or a higher
	// capacity, is refused if the ranges it adds (its ring points), with
	// those of the joins already admitted and not yet planned, could take
	// the table past it.
	MaxRanges int

	// ReadLease turns on quorum read leases (docs/protocol.md, "Quorum
	// read leases"): the replicas it names serve linearizable reads of the
	// replicated state from their own copy while a majority's promises
	// last, and every write waits for them. The zero value names no
	// holder: reads go to the leader or take a ReadIndex round, as before.
	ReadLease ReadLease
}

// The defaults of MaxOwners and MaxRanges: 10,000 Owners of 64 ranges each
// fit, with room; a Lookup's snapshot of the largest table still fits the
// Lookup's message limit.
const (
	DefaultMaxOwners = 10000
	DefaultMaxRanges = 1 << 20
)

// OwnerLimit returns MaxOwners, or its default.
func (c *Replica) OwnerLimit() int {
	if c.MaxOwners > 0 {
		return c.MaxOwners
	}
	return DefaultMaxOwners
}

// RangeLimit returns MaxRanges, or its default.
func (c *Replica) RangeLimit() int {
	if c.MaxRanges > 0 {
		return c.MaxRanges
	}
	return DefaultMaxRanges
}

// ReadLease configures quorum read leases. Every replica of a group must be
// given the same holders and lengths: a replica that did not know another
// held a lease would acknowledge writes without it.
type ReadLease struct {
	// All makes every replica a holder; Holders names some by Raft ID
	// instead. Neither: no replica holds a read lease.
	All     bool
	Holders []uint64
	// Duration is how long a holder may serve after it asked for the
	// promises that grant its lease, on its own clock; 0 means one
	// election timeout (RaftTick × ElectionTicks). A crashed or cut-off
	// holder stalls writes for at most Duration × (1 + Timing.MaxDrift)
	// after the leader last promised it.
	Duration time.Duration
	// Renew is how often a holder asks again; 0 means Duration / 4. It must
	// be shorter than Duration, or the lease lapses between rounds.
	Renew time.Duration
}

// On reports whether any replica holds read leases.
func (l ReadLease) On() bool { return l.All || len(l.Holders) > 0 }

// Holds reports whether replica id is a holder.
func (l ReadLease) Holds(id uint64) bool {
	if l.All {
		return true
	}
	for _, h := range l.Holders {
		if h == id {
			return true
		}
	}
	return false
}

// ReadLeaseBound is the longest a leader counts a holder as possibly
// serving after it last promised it, on the leader's clock: Duration ×
// (1 + MaxDrift), so that the holder's lease, timed on a clock that may run
// slower, has ended by then.
func (c *Replica) ReadLeaseBound() time.Duration {
	return time.Duration(float64(c.ReadLease.Duration) * (1 + c.Timing.MaxDrift))
}

// SetDefaults fills in the zero fields that have a default which the
// replica needs as a value: Timing, RaftTick, ElectionTicks and
// SnapshotEntries. (The others' zero values are read where they are used,
// as their comments say.) The RaftTick default is the smaller of 100 ms and
// Timing.Renew/20: heartbeats well within a renewal, 25 ms with the fast
// timings, so a failover takes a fraction of a 2 s lease.
func (c *Replica) SetDefaults() {
	if c.Timing == (protocol.Timing{}) {
		c.Timing = protocol.Production()
	}
	if c.RaftTick <= 0 {
		c.RaftTick = min(100*time.Millisecond, c.Timing.Renew/20)
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	if c.ReadLease.On() {
		if c.ReadLease.Duration == 0 {
			c.ReadLease.Duration = time.Duration(c.ElectionTicks) * c.RaftTick
		}
		if c.ReadLease.Renew == 0 {
			c.ReadLease.Renew = c.ReadLease.Duration / 4
		}
	}
}

// Validate fills in c's defaults (SetDefaults) and checks the result: the
// timing must be safe and every namespace name valid. Its error is a
// *FieldError naming the field at fault.
func (c *Replica) Validate() error {
	c.SetDefaults()
	if err := c.Timing.Validate(); err != nil {
		return &FieldError{Field: "Timing", Err: err}
	}
	if c.MaxOwners < 0 {
		return &FieldError{Field: "MaxOwners", Err: fmt.Errorf("%d is negative", c.MaxOwners)}
	}
	if c.MaxRanges < 0 {
		return &FieldError{Field: "MaxRanges", Err: fmt.Errorf("%d is negative", c.MaxRanges)}
	}
	for _, ns := range c.Namespaces {
		if ns == "" || len(ns) > wire.MaxStringLen {
			return &FieldError{Field: "Namespaces", Err: fmt.Errorf("invalid namespace name %q (1 to %d bytes)", ns, wire.MaxStringLen)}
		}
	}
	if field, err := c.ReadLease.validate(c.RaftTick); err != nil {
		return &FieldError{Field: field, Err: err}
	}
	if b := c.ReadLeaseBound(); c.ReadLease.On() && b >= c.Timing.OwnerLease-c.Timing.Renew {
		// A holder's crash holds every answer for up to b: the Owners
		// must still hear a renewal before their leases end.
		return &FieldError{Field: "ReadLease.Duration", Err: fmt.Errorf("Duration × (1 + MaxDrift) (%s) must be shorter than OwnerLease − Renew (%s): a holder's crash stalls renewals that long",
			b, c.Timing.OwnerLease-c.Timing.Renew)}
	}
	return nil
}

// validate checks a read-lease configuration whose defaults are filled in,
// and names the field at fault. A lease shorter than two Raft ticks could
// not be renewed before it ends (a promise needs a round trip); at most 64
// holders.
func (l ReadLease) validate(tick time.Duration) (string, error) {
	if !l.On() {
		if l.Duration != 0 || l.Renew != 0 {
			return "ReadLease", fmt.Errorf("Duration and Renew are set but no replica holds a read lease (set All or Holders)")
		}
		return "", nil
	}
	if l.All && len(l.Holders) > 0 {
		return "ReadLease", fmt.Errorf("All and Holders are both set")
	}
	if len(l.Holders) > 64 {
		return "ReadLease", fmt.Errorf("%d holders; at most 64", len(l.Holders))
	}
	seen := map[uint64]bool{}
	for _, h := range l.Holders {
		if h == 0 {
			return "ReadLease", fmt.Errorf("holder ID 0")
		}
		if seen[h] {
			return "ReadLease", fmt.Errorf("holder %d named twice", h)
		}
		seen[h] = true
	}
	if l.Duration < 2*tick {
		return "ReadLease.Duration", fmt.Errorf("Duration (%s) must be at least two Raft ticks (%s)", l.Duration, 2*tick)
	}
	if l.Renew <= 0 || l.Renew >= l.Duration {
		return "ReadLease.Renew", fmt.Errorf("Renew (%s) must be positive and shorter than Duration (%s)", l.Renew, l.Duration)
	}
	return "", nil
}

// A FieldError is a configuration that Validate refuses: Field names the
// field at fault, as Go spells it (for Timing, a *protocol.TimingError
// names the fields of protocol.Timing involved).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "manager: " + e.Field + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }
