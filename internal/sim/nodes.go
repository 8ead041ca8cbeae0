package sim

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/thinlookup"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
)

// The nodes' lives: a node is added once, started (again) with a new clock
// rate and incarnation, crashed and restarted by the fault schedule. A
// client (an Owner or a Lookup) talks to one Manager replica at a time and
// moves on when it hears nothing or is refused.

func (s *Sim) addNode(k kind, idx int, name string) *node {
	n := &node{kind: k, idx: idx, pos: len(s.nodes), name: name, rate: 1}
	s.nodes = append(s.nodes, n)
	return n
}

// start boots a node (again) with a new clock rate. An Owner or a Lookup
// starts a new run with no memory of the last; a Manager replica restarts
// from its Raft log, or, when it loses its state, from nothing with a new
// epoch.
func (s *Sim) start(n *node) {
	n.up = true
	n.inc++
	n.rate, n.offset = 1, 0
	if s.cfg.ClockSkew {
		// Rates within [1/√(1+d), √(1+d)]: any two differ by at most 1+d.
		hi := math.Sqrt(1 + s.cfg.Timing.MaxDrift)
		switch s.rng.IntN(4) {
		case 0:
			n.rate = hi
		case 1:
			n.rate = 1 / hi
		default:
			n.rate = 1/hi + s.rng.Float64()*(hi-1/hi)
		}
		// Clocks are not synchronized, only their rates bounded (C§2.3.1).
		n.offset = time.Duration(s.rng.Int64N(int64(2*time.Hour))) - time.Hour
	}
	now := n.local(s.now)
	seed := s.rng.Uint64()
	if n.kind != managerNode {
		n.target, n.heard = 0, now
		if s.replicated() {
			// Clients list the replicas in different orders, so Lookups
			// spread over the followers.
			n.target = s.rng.IntN(len(s.mgrs))
		}
		s.spreadStart(n)
	}
	switch n.kind {
	case managerNode:
		if n.store == nil || (s.cfg.ManagerLosesState && !s.replicated()) {
			if n.store != nil {
				s.epoch++
			}
			n.store = raft.NewMemoryStorage()
		}
		var err error
		n.rep, err = replica.NewReplica(replica.ReplicaConfig{
			ID:       n.rid,
			Settings: replica.Settings{Lease: lease.Settings{Timing: s.cfg.Timing, Policy: s.cfg.Policy, Epoch: s.epoch, Seed: seed, Rebalance: s.cfg.Rebalance, RebalanceEvery: s.cfg.RebalanceEvery, DrainGate: s.cfg.DrainGate, Standbys: s.standbySetting()}, RaftTick: s.tick, ElectionTicks: electionTicks, SnapshotEntries: cmp.Or(s.cfg.SnapshotEntries, snapshotEntries), ReadLease: s.readLease()},
			Storage:  n.store, Bootstrap: s.bootstrap(n), Break: s.broken(),
		}, now)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", n.name, err))
		}
		n.hadCore = false
	case ownerNode:
		n.draining = false
		n.own = owner.NewCore(s.ownerConfig(n, owner.CoreConfig{
			Namespace: namespace, ID: n.name, Addr: n.name + ":7000", Incarnation: n.inc,
			Timing: s.cfg.Timing, Seed: seed, Zone: s.sbZone(n),
		}))
		faults.Owner(n.own, s.broken())
		s.chk.ownerStarted(n)
	case lookupNode:
		delete(s.bySess, n.session)
		n.session = uint64(n.idx)<<32 | n.inc
		s.bySess[n.session] = n
		if s.cfg.ThinLookups {
			n.thin = thinlookup.New(namespace, s.cfg.Timing, now)
			break
		}
		n.look = lookup.NewCore(lookup.CoreConfig{Namespace: namespace, Timing: s.cfg.Timing}, now)
		faults.Lookup(n.look, s.broken())
		s.chk.lookupStarted(n)
	}
	s.after(n)
}

// crash stops a node: it loses all state but a replica's Raft log; its
// timers and in-flight messages to it go nowhere.
func (s *Sim) crash(n *node) {
	if !n.up {
		return
	}
	switch n.kind {
	case managerNode:
		s.stats.ManagerRestarts++
		if n == s.leader() {
			s.stats.LeaderCrashes++
		}
		if s.cfg.ManagerLosesState && !s.replicated() {
			s.chk.managerCrashed()
		}
		n.rep = nil
	case ownerNode:
		s.stats.OwnerCrashes++
	case lookupNode:
		s.stats.LookupCrashes++
		s.chk.lookupCrashed(n)
	}
	n.up = false
	n.gen++
	defer s.checkLive()
	n.stalled, n.stallQ = false, nil
	inbox := n.inbox
	n.inbox, n.waking = nil, false
	for _, e := range inbox {
		s.snapshotDone(e, false) // its stream broke before the replica read it
	}
}

func (s *Sim) restart(n *node) {
	if !n.up && s.faulting {
		s.start(n)
	}
}

// checkTarget moves a client that has heard nothing from its replica for
// quiet on to the next one, as the runtimes do when a stream breaks. An
// Owner hears an answer every Renew and a Lookup every Sync, so a client
// moves on at its first timer after an answer failed to come: an Owner
// whose leader died reaches the next leader within about 3×Renew of its
// last answer (one hop may be a refusal naming the leader), inside its
// OwnerLease of 4×Renew.
func (s *Sim) checkTarget(n *node, now time.Time, quiet time.Duration) {
	if s.cfg.Break != nil && s.cfg.Break.NoStreamLiveness {
		return // the stream stays open, whether answers come or not
	}
	if s.replicated() && now.Sub(n.heard) > quiet {
		s.retarget(n, now, -1)
	}
}

// retarget points a client at the leader a refusal named, or else at the
// next replica.
func (s *Sim) retarget(n *node, now time.Time, leader int) {
	if s.spreadNext(n, now) {
		return
	}
	if leader >= 0 && leader != n.target {
		n.target = leader
	} else {
		n.target = (n.target + 1) % len(s.mgrs)
	}
	n.heard = now
	s.trace(n, "now talks to %s", s.mgrs[n.target].name)
}
