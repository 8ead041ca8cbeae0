package sim

import (
	"maps"
	"slices"

	"github.com/leasehold/leasehold/internal/replica"
)

// Membership changes while read leases are held (ReadLeaseConfig
// .MembersEvery), made through the leader as the operator makes them with
// leasehold cluster remove and add (docs/operations.md, "Growing and
// shrinking"): a voter removed (only while three or more remain, so the
// group keeps a quorum of two), or a replica added as a learner, which the
// leader promotes to a voter once it has caught up
// (internal/replica/membership.go) — or removes again if it does not in
// time. A removed replica keeps running with its log until the operator
// stops it, which here is when its slot is filled again: until it applies
// its removal it still believes it is a voter, and a holder. A slot is
// filled as the operator replaces a replica: the old process stopped, a
// new one started empty to join, under a new Raft ID, and added as a
// learner. Once the faults stop, every slot out of the group is filled
// again, one at a time, until all are voters, so that the run converges.

// memberships follows the changes the simulation asked for.
type memberships struct {
	learning map[uint64]bool // Raft IDs added as learners, not yet seen voters
	nextRID  uint64          // the Raft ID the next replacement gets
}

// scheduleMembers starts the membership changes.
func (s *Sim) scheduleMembers() {
	mean := s.cfg.ReadLease.MembersEvery
	if mean <= 0 || !s.replicated() {
		return
	}
	s.mem.learning = map[uint64]bool{}
	s.mem.nextRID = uint64(len(s.mgrs)) + 1
	var next func()
	next = func() {
		if !s.faulting {
			return
		}
		s.changeMembers(false)
		s.at(s.now+s.exp(mean), next)
	}
	s.at(s.exp(mean), next)
}

// bootstrap is the group a replica founds if its storage is empty: none
// for one started to join.
func (s *Sim) bootstrap(n *node) []replica.Peer {
	if n.joining {
		return nil
	}
	return s.peers
}

// outOfGroup lists the replicas whose Raft ID the leader's applied State
// does not name.
func (s *Sim) outOfGroup(l *node) []*node {
	peers := l.rep.State().Peers()
	var out []*node
	for _, m := range s.mgrs {
		if _, ok := peers[m.rid]; !ok && !m.reader { // read replicas: readreplicas.go
			out = append(out, m)
		}
	}
	return out
}

// changeMembers asks the leader for one change: with addOnly (after the
// faults), only filling a slot out of the group.
func (s *Sim) changeMembers(addOnly bool) {
	l := s.leader()
	if l == nil || l.stalled {
		return
	}
	voters := slices.Sorted(maps.Keys(l.rep.Status().Config.Voters.IDs()))
	out := s.outOfGroup(l)
	switch {
	case len(out) > 0 && (addOnly || len(voters) < 3 || s.rng.IntN(2) == 0):
		n := out[s.rng.IntN(len(out))]
		if !n.up || n.rep == nil || len(n.rep.State().Peers()) > 0 {
			s.replace(n)
		}
		if l.rep.AddLearner(l.local(s.now), n.rid, n.name) == nil {
			s.lc.stats.Learners++
			s.mem.learning[n.rid] = true
			s.trace(l, "adds %s as replica %d, a learner", n.name, n.rid)
		}
	case !addOnly && len(voters) >= 3:
		var others []uint64
		for _, id := range voters {
			if id != l.rep.ID() {
				others = append(others, id)
			}
		}
		id := others[s.rng.IntN(len(others))]
		if l.rep.RemoveMember(l.local(s.now), id) == nil {
			s.lc.stats.Removals++
			s.trace(l, "removes replica %d", id)
		}
	default:
		return
	}
	s.after(l)
	s.checkLive()
}

// replace stops the process in slot n, if it runs, and starts a new one
// there, empty, to join under a new Raft ID.
func (s *Sim) replace(n *node) {
	if n.up {
		s.crash(n)
		s.stats.ManagerRestarts-- // a stop, not a fault
	}
	delete(s.byRID, n.rid)
	n.rid = s.mem.nextRID
	s.mem.nextRID++
	s.byRID[n.rid] = n
	n.store, n.joining = nil, true
	s.start(n)
}

// notePromotions counts the learners the leader has made voters.
func (s *Sim) notePromotions() {
	l := s.leader()
	if len(s.mem.learning) == 0 || l == nil {
		return
	}
	voters := l.rep.Status().Config.Voters.IDs()
	for _, id := range slices.Sorted(maps.Keys(s.mem.learning)) {
		if _, ok := voters[id]; ok {
			s.lc.stats.Promotions++
			delete(s.mem.learning, id)
		}
	}
}

// restoreMembers fills the slots out of the group once faults stop, and
// replaces the members that cannot follow the leader, every tick until
// the run ends.
func (s *Sim) restoreMembers() {
	if s.mem.learning == nil {
		return
	}
	var again func()
	again = func() {
		s.notePromotions()
		if s.now > s.end {
			return
		}
		switch l := s.leader(); {
		case l == nil || l.stalled:
		case len(s.outOfGroup(l)) > 0:
			s.changeMembers(true)
		case s.removeStranded(l):
		}
		s.at(s.now+s.tick, again)
	}
	again()
}

// removeStranded removes, through leader l, a member that cannot follow
// it: one whose applied State does not name l, because l was added to the
// group after the member fell behind. Such a member drops every message
// from l as a stranger's (Replica.StepRaft), so it never catches up while
// l leads; the operator's remedy is to remove and replace it, as for a
// damaged replica (docs/operations.md).
func (s *Sim) removeStranded(l *node) bool {
	peers := l.rep.State().Peers()
	for _, m := range s.mgrs {
		if m == l || !m.up || m.rep == nil {
			continue
		}
		if _, member := peers[m.rid]; !member {
			continue
		}
		if known := m.rep.State().Peers(); len(known) > 0 {
			if _, ok := known[l.rid]; !ok {
				if l.rep.RemoveMember(l.local(s.now), m.rid) == nil {
					s.lc.stats.Stranded++
					s.trace(l, "removes replica %d, which cannot follow it", m.rid)
					s.after(l)
				}
				return true
			}
		}
	}
	return false
}
