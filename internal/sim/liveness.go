package sim

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Write liveness under quorum read leases (docs/protocol.md, "What does
// not change for Owners and Lookups"): the leader releases a round's
// answers only once every holder it counts has the round's entry (rule 5),
// and a holder that does not acknowledge stops being counted within B, so
// while the leader and a quorum of voters are connected no answer waits
// past its commit longer than B plus the append — whatever else is cut,
// stalled or crashed. The checker follows the leader's commit index and
// the index it has released answers up to (ReadLeaseAcked), and fails a
// run in which, with the leader and a quorum connected both ways
// throughout, a committed index waited longer than liveLimit.

// liveCheck follows one leader's held answers.
type liveCheck struct {
	lead    *node
	inc     uint64
	term    uint64      // the term it leads in: re-elected, it takes over again
	commit  uint64      // the highest commit index seen on lead
	pending []committed // commit advances not yet released, in index order
	// healthy is since when the leader and a quorum have been connected
	// (-1: they are not now).
	healthy time.Duration
	// conf is the leader's configuration (voters and learners) as last
	// seen, changed when it was first seen.
	conf    string
	changed time.Duration
}

// committed is a commit advance: the leader committed up to index at at.
type committed struct {
	index uint64
	at    time.Duration
}

// liveLimit is the longest an answer may be held past its commit while the
// leader and a quorum are connected: B on the leader's clock, which in real
// time is at most B·√(1+MaxDrift) (the slowest clock rate), plus the
// append — a round trip that may be lost to a drop and resent at the next
// heartbeat, or delayed up to MaxDelay each way — and a tick of the check.
func (s *Sim) liveLimit() time.Duration {
	t := s.cfg.Timing
	d := s.cfg.ReadLease.Lease.Duration
	if d == 0 {
		d = electionTicks * s.tick // config.Replica's default: an election timeout
	}
	b := float64(d) * (1 + t.MaxDrift) * math.Sqrt(1+t.MaxDrift)
	return time.Duration(b) + 2*max(s.cfg.MaxDelay, 4*s.cfg.MinDelay) + 4*s.tick
}

// observeLive notes, after replica n stepped, what it committed and what
// it released, if it leads.
func (s *Sim) observeLive(n *node) {
	if !s.leasesOn() || !s.replicated() || n.rep == nil || n.rep.Core() == nil {
		return
	}
	c := &s.live
	term := n.rep.Status().Term
	if n != c.lead || n.inc != c.inc || term != c.term {
		if s.leader() != n {
			return
		}
		*c = liveCheck{lead: n, inc: n.inc, term: term, commit: n.rep.Commit(), healthy: -1}
		s.checkLive()
	}
	if commit := n.rep.Commit(); commit > c.commit {
		c.commit = commit
		c.pending = append(c.pending, committed{commit, s.now})
	}
	acked := n.rep.ReadLeaseAcked()
	i := 0
	for ; i < len(c.pending) && c.pending[i].index <= acked; i++ {
		if w := s.now - c.pending[i].at; w > 0 {
			s.lc.stats.Held++
			s.lc.stats.LongestHold = max(s.lc.stats.LongestHold, w)
		}
	}
	c.pending = c.pending[i:]
}

// checkLive updates whether the leader and a quorum are connected, and
// fails the run if an answer has been held past liveLimit while they were,
// counted from its commit or from the last change of the members the
// leader applied, whichever is later: a change of the voters, like a
// takeover, makes the leader count every holder for B again (rule 4 of
// docs/protocol.md, "Quorum read leases"), so back-to-back changes may
// hold an answer B each. It runs every tick and whenever a fault begins.
func (s *Sim) checkLive() {
	if !s.leasesOn() || !s.replicated() {
		return
	}
	c := &s.live
	l := s.leader()
	if l == nil || l != c.lead || l.inc != c.inc || l.rep.Status().Term != c.term || !s.quorumConnected(l) {
		c.healthy = -1
		return
	}
	if c.healthy < 0 {
		c.healthy = s.now
	}
	st := l.rep.Status()
	if conf := fmt.Sprint(st.Config.Voters, st.Config.Learners); conf != c.conf {
		c.conf, c.changed = conf, s.now
	}
	if len(c.pending) == 0 || s.chk.off {
		return
	}
	p := c.pending[0]
	if from := max(p.at, c.healthy, c.changed); s.now-from > s.liveLimit() {
		s.chk.fail("write liveness", "%s committed index %d at %s and has held its answers %s (up to index %d released), with a quorum connected since %s: the bound is %s; replicas: %s",
			l.name, p.index, p.at, s.now-p.at, l.rep.ReadLeaseAcked(), c.healthy, s.liveLimit(), s.replicaFaults())
	}
}

// quorumConnected reports whether leader l, up and running, reaches a
// majority of its voters, itself included, both ways.
func (s *Sim) quorumConnected(l *node) bool {
	if !l.up || l.stalled || l.rep == nil {
		return false
	}
	cfg := l.rep.Status().Config
	if len(cfg.Voters[1]) > 0 {
		return false // joint: not used by the Manager
	}
	n := 0
	for id := range cfg.Voters[0] {
		m := s.byRID[id]
		if m == nil {
			continue
		}
		if m == l || (m.up && !m.stalled && m.part == l.part && !s.cut(l, m) && !s.cut(m, l)) {
			n++
		}
	}
	return 2*n > len(cfg.Voters[0])
}

// replicaFaults describes the replicas' faults now, for a violation.
func (s *Sim) replicaFaults() string {
	var b strings.Builder
	for i, m := range s.mgrs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.name)
		switch {
		case !m.up:
			b.WriteString(" down")
		case m.stalled:
			b.WriteString(" stalled")
		}
		if m.part != 0 {
			fmt.Fprintf(&b, " in partition %d", m.part)
		}
		for _, o := range s.mgrs {
			if s.cut(m, o) {
				fmt.Fprintf(&b, " cut to %s", o.name)
			}
		}
	}
	return b.String()
}
