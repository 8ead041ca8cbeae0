package sim

import "slices"

// Two live processes with one Owner ID (Config.DuplicateEvery).
//
// A second process is started with a live Owner's ID — a copied
// configuration, a restarted pod whose old self still runs. In the
// simulation the Owner's current run goes on as a ghost: a node of its own
// with the run's core, leases and application, still renewing with its
// incarnation (the Manager drops those requests once it has heard the new
// one) and acknowledging writes under the leases it holds until they run
// out, while the Owner's node starts a new incarnation. The Manager
// addresses the Owner ID, so it reaches the new run only. The ghost stops
// after a while, as a duplicate that someone notices is.
//
// Single copy must hold between the ghost and every Owner run, and every
// write the ghost acknowledges must come before any loss of its leases
// the Lookups are told of (acks.go).

// ownerRuns returns every Owner run that may hold leases: the Owners'
// current runs and the ghosts.
func (s *Sim) ownerRuns() []*node {
	if len(s.ghosts) == 0 {
		return s.owners
	}
	return append(slices.Clone(s.owners), s.ghosts...)
}

// duplicate starts a second process with a live Owner's ID, preferring one
// that holds leases.
func (s *Sim) duplicate() {
	var holding, idle []*node
	for _, n := range s.owners {
		if !n.up || n.stalled || n.draining {
			continue
		}
		if len(n.own.Held(n.local(s.now))) > 0 {
			holding = append(holding, n)
		} else {
			idle = append(idle, n)
		}
	}
	n := s.pickUp(holding)
	if n == nil {
		n = s.pickUp(idle)
	}
	if n == nil {
		return
	}
	s.stats.Duplicates++
	g := &node{kind: ownerNode, idx: n.idx, pos: len(s.nodes), name: n.name, up: true, inc: n.inc,
		rate: n.rate, offset: n.offset, target: n.target, heard: n.heard, own: n.own, app: n.app, ghost: true}
	s.nodes = append(s.nodes, g)
	s.ghosts = append(s.ghosts, g)
	s.chk.everHeld[g] = s.chk.everHeld[n]
	s.trace(n, "a second process takes the ID; incarnation %d goes on beside it", n.inc)
	s.start(n) // the new process: the next incarnation
	s.after(g)
	t := s.cfg.Timing
	s.at(s.now+s.uniform(t.OwnerLease/4, 2*t.OwnerLease), func() { s.bury(g) })
}

// bury stops ghost g.
func (s *Sim) bury(g *node) {
	if !g.up {
		return
	}
	g.up = false
	g.gen++
	s.ghosts = slices.DeleteFunc(s.ghosts, func(n *node) bool { return n == g })
}
