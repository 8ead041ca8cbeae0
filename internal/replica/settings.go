package replica

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/protocol"
)

// Settings configure a replica: its Core's lease rules, its Feed's pace,
// its Raft node's pace and its read leases. manager.Config holds the same
// settings for embedders, documents them and validates them; NewReplica
// fills in the defaults (SetDefaults) but checks nothing, so the
// simulation can run settings that break the protocol's rules.
type Settings struct {
	// Lease is the Core's.
	Lease lease.Settings
	// PushEvery is the least time between two rounds of pushes to the
	// Lookups of a namespace; 0 means 100 ms, negative pushes at once.
	PushEvery time.Duration
	// RaftTick and ElectionTicks pace Raft: a heartbeat every tick, an
	// election after ElectionTicks without a leader.
	RaftTick      time.Duration
	ElectionTicks int
	// SnapshotEntries is how many applied entries trigger a snapshot.
	SnapshotEntries uint64
	// LearnerTimeout is how long an added replica may take to catch up
	// before it is removed again; 0 means DefaultLearnerTimeout.
	LearnerTimeout time.Duration
	// ReadLease configures quorum read leases (docs/protocol.md).
	ReadLease ReadLease
}

// ReadLease configures quorum read leases: which replicas hold one, for how
// long and how often they ask again. Every replica of a group must be
// given the same.
type ReadLease struct {
	// All makes every replica a holder; Holders names some by Raft ID.
	All     bool
	Holders []uint64
	// Duration is how long a holder may serve after it asked for the
	// promises that grant its lease, on its own clock.
	Duration time.Duration
	// Renew is how often a holder asks again.
	Renew time.Duration
}

// On reports whether any replica holds read leases.
func (l ReadLease) On() bool { return l.All || len(l.Holders) > 0 }

// Holds reports whether replica id is a holder.
func (l ReadLease) Holds(id uint64) bool {
	return l.All || slices.Contains(l.Holders, id)
}

// ReadLeaseBound is the longest a leader counts a holder as possibly
// serving after it last promised it, on the leader's clock: Duration ×
// (1 + MaxDrift), so that the holder's lease, timed on a clock that may run
// slower, has ended by then.
func (c *Settings) ReadLeaseBound() time.Duration {
	return time.Duration(float64(c.ReadLease.Duration) * (1 + c.Lease.Timing.MaxDrift))
}

// SetDefaults fills in the zero fields that have a default which the
// replica needs as a value: Timing, RaftTick, ElectionTicks,
// SnapshotEntries and the read leases' Duration and Renew. (The others'
// zero values are read where they are used.) The RaftTick default is the
// smaller of 100 ms and Timing.Renew/20: heartbeats well within a renewal,
// 25 ms with the fast timings, so a failover takes a fraction of a 2 s
// lease.
func (c *Settings) SetDefaults() {
	if c.Lease.Timing == (protocol.Timing{}) {
		c.Lease.Timing = protocol.Production()
	}
	if c.RaftTick <= 0 {
		c.RaftTick = min(100*time.Millisecond, c.Lease.Timing.Renew/20)
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
