package sim

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/keyspace"
)

// The Manager group: which replica leads and which table is furthest
// ahead, and how a replica is driven after every step as its server drives
// it (replica.Drive with the simulation as its network and storage).

// furthest returns the applied State of the replica whose table is
// furthest ahead: every replica applies the same log, so LSNs agree and the
// furthest table is the committed one.
func (s *Sim) furthest() *lease.State {
	var best *lease.State
	for _, m := range s.mgrs {
		if m.rep == nil || m.rep.State().Table(namespace) == nil {
			continue
		}
		st := m.rep.State()
		if best == nil || st.Epoch() > best.Epoch() ||
			(st.Epoch() == best.Epoch() && st.Table(namespace).LSN() > best.Table(namespace).LSN()) {
			best = st
		}
	}
	return best
}

// leader returns the replica that leads: the one that has taken over (of
// two, the one of the later term: the other is deposed and does not know
// it yet), else one Raft calls leader, else nil.
func (s *Sim) leader() *node {
	var best *node
	var term uint64
	for _, m := range s.mgrs {
		if !m.up || m.rep.Core() == nil {
			continue
		}
		if t := m.rep.Status().Term; best == nil || t > term {
			best, term = m, t
		}
	}
	if best != nil {
		return best
	}
	for _, m := range s.mgrs {
		if m.up && s.leads(m) {
			return m
		}
	}
	return nil
}

// leads reports whether the replica believes it is Raft's leader.
func (s *Sim) leads(n *node) bool {
	if n.rep == nil {
		return false
	}
	id, _ := n.rep.Leader()
	return id == n.rep.ID()
}

// clock reads the real clock that times Manager calls, if anyone listens.
func (s *Sim) clock() time.Time {
	switch {
	case s.cfg.Probe == nil:
		return time.Time{}
	case s.cfg.Stopwatch != nil:
		return s.cfg.Stopwatch()
	}
	return time.Now()
}

// work reports the leader's work that took took.
func (s *Sim) work(n *node, took time.Duration) {
	if s.cfg.Probe != nil && s.leads(n) {
		s.cfg.Probe.ManagerWork(s.now, took)
	}
}

// afterReplica drives a replica as its server does after every step:
// replica.Drive, with the node as its network and its MemoryStorage, kept
// across restarts, as its durable log. It returns the replica's next
// deadline.
func (s *Sim) afterReplica(n *node) time.Time {
	r := n.rep
	now := n.local(s.now)
	t0 := s.clock()
	if err := replica.Drive(r, replicaDriver{s, n, now}); err != nil {
		panic(fmt.Sprintf("%s: %v", n.name, err))
	}
	deadline := r.NextDeadline()
	s.work(n, s.clock().Sub(t0))
	if core := r.Core() != nil; core != n.hadCore {
		n.hadCore, n.plans, n.forgot = core, 0, 0
		if core {
			s.stats.Takeovers++
			s.trace(n, "took over")
		}
	}
	if c := r.Core(); c != nil && c.Stats().Plans > n.plans {
		s.stats.Plans += int(c.Stats().Plans - n.plans)
		n.plans = c.Stats().Plans
	}
	if c := r.Core(); c != nil && c.Stats().Forgotten > n.forgot {
		s.stats.OwnersForgotten += int(c.Stats().Forgotten - n.forgot)
		n.forgot = c.Stats().Forgotten
	}
	if traceNode == n.name {
		st := r.Status()
		lsn := keyspace.LSN(0)
		if t := r.State().Table(namespace); t != nil {
			lsn = t.LSN()
		}
		s.trace(n, "term=%d lead=%d state=%s commit=%d applied=%d lsn=%d core=%v serving=%v", st.Term, st.Lead, st.RaftState, st.Commit, st.Applied, lsn, r.Core() != nil, r.Serving(now))
	}
	s.chk.managerStepped(n)
	s.leaseAcked(n)
	s.observeLive(n)
	if s.onTable != nil {
		if t := r.State().Table(namespace); t != nil && t.LSN() > s.tableLSN {
			s.tableLSN = t.LSN()
			s.onTable(t.LSN())
		}
	}
	return deadline
}

// replicaDriver is a replica's runtime in the simulation (replica.Driver).
type replicaDriver struct {
	s   *Sim
	n   *node
	now time.Time
}

func (d replicaDriver) Now() time.Time { return d.now }

// Persist has nothing to write: the replica's MemoryStorage, which
// replica.Drive fills before Send, is the log a restarted replica finds.
func (d replicaDriver) Persist(rd *replica.Ready) error {
	if !raft.IsEmptySnap(rd.Compacted) {
		d.s.stats.Snapshots++
	}
	return nil
}

// Send puts the replica's messages on the network; every replica's
// address is known from the start, so Peers needs nothing.
func (d replicaDriver) Send(rd *replica.Ready) {
	s, n := d.s, d.n
	for _, m := range rd.Messages {
		if m.Type == raftpb.MsgSnap {
			s.stats.SnapshotsSent++
		}
		if to := s.byRID[m.To]; to != nil && to != n {
			s.send(n, to, m)
		}
	}
	s.sendManaged(n, rd.Owners, rd.Lookups)
}

// sendManaged sends a replica's messages to Owners and Lookups.
func (s *Sim) sendManaged(n *node, owners []lease.OwnerMessage, lookups []replica.LookupMessage) {
	for _, m := range owners {
		if to := s.byOwner[m.To]; to != nil {
			s.send(n, to, m.Msg)
		}
	}
	if n.reader {
		s.rr.Answers += len(lookups)
	}
	for _, m := range lookups {
		if to := s.bySess[m.To]; to != nil {
			s.send(n, to, m.Msg)
		}
	}
}
