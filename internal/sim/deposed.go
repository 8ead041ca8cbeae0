package sim

import "time"

// A deposed leader's backlog (ReadLeaseConfig.DeposeEvery): the compound
// fault that puts a resumed leader's stale promise in front of a holder.
//
// The leader L stalls (SIGSTOP, a long GC pause) for long enough that the
// others elect N, N takes over and the holders acknowledge N's promises;
// shortly before L resumes, one holder h is cut off from N both ways, so
// that N stops counting h a lease after the last promise h acknowledged,
// and goes on acknowledging writes h does not have. Everything sent to L
// waited in its socket buffers: N's heartbeats of the new term, then h's
// asks. L resumes, and its loop may step that backlog before its timer
// (resume), in batches (step.go): a batch with N's heartbeat and then one
// of h's asks is stepped with no drive between them, and L is a follower
// in Raft with its Core still set. Only Raft's current leader may promise
// as the leader (docs/protocol.md, "Quorum read leases", boundary 3); a
// replica that tested its Core would promise as the leader of N's term
// with its stale commit index, and h, with its own promise, would hold a
// lease that outlasts N's count of it and serve reads that miss N's
// acknowledged writes.

// depose stalls the leader for two to four election timeouts and cuts a
// holder off from the new leader shortly before the stall ends.
func (s *Sim) depose() {
	l := s.leader()
	if l == nil || l.stalled || !s.replicated() {
		return
	}
	e := time.Duration(electionTicks) * s.tick
	d := s.uniform(2*e, 4*e)
	s.stats.Deposals++
	s.stall(l, d)
	// The cut starts up to half an election timeout before L resumes
	// (the holder's lease, one election timeout long, is still running
	// when L's promise reaches it) and outlasts the lease.
	before := s.uniform(e/4, e/2)
	s.at(s.now+d-before, func() {
		n := s.leader()
		if n == nil || n == l || !l.stalled {
			return
		}
		var hs []*node
		for _, m := range s.mgrs {
			if m != l && m != n {
				hs = append(hs, m)
			}
		}
		h := s.pickUp(hs)
		if h == nil {
			return
		}
		cut := before + s.uniform(e, 3*e)
		s.cutFor(h.idx, n.idx, cut)
		s.cutFor(n.idx, h.idx, cut)
	})
}
