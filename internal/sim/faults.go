package sim

import (
	"time"

	"github.com/leasehold/leasehold/internal/faults"
)

// The fault schedule: crashes and restarts of each kind of node, drains,
// stalls, duplicates and partitions, each repeated at its configured mean
// interval, drawn from the seed's random source; stopFaults heals the
// network and brings every node back.

// broken returns the rules Config.Break breaks, none if it is nil.
func (s *Sim) broken() faults.Set {
	if s.cfg.Break == nil {
		return faults.Set{}
	}
	return *s.cfg.Break
}

func (s *Sim) exp(mean time.Duration) time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(mean))
}

func (s *Sim) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

func (s *Sim) scheduleFaults() {
	c, t := s.cfg, s.cfg.Timing
	repeat := func(mean time.Duration, fn func()) {
		if mean <= 0 {
			return
		}
		var next func()
		next = func() {
			if !s.faulting {
				return
			}
			fn()
			s.at(s.now+s.exp(mean), next)
		}
		s.at(s.exp(mean), next)
	}
	repeat(c.OwnerCrashEvery, func() {
		if n := s.pickUp(s.owners); n != nil && !s.sbResuming(n) {
			s.crash(n)
			s.at(s.now+s.uniform(0, 3*t.ManagerLease), func() { s.restart(n) })
		}
	})
	repeat(c.StandbyPairCrashEvery, s.sbCrashPair)
	repeat(c.StandbyZoneCrashEvery, s.sbCrashZone)
	repeat(c.StandbyFaults.StallHolderEvery, s.sbStallHolder)
	repeat(c.LookupCrashEvery, func() {
		if n := s.pickUp(s.lookups); n != nil {
			s.crash(n)
			s.at(s.now+s.uniform(0, 2*t.SyncTimeout), func() { s.restart(n) })
		}
	})
	repeat(c.DrainEvery, func() {
		var idle []*node
		for _, n := range s.owners {
			if !n.draining {
				idle = append(idle, n)
			}
		}
		if n := s.pickUp(idle); n != nil {
			s.drain(n)
		}
	})
	repeat(c.ManagerCrashEvery, func() {
		n := s.mgrs[0]
		if s.replicated() {
			// The leader most of the time: its failover is what the
			// replication is for.
			n = s.leader()
			if n == nil || s.rng.IntN(4) == 0 {
				var followers []*node
				for _, m := range s.mgrs {
					if m != n {
						followers = append(followers, m)
					}
				}
				if f := s.pickUp(followers); f != nil {
					n = f
				}
			}
			if n == nil {
				return
			}
		}
		s.crash(n)
		s.at(s.now+s.uniform(0, 2*t.ManagerLease), func() { s.restart(n) })
	})
	repeat(c.StallEvery, s.stallOne)
	repeat(c.DuplicateEvery, s.duplicate)
	repeat(c.PartitionEvery, func() {
		s.stats.Partitions++
		s.nextPart++
		p := s.nextPart
		if !s.replicated() {
			// Cut off a random group; a third of the time the Manager is
			// in it with the Owners that are, isolated from everyone else.
			if s.rng.IntN(3) == 0 {
				s.mgrs[0].part = p
			}
		} else {
			s.cutReplicas(p)
			s.checkLive()
		}
		for _, n := range append(append([]*node{}, s.owners...), s.lookups...) {
			if s.rng.IntN(4) == 0 {
				n.part = p
			}
		}
		s.at(s.now+s.uniform(t.ManagerLease/4, 3*t.ManagerLease), func() {
			for _, n := range s.nodes {
				if n.part == p {
					n.part = 0
				}
			}
		})
	})
}

// cutReplicas puts some replicas in partition group p: a third of the time
// the leader with a minority (so the majority elects another leader while
// the old one, and the Owners cut off with it, do not know yet), a third of
// the time some followers, otherwise none.
func (s *Sim) cutReplicas(p int) {
	lead := s.leader()
	var others []*node
	for _, m := range s.mgrs {
		if m != lead {
			others = append(others, m)
		}
	}
	switch s.rng.IntN(3) {
	case 0:
		if lead == nil {
			return
		}
		lead.part = p
		s.rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		k := 0
		if h := (len(s.mgrs) - 1) / 2; h > 0 {
			k = s.rng.IntN(h) // the group stays a minority
		}
		for _, m := range others[:k] {
			m.part = p
		}
	case 1:
		for _, m := range others {
			if s.rng.IntN(3) == 0 {
				m.part = p
			}
		}
	}
	s.countIsolation(lead)
}

// countIsolation counts a partition that leaves lead without a majority
// of the replicas on its side.
func (s *Sim) countIsolation(lead *node) {
	if lead == nil || !s.replicated() {
		return
	}
	with := 0
	for _, m := range s.mgrs {
		if m.part == lead.part {
			with++
		}
	}
	if 2*with <= len(s.mgrs) {
		s.stats.LeaderIsolations++
	}
}

func (s *Sim) pickUp(ns []*node) *node {
	var up []*node
	for _, n := range ns {
		if n.up {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[s.rng.IntN(len(up))]
}

// stopFaults heals the network and brings every node back.
func (s *Sim) stopFaults() {
	s.faulting = false
	s.sbf.cuts = nil // the holder–standby cuts heal too (standby_faults.go)
	s.endStallsAndGhosts()
	defer s.restoreMembers()
	for _, n := range s.nodes {
		if n.ghost {
			continue
		}
		n.part = 0
		if n.draining {
			s.crash(n) // an Owner shutting down finishes, and starts again
		}
		if !n.up {
			s.start(n)
		}
	}
}
