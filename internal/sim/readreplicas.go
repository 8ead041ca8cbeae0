package sim

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/leasehold/leasehold/internal/client"
)

// Read replicas among the Manager's nodes (Config.ReadReplicas; docs/
// protocol.md, "Read replicas"). They are started empty to join, as
// leasehold manager --role read-replica is, and the leader adds each with
// Replica.AddReadReplica, as leasehold cluster add --read-replica asks it
// to, once it has taken over; they are driven like every replica
// (afterReplica: replica.Drive, with the same batch stepping). They are
// crashed (restarting from their log), stalled and partitioned as any
// follower is, and, with ReadReplicaFaultEvery, on their own as well.
// Lookups spread over every replica by the runtime's rule (client.Rank:
// each Lookup its own rendezvous order) and move to their next choice when
// refused or unanswered (rule 19), never back to a leader's hint.
//
// What is checked beyond the usual checkers (recovery notification's bound
// among them, which read replicas' answers must meet like any follower's):
// a read replica never campaigns, never leads and is never among any
// leader's voters; and at the end, with the rest, it has applied the
// leader's table (convergence).

// ReadReplicaStats counts what the read replicas of a run went through.
type ReadReplicaStats struct {
	Added   int // AddReadReplica accepted by a leader
	Crashes int // crashes, stalls and cuts of read replicas alone (ReadReplicaFaultEvery)
	Stalls  int
	Cuts    int
	Answers int // sync answers and pushes the read replicas sent to Lookups
	Moves   int // a Lookup moved to its next replica
}

// spreadOrder is a Lookup's rendezvous order of the replicas (indices in
// Sim.mgrs) and how far along it the Lookup is.
type spreadOrder struct {
	order []int
	pos   int
}

// addReadReplicas adds Config.ReadReplicas replicas after the voters,
// started to join: no group founds them.
func (s *Sim) addReadReplicas() {
	for range s.cfg.ReadReplicas {
		i := len(s.mgrs)
		n := s.addNode(managerNode, i, fmt.Sprintf("reader-%d", i+1))
		n.rid, n.reader, n.joining = uint64(i+1), true, true
		s.mgrs = append(s.mgrs, n)
		s.byRID[n.rid] = n
		s.byAddr[n.name] = i
	}
}

// scheduleReadReplicas starts the leader's adding of read replicas, the
// check that they never vote, and their own faults.
func (s *Sim) scheduleReadReplicas() {
	if s.cfg.ReadReplicas == 0 {
		return
	}
	if s.mem.nextRID == 0 {
		s.mem.nextRID = uint64(len(s.mgrs)) + 1
	}
	var again func()
	again = func() {
		if s.now > s.end || s.chk.violation != nil {
			return
		}
		s.checkReadReplicas()
		s.admitReadReplica()
		s.at(s.now+s.tick, again)
	}
	s.at(s.tick, again)
	if mean := s.cfg.ReadReplicaFaultEvery; mean > 0 {
		var fault func()
		fault = func() {
			if !s.faulting {
				return
			}
			s.faultReadReplica()
			s.at(s.now+s.exp(mean), fault)
		}
		s.at(s.exp(mean), fault)
	}
}

// admitReadReplica has the leader add one read replica the group does not
// name, as the operator's cluster add --read-replica does. One that was a
// member and was removed (its adding leader timed it out, or it could not
// follow a new leader: removeStranded) comes back as the operator would
// bring it: stopped, started empty under a new Raft ID, and added.
func (s *Sim) admitReadReplica() {
	l := s.leader()
	if l == nil || l.stalled || l.rep.Core() == nil {
		return
	}
	peers := l.rep.State().Peers()
	for _, n := range s.mgrs {
		if _, ok := peers[n.rid]; ok || !n.reader {
			continue
		}
		if n.up && n.rep != nil && len(n.rep.State().Peers()) > 0 {
			s.replace(n)
		}
		if l.rep.AddReadReplica(l.local(s.now), n.rid, n.name) == nil {
			s.rr.Added++
			s.trace(l, "adds %s as replica %d, a read replica", n.name, n.rid)
			s.after(l)
			s.checkLive()
		}
		return
	}
}

// checkReadReplicas fails the run if a read replica campaigns or leads, or
// if a leader counts one among its voters.
func (s *Sim) checkReadReplicas() {
	for _, n := range s.mgrs {
		if !n.reader || !n.up || n.rep == nil {
			continue
		}
		if st := n.rep.Status(); st.RaftState != raft.StateFollower {
			s.chk.fail("read replica", "read replica %s (replica %d) is a %v in term %d", n.name, n.rid, st.RaftState, st.Term)
			return
		}
	}
	for _, m := range s.mgrs {
		if !m.up || m.rep == nil || !s.leads(m) {
			continue
		}
		for id := range m.rep.Status().Config.Voters.IDs() {
			if r := s.byRID[id]; r != nil && r.reader {
				s.chk.fail("read replica", "leader %s counts read replica %s (replica %d) among its voters", m.name, r.name, id)
				return
			}
		}
	}
}

// faultReadReplica crashes, stalls or cuts off one read replica: a crash
// restarts it from its log after up to two ManagerLeases; a stall lasts up
// to two OwnerLeases; a cut puts it alone, with a Lookup in four, in a
// partition of its own for up to three ManagerLeases.
func (s *Sim) faultReadReplica() {
	var rs []*node
	for _, n := range s.mgrs {
		if n.reader {
			rs = append(rs, n)
		}
	}
	n := s.pickUp(rs)
	if n == nil {
		return
	}
	t := s.cfg.Timing
	switch s.rng.IntN(3) {
	case 0:
		s.rr.Crashes++
		s.crash(n)
		s.at(s.now+s.uniform(0, 2*t.ManagerLease), func() { s.restart(n) })
	case 1:
		s.rr.Stalls++
		s.stall(n, s.uniform(0, 2*t.OwnerLease))
	default:
		s.rr.Cuts++
		s.stats.Partitions++
		s.nextPart++
		p := s.nextPart
		n.part = p
		for _, l := range s.lookups {
			if s.rng.IntN(4) == 0 {
				l.part = p
			}
		}
		s.at(s.now+s.uniform(t.ManagerLease/4, 3*t.ManagerLease), func() {
			for _, m := range s.nodes {
				if m.part == p {
					m.part = 0
				}
			}
		})
	}
}

// spreadStart gives a Lookup starting (again) its rendezvous order of the
// replicas, as lookup.New does (client.Rank, with a key of its own), when
// the group has read replicas, and points it at its first choice.
func (s *Sim) spreadStart(n *node) {
	if n.kind != lookupNode || s.cfg.ReadReplicas == 0 || !s.replicated() {
		return
	}
	names := make([]string, len(s.mgrs))
	for i, m := range s.mgrs {
		names[i] = m.name
	}
	key := s.cfg.Seed*0x9e3779b97f4a7c15 ^ uint64(n.idx)<<32 ^ n.inc
	n.spread = spreadOrder{}
	for _, a := range client.Rank(key, names) {
		n.spread.order = append(n.spread.order, s.byAddr[a])
	}
	n.target = n.spread.order[0]
}

// spreadNext moves a spreading Lookup to its next choice, whatever leader
// a refusal named, and reports whether it did.
func (s *Sim) spreadNext(n *node, now time.Time) bool {
	if len(n.spread.order) == 0 {
		return false
	}
	n.spread.pos = (n.spread.pos + 1) % len(n.spread.order)
	n.target = n.spread.order[n.spread.pos]
	n.heard = now
	s.rr.Moves++
	s.trace(n, "now talks to %s", s.mgrs[n.target].name)
	return true
}
