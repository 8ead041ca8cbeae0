package sim

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/replica"
)

// Stalled nodes (Config.StallEvery).
//
// A stalled node is a process that stopped running without dying — a GC
// pause, a stuck disk, SIGSTOP — or one behind a proxy that stopped
// forwarding: it is up, its connections stay open, and it answers nothing.
// What reaches it waits, in order, and what it would do on a timer does
// not happen. When it resumes it handles everything that waited, with its
// clock as far on as the real time that passed, and then its timers — a
// Manager replica's Raft messages join its loop's queue, of which it may
// step a batch before its timer or after (resume). Its clients see only
// silence: an open stream that brings no answer.

// stall stalls node n for d.
func (s *Sim) stall(n *node, d time.Duration) {
	if !n.up || n.stalled || n.ghost {
		return
	}
	s.stats.Stalls++
	if n.kind == managerNode && n == s.leader() {
		s.stats.LeaderStalls++
	}
	s.trace(n, "stalled for %s", d)
	n.stalled = true
	s.checkLive()
	inc := n.inc
	s.at(s.now+d, func() {
		if n.inc == inc {
			s.resume(n)
		}
	})
}

// resume ends n's stall: it handles what waited, then its timers.
func (s *Sim) resume(n *node) {
	if !n.up || !n.stalled {
		return
	}
	s.trace(n, "resumes with %d events waiting", len(n.stallQ))
	n.stalled = false
	q := n.stallQ
	n.stallQ = nil
	for _, f := range q {
		if !n.up || n.stalled {
			return
		}
		f()
	}
	// A Manager replica's loop finds its timer due and its Raft messages
	// queued at once, and the server's select takes either first: half
	// the time it steps a batch of the backlog before its timer (whose
	// ticks, a pause's worth at once, would let CheckQuorum depose it
	// before it reads what the others said meanwhile). That batch is the
	// whole backlog (up to replica.MaxStepBatch) half the time — the
	// transport has read the sockets' buffers into the loop's queue while
	// the loop took its first message — and otherwise cut anywhere.
	if n.up && !n.stalled && n.kind == managerNode && len(n.inbox) > 0 && s.rng.IntN(2) == 0 {
		limit := min(len(n.inbox), replica.MaxStepBatch)
		if s.rng.IntN(2) == 0 {
			limit = 1 + s.rng.IntN(limit)
		}
		n.waking = false
		s.stepBatch(n, limit)
	}
	if n.up && !n.stalled {
		s.tickNode(n)
	}
}

// stallOne stalls a node for up to two OwnerLeases, longer than any lease:
// a Manager replica half the time (with several, the leader three times in
// four), otherwise an Owner.
func (s *Sim) stallOne() {
	d := s.uniform(0, 2*s.cfg.Timing.OwnerLease)
	if s.rng.IntN(2) == 0 {
		n := s.mgrs[0]
		if s.replicated() {
			n = s.leader()
			if n == nil || s.rng.IntN(4) == 0 {
				n = s.pickUp(s.mgrs)
			}
		}
		if n != nil {
			s.stall(n, d)
		}
		return
	}
	if n := s.pickUp(s.owners); n != nil {
		s.stall(n, d)
	}
}

// endStallsAndGhosts resumes every stalled node and stops every ghost:
// the faults are over.
func (s *Sim) endStallsAndGhosts() {
	for _, n := range s.nodes {
		if n.stalled {
			s.resume(n)
		}
	}
	for _, g := range slices.Clone(s.ghosts) {
		s.bury(g)
	}
}
