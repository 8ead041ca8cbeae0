package manager

import (
	"errors"
	"fmt"
	"github.com/leasehold/leasehold"
	"log/slog"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
	"google.golang.org/grpc"
)

// Config configures a Server: the lease rules its leader runs, the feed
// that keeps Lookups in sync, the pace of its Raft node, its place in a
// group of replicas, its trust boundary and its limits. The zero value is
// a one-replica Manager that keeps its state in memory, serving the
// default namespace with production timings, once Insecure or Certs is
// set. Every replica of a group should be given the same lease, feed, Raft
// and read-lease settings.
type Config struct {
	// Timing is the protocol's timers; the zero value means
	// protocol.Production(). Owners and Lookups adopt the Manager's.
	Timing protocol.Timing
	// Namespaces served besides the default one.
	Namespaces []string
	// Standbys gives, by namespace name (the default one or one of
	// Namespaces), its standby Owners per range: 0 or absent keeps the
	// papers' soft state, 1 names for every range a standby on another
	// zone, promoted without a loss notification when the holder is lost
	// (docs/design.md rules 21-24).
	Standbys map[string]int
	// Policy computes the desired assignment; nil means consistent hashing
	// with 64 virtual nodes per Owner (C§2.1.2).
	Policy assign.Policy
	// Epoch names the lease table. It must grow every time the Manager
	// starts without its previous state, so Owners and Lookups can tell a
	// restarted Manager from a delayed message of a dead one. 0 means the
	// start time in Unix nanoseconds, which grows across restarts; a group
	// that restarts from its data directory keeps the epoch it has.
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

	// ID is this replica's Raft ID, 1 if zero.
	ID uint64
	// Advertise is the address other replicas and clients reach this one
	// at; empty means the listener's address.
	Advertise string
	// Peers are the founding replicas of a new group, this one included,
	// with their addresses; every founder gets the same list. Empty means a
	// group of this replica alone. Ignored when DataDir holds state.
	Peers []Peer
	// Join starts a replica with no state that waits to be added to a
	// running group (leasehold cluster add) instead of founding one; Peers
	// then lists the running group's replicas, so it can answer them.
	Join bool
	// Role is this replica's role in its group: RoleVoter ("" too), or
	// RoleReadReplica, a replica that applies the log and serves Lookups
	// but never votes (docs/operations.md, "Read replicas"). A read
	// replica must Join: it is added by leasehold cluster add
	// --read-replica, which marks it in the replicated state, and only
	// that mark keeps every leader from promoting it.
	Role string
	// DataDir keeps the Raft log and snapshots; empty keeps them in memory,
	// so a restart starts a new epoch and every Owner loses its leases.
	DataDir string
	// PeerDialOptions are used to dial the other replicas (credentials, for
	// one); nil means plaintext TCP. The server's own listener options are
	// the embedder's: see Server.GRPCOptions and Register.
	PeerDialOptions []grpc.DialOption
	// Certs, if set, puts the trust boundary around the server
	// (docs/security.md): Serve and GRPCOptions serve mutual TLS with this
	// replica's certificate, every call is admitted by its caller's role
	// and identity, and the other replicas are dialled with it (unless
	// PeerDialOptions say otherwise). Nil needs Insecure.
	Certs *certs.Source
	// Insecure, with Certs nil, serves plaintext and admits anyone: only
	// for tests and a Manager on a loopback address. Plaintext is only ever
	// chosen explicitly: with neither Certs nor Insecure, Validate fails.
	Insecure bool
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// MaxRequestRate caps the requests per second one stream may send, with
	// bursts of twice that; a stream over it is closed with
	// ResourceExhausted. 0 means 50.
	MaxRequestRate float64
	// MaxCallRate caps the unary calls (status, drain, cluster changes,
	// holder reads) per second on one connection, with bursts of twice
	// that; a call past it is refused with ResourceExhausted before its
	// request is read. 0 means DefaultMaxCallRate.
	MaxCallRate float64
	// MaxMessageBytes caps the size of a message a client may send; 0 means
	// 4 MiB.
	MaxMessageBytes int
	// MaxConnections caps the connections open to this replica at once;
	// one past it is refused with a GOAWAY naming the limit. 0 means
	// DefaultMaxConnections.
	MaxConnections int
	// MaxStreamsPerConn caps the streams open at once on one connection
	// (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS). A follower relays Owners'
	// streams to the leader over one connection, so it must exceed the
	// Owners one replica may relay. 0 means DefaultMaxStreamsPerConn.
	MaxStreamsPerConn int
	// IdleTimeout closes a connection with no stream open for that long;
	// 0 means DefaultIdleTimeout, negative never.
	IdleTimeout time.Duration
}

// The defaults of MaxOwners and MaxRanges: 10,000 Owners of 64 ranges each
// fit, with room; a Lookup's snapshot of the largest table still fits the
// Lookup's message limit.
const (
	DefaultMaxOwners = lease.DefaultMaxOwners
	DefaultMaxRanges = lease.DefaultMaxRanges
)

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
func (l ReadLease) On() bool { return replica.ReadLease(l).On() }

// Holds reports whether replica id is a holder.
func (l ReadLease) Holds(id uint64) bool { return replica.ReadLease(l).Holds(id) }

// settings returns the replica's part of c, as the replica reads it.
func (c *Config) settings() replica.Settings {
	return replica.Settings{
		Lease: lease.Settings{Timing: c.Timing, Namespaces: c.Namespaces, Policy: c.Policy, Epoch: c.Epoch, Seed: c.Seed,
			Handover: c.Handover, DrainGate: c.DrainGate, Rebalance: c.Rebalance, RebalanceEvery: c.RebalanceEvery,
			MembershipEvery: c.MembershipEvery, MaxOwners: c.MaxOwners, MaxRanges: c.MaxRanges, Standbys: c.Standbys},
		PushEvery: c.PushEvery, RaftTick: c.RaftTick, ElectionTicks: c.ElectionTicks, SnapshotEntries: c.SnapshotEntries,
		LearnerTimeout: c.LearnerTimeout,
		ReadLease:      replica.ReadLease(c.ReadLease),
	}
}

// setDefaults fills in the zero fields that have a default the replica
// needs as a value (replica.Settings.SetDefaults says which).
func (c *Config) setDefaults() {
	s := c.settings()
	s.SetDefaults()
	c.Timing, c.RaftTick, c.ElectionTicks, c.SnapshotEntries = s.Lease.Timing, s.RaftTick, s.ElectionTicks, s.SnapshotEntries
	c.ReadLease = ReadLease(s.ReadLease)
}

// ReadLeaseBound is the longest a leader counts a holder as possibly
// serving after it last promised it, on the leader's clock: Duration ×
// (1 + MaxDrift), so that the holder's lease, timed on a clock that may run
// slower, has ended by then.
func (c *Config) ReadLeaseBound() time.Duration {
	s := c.settings()
	return s.ReadLeaseBound()
}

// Validate fills in c's defaults and checks the result: the timing must
// be safe, every namespace name valid, the limits not negative, the read
// leases coherent and the peers distinct. Its error is a *leasehold.ConfigError that
// names the field at fault. NewServer calls it.
func (c *Config) Validate() error {
	c.setDefaults()
	if err := c.validateRole(); err != nil {
		return err
	}
	if err := c.Timing.Validate(); err != nil {
		return &leasehold.ConfigError{Package: "manager", Field: "Timing", Err: err}
	}
	if c.MaxOwners < 0 {
		return &leasehold.ConfigError{Package: "manager", Field: "MaxOwners", Err: fmt.Errorf("%d is negative", c.MaxOwners)}
	}
	if c.MaxRanges < 0 {
		return &leasehold.ConfigError{Package: "manager", Field: "MaxRanges", Err: fmt.Errorf("%d is negative", c.MaxRanges)}
	}
	for _, ns := range c.Namespaces {
		if ns == "" || len(ns) > wire.MaxStringLen {
			return &leasehold.ConfigError{Package: "manager", Field: "Namespaces", Err: fmt.Errorf("invalid namespace name %q (1 to %d bytes)", ns, wire.MaxStringLen)}
		}
	}
	for ns, n := range c.Standbys {
		if ns != protocol.DefaultNamespace && !slices.Contains(c.Namespaces, ns) {
			return &leasehold.ConfigError{Package: "manager", Field: "Standbys", Err: fmt.Errorf("namespace %q is not served (the default one or one of Namespaces)", ns)}
		}
		if n < 0 || n > lease.MaxStandbys {
			return &leasehold.ConfigError{Package: "manager", Field: "Standbys", Err: fmt.Errorf("%d standbys for namespace %q; want 0 to %d (lease.MaxStandbys)", n, ns, lease.MaxStandbys)}
		}
	}
	if field, err := c.ReadLease.validate(c.RaftTick); err != nil {
		return &leasehold.ConfigError{Package: "manager", Field: field, Err: err}
	}
	if b := c.ReadLeaseBound(); c.ReadLease.On() && b >= c.Timing.OwnerLease-c.Timing.Renew {
		// A holder's crash holds every answer for up to b: the Owners
		// must still hear a renewal before their leases end.
		return &leasehold.ConfigError{Package: "manager", Field: "ReadLease.Duration", Err: fmt.Errorf("Duration × (1 + MaxDrift) (%s) must be shorter than OwnerLease − Renew (%s): a holder's crash stalls renewals that long",
			b, c.Timing.OwnerLease-c.Timing.Renew)}
	}
	if c.Certs == nil && !c.Insecure {
		return &leasehold.ConfigError{Package: "manager", Field: "Certs", Err: errors.New("no certificate: set Certs to serve mutual TLS, or Insecure: true to serve plaintext and admit anyone")}
	}
	if c.Epoch == 0 {
		c.Epoch = uint64(time.Now().UnixNano())
	}
	if c.ID == 0 {
		c.ID = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxRequestRate == 0 {
		c.MaxRequestRate = 50
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 4 << 20
	}
	if err := c.setLimitDefaults(); err != nil {
		return err
	}
	if len(c.Peers) > 0 {
		seen := map[uint64]bool{}
		for _, p := range c.Peers {
			if p.ID == 0 || p.Addr == "" || seen[p.ID] {
				return &leasehold.ConfigError{Package: "manager", Field: "Peers", Err: fmt.Errorf("each peer needs a distinct non-zero ID and an address (got %d=%q)", p.ID, p.Addr)}
			}
			seen[p.ID] = true
		}
		if !seen[c.ID] && !c.Join {
			return &leasehold.ConfigError{Package: "manager", Field: "Peers", Err: fmt.Errorf("the list does not include this replica's ID %d", c.ID)}
		}
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
