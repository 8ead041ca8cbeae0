// Package sim runs a Manager — one replica or a Raft group of them — with
// many Owner cores and many Lookup cores under a virtual clock, over a
// simulated network that drops, delays, duplicates, reorders and partitions
// messages, Raft's among them, while nodes crash and restart and every
// node's clock runs at its own rate within the allowed drift.
// Checkers watch every step for the two guarantees of leasehold — single copy
// and recovery notification — and for convergence once faults stop.
//
// A run is a pure function of its Config — Raft's random election timeouts
// included (raftrand.go) — so the same seed replays the same run.
package sim

import (
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

// Config describes one simulated run.
type Config struct {
	Seed uint64
	// Managers is the number of Manager replicas, one Raft group
	// (docs/design.md rule 8); 0 or 1 is a single replica, the embedded default.
	// Raft traffic crosses the simulated network like any other, so drops,
	// delays, duplicates and partitions apply to it.
	Managers int
	// ReadReplicas adds this many read replicas to the Managers' group
	// (readreplicas.go): started to join, added by the leader as an
	// operator adds them, faulted like the followers and on their own
	// (ReadReplicaFaultEvery), and spread over by the Lookups.
	ReadReplicas int
	// ReadReplicaFaultEvery crashes, stalls or cuts off a read replica on
	// average this often while FaultTime lasts (0: only the faults any
	// follower gets).
	ReadReplicaFaultEvery time.Duration
	Owners                int
	Lookups               int
	Timing                protocol.Timing
	// Unvalidated runs Timing even if Validate rejects it (to show that the
	// checkers catch an unsafe timing).
	Unvalidated bool
	Policy      assign.Policy // nil: consistent hashing, 64 virtual nodes

	// FaultTime is how long faults are injected; then the network heals,
	// every node comes back, and the run goes on for SettleTime, at the end
	// of which the system must have converged.
	FaultTime  time.Duration
	SettleTime time.Duration // 0: ConvergenceBound(Timing)

	// Network faults while FaultTime lasts.
	DropRate      float64       // probability a message is lost
	DupRate       float64       // probability a message is delivered twice
	MinDelay      time.Duration // typical delays are MinDelay..4×MinDelay
	MaxDelay      time.Duration // a LongDelayRate share is delayed up to MaxDelay
	LongDelayRate float64

	// Node faults while FaultTime lasts, as mean times between events.
	OwnerCrashEvery  time.Duration // 0: none
	LookupCrashEvery time.Duration
	// ManagerCrashEvery crashes a Manager replica: with several, the
	// leader three times in four, a follower otherwise. A replica restarts
	// from its Raft log (its storage survives, as a data directory does),
	// unless ManagerLosesState.
	ManagerCrashEvery time.Duration
	// ManagerLosesState makes a single Manager (Managers ≤ 1) restart with
	// empty storage and a new, larger epoch, as a Manager without a data
	// directory does: every lease of the old epoch is lost. Ignored with
	// several replicas, whose restarts always keep their storage.
	ManagerLosesState bool
	// PartitionEvery cuts a random group of nodes off from the rest. With
	// one replica, a third of the time the Manager is in the group; with
	// several, a third of the time the group holds the leader and a
	// minority of the replicas (the leader is isolated and the majority
	// elects another), a third of the time some followers, and otherwise
	// no replica. Owners and Lookups each join the group one time in four.
	PartitionEvery time.Duration
	// StallEvery stalls a node — alive, connections open, answering
	// nothing — for up to two OwnerLeases, after which it handles
	// everything that waited with its clock jumped (stall.go): a Manager
	// replica half the time (with several, the leader three times in four),
	// otherwise an Owner.
	StallEvery time.Duration
	// DuplicateEvery starts a second process with a live Owner's ID: the
	// run goes on beside a new incarnation until its leases run out
	// (ghost.go).
	DuplicateEvery time.Duration
	// ClockSkew gives every node a clock rate within Timing.MaxDrift of the
	// others (half of them at an extreme) and a random offset.
	ClockSkew bool

	Break *faults.Set // rules to break deliberately
	// NoHeartbeats makes the Lookups' requests say they take no
	// heartbeats, as a Lookup of an earlier release: they poll every Sync.
	NoHeartbeats bool

	// Migration gives the Owners an application that hands state over on
	// planned moves (app.go): the holder sends the range's state to the
	// next Owner over the simulated network and calls HandoverDone when it
	// is acknowledged. The migration checker fails any Owner that takes up
	// a migrated grant without the state it names. AppFaults makes one
	// Owner run in eight an application without the handover upcall, and
	// the application give up one handover in sixteen while FaultTime
	// lasts.
	Migration bool
	AppFaults bool
	// DrainEvery restarts an Owner gracefully (drain, leave, start again)
	// on average this often while FaultTime lasts; DrainGate is the
	// Manager's maintenance gate (manager.Config.DrainGate).
	DrainEvery time.Duration
	DrainGate  int

	// Workload, if set, is the popularity of the keys requested, Rate
	// requests per second in all: every Owner reports the load its held
	// ranges carry and the hottest keys among them, as its load meter
	// would. With Rate but no Workload, no requests come until
	// Control.SetWorkload. Rebalance is the Manager's load-aware policy
	// (manager.Config.Rebalance, planned every RebalanceEvery); nil keeps the
	// membership-only Policy. Owner i has capacity
	// Capacities[i%len(Capacities)] (none: all 1).
	Workload       *rebalance.Workload
	Rate           float64
	Rebalance      rebalance.Policy
	RebalanceEvery time.Duration
	Capacities     []float64

	// StartSpread starts the Owners and Lookups at random times within
	// StartSpread of the Manager instead of all at once (0): thousands of
	// Lookups asking for a snapshot in the same millisecond would hold
	// thousands of copies of the table in flight at once.
	StartSpread time.Duration

	// NoChecks turns the checkers off, for benchmarks at scales where they
	// cost more than the system they watch: single copy compares every
	// stepping Owner with every other (O(owners²) per step), and recovery
	// notification follows every loss at every Lookup. With NoChecks a run
	// reports no Violation and Stats.LossEvents and Notified stay 0; the
	// message and byte counts are kept. Tests leave it false.
	NoChecks bool
	// NoWriteCheck turns off the acknowledged-write check alone (acks.go),
	// for the broken rules of single copy: their first symptom is an Owner
	// writing under a lease whose loss was recorded, which would end the run
	// before the single-copy checker sees two believers. Tests of the
	// product leave it false.
	NoWriteCheck bool
	// ThinLookups replaces every lookup.Core by a stand-in that speaks the
	// same sync protocol to the Manager but keeps no copy of the table (its
	// LSN only; thinlookup.Core, which the loopback benchmark runs too): for measuring the Manager with more Lookups than full
	// copies fit in memory. It requires NoChecks, and Control.Route finds
	// nothing.
	ThinLookups bool
	// SnapshotEntries is how many applied Raft entries a Manager replica
	// lets pass between snapshots of its State (manager.Config
	// .SnapshotEntries); 0 means 10, low enough that a faulty run compacts
	// its logs several times and replicas that were down catch up from a
	// snapshot (MsgSnap) as well as from the log. Benchmarks of the
	// Manager's cost set production's value (10,000): a snapshot is the
	// whole State.
	SnapshotEntries uint64
	// Probe, if set, is told how long each call into the Manager core takes
	// on the real clock, and every message the Manager sends or receives.
	Probe Probe
	// Stopwatch is the real clock Probe's timings are read from; nil:
	// time.Now. Only the measurement reads it: the run stays a pure
	// function of the Config.
	Stopwatch func() time.Time
	// Script, if set, is called once before the run starts with a Control
	// through which it can schedule crashes, restarts and probes of its own.
	Script func(*Control)
	// ReadLease, if set, turns quorum read leases on (readlease.go).
	ReadLease *ReadLeaseConfig
	// ReplicaDelay is added to the delay of every message between two
	// Manager replicas: replicas in different racks or zones, with the
	// clients near one of them.
	ReplicaDelay time.Duration
	// OwnerLatency, if set, is told how long each Owner request took to be
	// answered (from its send to the answer's arrival), and its sequence
	// number in the Owner run's session (1: the run's first request, which
	// the Manager records in the replicated state before it answers).
	OwnerLatency func(at, took time.Duration, seq uint64)
	// WriteLatency, if set, is told for every log entry the time from its
	// append at the leader that proposed it to the first answer released
	// that rests on it (replica.ReadLeaseAcked): the Manager's write
	// acknowledgement.
	WriteLatency func(at, took time.Duration)

	// Standbys gives the namespace one standby per range
	// (manager.Config.Standbys; docs/design.md rules 21-24), and the
	// Owners the standby application and its checker (standby.go): no
	// acknowledged write is lost without a loss notification. Owner i is in
	// zone i mod Zones (0: one zone). StandbyPairCrashEvery crashes a
	// holder and its standby together; StandbyZoneCrashEvery crashes
	// every Owner of one zone at once (their deaths are noticed apart, as
	// their last requests were).
	Standbys              bool
	Zones                 int
	StandbyPairCrashEvery time.Duration
	StandbyZoneCrashEvery time.Duration
	// FillOnPaired makes the standby application fill a new standby on
	// the upcall reporting the pairing, from what it holds under the lease
	// then, as kv does (standby_fill.go), instead of at its next step.
	FillOnPaired bool
	// StandbyFaults draws the standby design's own faults at the moments
	// that matter: holder–standby cuts, a holder stalled past its
	// promotion, a Manager deposed as it sends a promoted grant
	// (standby_faults.go).
	StandbyFaults StandbyFaults

	// queueFloor, if set, replaces minCompact: tests make the event queue
	// compact often to check that it leaves the run as it was.
	queueFloor int
}

// Probe observes the Manager of a run — the leader replica — for
// benchmarks. Its methods are called from the goroutine running Run, never
// concurrently.
type Probe interface {
	// ManagerWork reports work of the leader replica at virtual time at
	// that took took of real time: a step (StepLease, StepSync, StepRaft,
	// Tick) or the replica.Drive that follows it.
	ManagerWork(at, took time.Duration)
	// ManagerTraffic reports a message of about bytes bytes (the wireSize
	// estimate) that the leader replica sent (out) or received (!out) at
	// virtual time at, Raft messages included.
	ManagerTraffic(at time.Duration, bytes int, out bool)
}

// ConvergenceBound is how long after faults stop every Lookup's copy equals
// the Manager's table and every key is owned as the policy says: the last
// reservations run out (ManagerLease, twice when the Manager itself just
// restarted), grants and recalls take a few renewals, and every Lookup syncs
// (SyncTimeout).
func ConvergenceBound(t protocol.Timing) time.Duration {
	return 2*t.ManagerLease + 4*t.Renew + t.SyncTimeout
}

// Faulty returns a Config with every kind of fault, scaled to t, for seed:
// a single Manager that loses its state when it restarts.
func Faulty(seed uint64, t protocol.Timing) Config {
	return Config{
		Seed:              seed,
		ManagerLosesState: true,
		Owners:            8,
		Lookups:           20,
		Timing:            t,
		FaultTime:         30 * t.OwnerLease,
		DropRate:          0.05,
		DupRate:           0.02,
		MinDelay:          t.OwnerLease / 400,
		MaxDelay:          t.OwnerLease / 10,
		LongDelayRate:     0.05,
		OwnerCrashEvery:   2 * t.OwnerLease,
		LookupCrashEvery:  4 * t.OwnerLease,
		ManagerCrashEvery: 10 * t.OwnerLease,
		PartitionEvery:    2 * t.OwnerLease,
		StallEvery:        6 * t.OwnerLease,
		DuplicateEvery:    8 * t.OwnerLease,
		ClockSkew:         true,
	}
}

// FaultyReplicated returns a Config with every kind of fault, scaled to t,
// for seed and a group of managers replicas: leader and follower crashes
// (each replica restarting from its Raft log), partitions that isolate the
// leader with some Owners and Lookups, and the network's faults on Raft
// traffic too.
func FaultyReplicated(seed uint64, t protocol.Timing, managers int) Config {
	c := Faulty(seed, t)
	c.Managers = managers
	c.ManagerLosesState = false
	c.ManagerCrashEvery = 4 * t.OwnerLease
	return c
}
