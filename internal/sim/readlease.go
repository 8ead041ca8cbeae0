package sim

import (
	"time"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/protocol"
)

// Quorum read leases in the simulation (docs/protocol.md, "Quorum read
// leases"): every replica is asked for a lease read at random moments, and
// the linearizability checker follows the answers, the Lookup syncs a
// replica answers under its lease, and the leader's acknowledgements; asymmetric partitions cut single directions between
// replicas.

// ReadLeaseConfig turns quorum read leases on in a run.
type ReadLeaseConfig struct {
	// Lease is the replicas' read-lease configuration (manager.Config
	// .ReadLease); Validate's defaults are filled in from the run's Raft
	// pacing.
	Lease replica.ReadLease
	// ReadEvery is the mean time between two lease reads asked of each
	// replica; 0 means a Raft tick.
	ReadEvery time.Duration
	// SyncsOnly asks no lease reads: the checker then follows only the
	// Lookup syncs replicas answer under their leases.
	SyncsOnly bool
	// History, if set, is given the run's history of lease reads and
	// writes at its end, for an independent linearizability checker.
	History func([]LeaseEvent)
	// OneWayEvery cuts, on average this often while faults last, one
	// direction between two replicas (A hears B, B does not hear A) for a
	// while: the partitions a group sees when one link's outgoing side
	// fails. 0: none.
	OneWayEvery time.Duration
	// DeposeEvery stalls the leader, on average this often while faults
	// last, long enough for a new election, and cuts a holder off from the
	// new leader shortly before the stall ends (deposed.go). 0: never.
	DeposeEvery time.Duration
	// MembersEvery changes the group's voters, on average this often
	// while faults last, through its leader as an operator would: it
	// removes a voter (while three or more remain) or adds a replica that
	// is out of the group back as a learner, which the leader promotes once
	// it has caught up (members.go). Once faults stop, every replica is
	// added back. 0: none.
	MembersEvery time.Duration
	// NoLosses makes any lease the Manager records lost a violation
	// ("owner liveness"): for runs whose only faults are between replicas
	// and leave the leader and a quorum connected, where an Owner losing a
	// lease means a holder's fault stalled its renewals.
	NoLosses bool
}

// LeaseStats counts a run's lease reads.
type LeaseStats struct {
	Reads, Refused int // lease reads answered and refused
	Syncs          int // Lookup syncs a follower answered under its lease (lease reads too)
	Acks           int // times the highest acknowledged index grew
	OneWayCuts     int
	MaxAcked       uint64
	// Membership changes made (MembersEvery): voters removed, replicas
	// added as learners, learners promoted to voters.
	Removals, Learners, Promotions int
	// Stranded counts the members removed (and replaced) after the faults
	// because they could not follow a leader added after they fell behind
	// (members.go).
	Stranded int
	// Held counts the leader's commit advances whose answers it released
	// later than it committed them (waiting for holders: rule 5), and
	// LongestHold the longest such wait, in real time (liveness.go).
	Held        int
	LongestHold time.Duration
}

// leaseCheck is the linearizability checker of lease reads. The replicated
// state is a log; a lease read returns the index of the last entry the
// replica applied, and the writes are its entries, entry i completed once
// a replica released an answer that rests on it (an Owner's grant or
// renewal; ReadLeaseAcked). A history of such reads and writes is
// linearizable exactly when every read returns at least the highest entry
// completed before it began, and at least what every earlier read returned
// (entries are ordered by their index, a read returns a prefix): that is
// what it checks, in the order the simulation runs events, which is an
// order of real time.
type leaseCheck struct {
	maxAcked uint64 // the highest entry completed
	ackedAt  time.Duration
	maxRead  uint64 // the highest entry a read returned
	readBy   string
	readAt   time.Duration
	acked    map[*node]uint64 // per replica run, ReadLeaseAcked seen
	stats    LeaseStats

	// With ReadLeaseConfig.History: the history so far, and the highest
	// entry whose write has been invoked and has returned in it.
	history          []LeaseEvent
	called, returned uint64
}

// LeaseEventKind is the kind of a LeaseEvent.
type LeaseEventKind int

const (
	WriteCall   LeaseEventKind = iota // entry Index is invoked: it exists somewhere
	WriteReturn                       // entry Index is acknowledged
	Read                              // a lease read returned Index (an invocation and its response, nothing between)
)

// LeaseEvent is one event of a run's history of lease reads and writes,
// in the order of real time.
type LeaseEvent struct {
	Kind  LeaseEventKind
	Index uint64
}

// invoke records the invocation of every entry up to i not yet invoked.
func (c *leaseCheck) invoke(i uint64) {
	for ; c.called < i; c.called++ {
		c.history = append(c.history, LeaseEvent{WriteCall, c.called + 1})
	}
}

func (s *Sim) leasesOn() bool { return s.cfg.ReadLease != nil && s.cfg.ReadLease.Lease.On() }

// scheduleLeases starts the lease reads and the one-way cuts.
func (s *Sim) scheduleLeases(end time.Duration) {
	if !s.leasesOn() {
		return
	}
	s.lc.acked = map[*node]uint64{}
	every := s.cfg.ReadLease.ReadEvery
	if every <= 0 {
		every = s.tick
	}
	for _, n := range s.mgrs {
		if s.cfg.ReadLease.SyncsOnly {
			break
		}
		var next func()
		next = func() {
			if s.now > end {
				return
			}
			s.leaseRead(n)
			s.at(s.now+1+s.exp(every), next)
		}
		s.at(s.exp(every), next)
	}
	s.scheduleMembers()
	if s.replicated() {
		s.every(s.tick, end, func() {
			s.notePromotions()
			s.checkLive()
		})
	}
	if mean := s.cfg.ReadLease.DeposeEvery; mean > 0 && s.replicated() {
		var next func()
		next = func() {
			if !s.faulting {
				return
			}
			s.depose()
			s.at(s.now+s.exp(mean), next)
		}
		s.at(s.exp(mean), next)
	}
	if mean := s.cfg.ReadLease.OneWayEvery; mean > 0 && s.replicated() {
		var next func()
		next = func() {
			if !s.faulting {
				return
			}
			s.cutOneWay()
			s.at(s.now+s.exp(mean), next)
		}
		s.at(s.exp(mean), next)
	}
}

// leaseRead asks replica n for a lease read and checks the answer.
func (s *Sim) leaseRead(n *node) {
	if !n.up || n.stalled || n.rep == nil {
		return
	}
	idx, ok := n.rep.LeaseRead(n.local(s.now))
	if !ok {
		s.lc.stats.Refused++
		return
	}
	s.lc.stats.Reads++
	s.checkLeaseRead(n, idx, "a lease read")
}

// leaseSyncs is how many Lookup syncs replica n has answered under its
// read lease in its current run.
func (s *Sim) leaseSyncs(n *node) uint64 {
	if !s.leasesOn() || n.rep == nil {
		return 0
	}
	return n.rep.ReadLease(n.local(s.now)).Stats.Syncs
}

// leaseSynced checks the answer to a Lookup's sync replica n has just
// given, if it gave it under its read lease (its count grew past before):
// such an answer is a lease read of the replica's applied copy.
func (s *Sim) leaseSynced(n *node, before uint64) {
	if s.leaseSyncs(n) == before {
		return
	}
	s.lc.stats.Syncs++
	s.checkLeaseRead(n, n.rep.ReadLease(n.local(s.now)).Applied, "a Lookup's sync")
}

// checkLeaseRead checks a lease read replica n served at index idx.
func (s *Sim) checkLeaseRead(n *node, idx uint64, what string) {
	c := &s.lc
	if s.cfg.ReadLease.History != nil {
		c.invoke(idx)
		c.history = append(c.history, LeaseEvent{Read, idx})
	}
	switch {
	case idx < c.maxAcked:
		s.chk.fail("linearizability", "%s served %s at index %d after entry %d was acknowledged (at %s)", n.name, what, idx, c.maxAcked, c.ackedAt)
	case idx < c.maxRead:
		s.chk.fail("linearizability", "%s served %s at index %d after %s served a lease read at %d (at %s)", n.name, what, idx, c.readBy, c.maxRead, c.readAt)
	}
	if idx > c.maxRead {
		c.maxRead, c.readBy, c.readAt = idx, n.name, s.now
	}
}

// leaseAcked notes what replica n has acknowledged after a step.
func (s *Sim) leaseAcked(n *node) {
	s.writeLatency(n)
	if !s.leasesOn() || n.rep == nil {
		return
	}
	a := n.rep.ReadLeaseAcked()
	if a <= s.lc.acked[n] {
		return
	}
	s.lc.acked[n] = a
	if a > s.lc.maxAcked {
		s.lc.maxAcked, s.lc.ackedAt = a, s.now
		s.lc.stats.Acks++
		if s.cfg.ReadLease.History != nil {
			c := &s.lc
			c.invoke(a)
			for ; c.returned < a; c.returned++ {
				c.history = append(c.history, LeaseEvent{WriteReturn, c.returned + 1})
			}
		}
	}
}

// cutOneWay stops the messages from one replica to another, not the other
// way, for a while: any ordered pair, so over a sweep every pair in both
// directions, the leader's links to and from its followers among them. A
// third of the time another replica, or one of the pair that does not
// lead, stalls during the cut as well.
func (s *Sim) cutOneWay() {
	a := s.rng.IntN(len(s.mgrs))
	b := (a + 1 + s.rng.IntN(len(s.mgrs)-1)) % len(s.mgrs)
	t := s.cfg.Timing
	d := s.uniform(t.ManagerLease/4, 2*t.ManagerLease)
	if !s.cutFor(a, b, d) || s.rng.IntN(3) != 0 {
		return
	}
	var others []*node
	for _, m := range s.mgrs {
		if m != s.leader() {
			others = append(others, m)
		}
	}
	if n := s.pickUp(others); n != nil {
		s.stall(n, s.uniform(0, d))
	}
}

// cutFor cuts the messages from replica a to replica b for d, unless they
// are cut already.
func (s *Sim) cutFor(a, b int, d time.Duration) bool {
	if s.oneWay == nil {
		s.oneWay = map[[2]int]bool{}
	}
	k := [2]int{a, b}
	if s.oneWay[k] {
		return false
	}
	s.oneWay[k] = true
	s.lc.stats.OneWayCuts++
	s.checkLive()
	s.at(s.now+d, func() { delete(s.oneWay, k) })
	return true
}

// CutOneWay cuts the messages from replica a to replica b, not the other
// way, for d.
func (c *Control) CutOneWay(a, b int, d time.Duration) { c.s.cutFor(a, b, d) }

// add adds o's counts to l's (the longest hold is the longer).
func (l *LeaseStats) add(o LeaseStats) {
	l.Reads += o.Reads
	l.Refused += o.Refused
	l.Syncs += o.Syncs
	l.Acks += o.Acks
	l.OneWayCuts += o.OneWayCuts
	l.MaxAcked = max(l.MaxAcked, o.MaxAcked)
	l.Removals += o.Removals
	l.Learners += o.Learners
	l.Promotions += o.Promotions
	l.Stranded += o.Stranded
	l.Held += o.Held
	l.LongestHold = max(l.LongestHold, o.LongestHold)
}

// cut reports whether a message from one node to another is lost to a
// one-way cut.
func (s *Sim) cut(from, to *node) bool {
	return s.oneWay != nil && from.kind == managerNode && to.kind == managerNode && s.oneWay[[2]int{from.idx, to.idx}] ||
		s.sbLinkCut(from, to) // between a holder and its standby (standby_faults.go)
}

// readLease is the replicas' read-lease configuration.
func (s *Sim) readLease() replica.ReadLease {
	if !s.leasesOn() {
		return replica.ReadLease{}
	}
	return s.cfg.ReadLease.Lease
}

// CutLink cuts replicas a and b off from each other, both ways, until
// HealLink: a partition that is not a grouping (each may still reach the
// others).
func (c *Control) CutLink(a, b int) {
	s := c.s
	if s.oneWay == nil {
		s.oneWay = map[[2]int]bool{}
	}
	s.oneWay[[2]int{a, b}], s.oneWay[[2]int{b, a}] = true, true
}

// HealLink undoes CutLink(a, b).
func (c *Control) HealLink(a, b int) {
	delete(c.s.oneWay, [2]int{a, b})
	delete(c.s.oneWay, [2]int{b, a})
}

// linkDelay is the extra delay of a message between two replicas.
func (s *Sim) linkDelay(from, to *node) time.Duration {
	if from.kind == managerNode && to.kind == managerNode {
		return s.cfg.ReplicaDelay
	}
	return 0
}

// ownerSeq names an Owner's request.
type ownerSeq struct {
	owner *node
	seq   uint64
}

// noteOwnerMsg notes when an Owner sent a request, for OwnerLatency.
func (s *Sim) noteOwnerMsg(from, _ *node, msg any) {
	if s.cfg.OwnerLatency == nil || from.kind != ownerNode {
		return
	}
	if m, ok := msg.(*protocol.LeaseRequest); ok {
		if s.asked == nil {
			s.asked = map[ownerSeq]time.Duration{}
		}
		if _, dup := s.asked[ownerSeq{from, m.Seq}]; !dup {
			s.asked[ownerSeq{from, m.Seq}] = s.now
		}
	}
}

// noteOwnerAnswer reports how long the request an answer acknowledges took.
func (s *Sim) noteOwnerAnswer(n *node, m *protocol.LeaseResponse) {
	if s.cfg.OwnerLatency == nil {
		return
	}
	k := ownerSeq{n, m.AckSeq}
	if at, ok := s.asked[k]; ok {
		delete(s.asked, k)
		s.cfg.OwnerLatency(s.now, s.now-at, m.AckSeq)
	}
}

// writeLatency follows, for Config.WriteLatency, the entries the leader n
// appends and the answers it releases.
func (s *Sim) writeLatency(n *node) {
	if s.cfg.WriteLatency == nil || n.rep == nil || n.rep.Core() == nil {
		return
	}
	if s.proposed == nil {
		s.proposed = map[uint64]time.Duration{}
	}
	last, _ := n.store.LastIndex()
	for i := last; i > 0; i-- {
		if _, ok := s.proposed[i]; ok || i <= s.ackedTo {
			break
		}
		s.proposed[i] = s.now
	}
	for a := n.rep.ReadLeaseAcked(); s.ackedTo < a; s.ackedTo++ {
		if at, ok := s.proposed[s.ackedTo+1]; ok {
			s.cfg.WriteLatency(s.now, s.now-at)
			delete(s.proposed, s.ackedTo+1)
		}
	}
}
