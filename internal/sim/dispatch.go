package sim

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/protocol"
)

// The step loop: an event popped is handed to its node (a timer tick or a
// message delivered), and after every step the node's core is drained of
// what it asks for: messages to send, upcalls for the checkers, its next
// timer.

func (s *Sim) handle(e *event) {
	switch e.kind {
	case evFunc:
		e.fn()
	case evTimer:
		n := s.nodes[e.to]
		if !n.up || e.gen != n.gen || n.stalled {
			return // a stalled node ticks when it resumes
		}
		s.tickNode(n)
	case evDeliver:
		n, from := s.nodes[e.to], s.nodes[e.from]
		if !n.up || from.part != n.part || s.cut(from, n) {
			s.stats.Dropped++
			s.snapshotDone(e, false)
			return
		}
		if from.kind == managerNode && n.kind != managerNode && from.idx != n.target {
			// The client has moved to another replica: the stream this
			// came on is closed.
			s.stats.Dropped++
			return
		}
		if from.kind == managerNode && n.kind == lookupNode && e.toInc != n.inc {
			// Sent on a stream of the Lookup's previous process, which
			// closed when it crashed: a push or heartbeat on it names a
			// request of that process's session, not of this one. (Lease
			// messages to an Owner's previous process are delivered: the
			// lease protocol is built for a network that delivers stale
			// messages, and its incarnations filter them, C§2.3.2.)
			s.stats.Dropped++
			return
		}
		if n.stalled {
			n.stallQ = append(n.stallQ, func() { s.deliver(n, e) })
			return
		}
		s.deliver(n, e)
	}
}

func (s *Sim) tickNode(n *node) {
	now := n.local(s.now)
	switch n.kind {
	case managerNode:
		t0 := s.clock()
		n.rep.Tick(now) // after sends the coalesced push round it runs
		s.work(n, s.clock().Sub(t0))
	case ownerNode:
		s.checkTarget(n, now, s.cfg.Timing.OwnerQuiet())
		n.own.Tick(now)
	case lookupNode:
		s.checkTarget(n, now, s.cfg.Timing.LookupQuiet())
		if n.thin != nil {
			n.thin.Tick(now)
		} else {
			n.look.Tick(now)
		}
	}
	s.after(n)
}

// traceNode names a node whose messages are printed to stdout as the run
// goes (the -sim.trace flag of the tests, for replaying one seed). It is set
// before any run starts and only read afterwards.
var traceNode string

func (s *Sim) trace(n *node, format string, args ...any) {
	if traceNode != "" && n.name == traceNode {
		fmt.Printf("%12s %s: %s\n", s.now, n.name, fmt.Sprintf(format, args...))
	}
}

func (s *Sim) deliver(n *node, e *event) {
	now := n.local(s.now)
	from := s.nodes[e.from]
	if m, ok := e.msg.(*protocol.SyncResponse); ok && traceNode != "" && n.look != nil {
		s.trace(n, "recv id=%d epoch=%d snap=%v from=%d to=%d changes=%d viewLSN=%d", m.ID, m.Epoch, m.Update.Snapshot, m.Update.From, m.Update.To, len(m.Update.Changes), n.look.View().LSN())
	}
	if m, ok := e.msg.(refusal); ok {
		// The replica will not serve this client: follow its hint. The
		// request it refused is lost; the core resends on its own timers.
		s.trace(n, "refused by %s (leader %d)", from.name, m.leader)
		s.retarget(n, now, m.leader)
		return
	}
	switch n.kind {
	case managerNode:
		if s.cfg.Probe != nil && s.leads(n) {
			s.cfg.Probe.ManagerTraffic(s.now, s.sizes.of(e.msg), false)
		}
		if m, ok := e.msg.(raftpb.Message); ok {
			if m.To != n.rid {
				// To the process this one replaced (members.go): its
				// connections closed with it.
				s.stats.Dropped++
				s.snapshotDone(e, false)
				return
			}
			s.queueRaft(n, e) // stepped in batches, as the server does (step.go)
			return
		}
		var err error
		t0 := s.clock()
		switch m := e.msg.(type) {
		case *protocol.LeaseRequest:
			s.trace(n, "recv req from %s seq=%d", m.Owner, m.Seq)
			err = n.rep.StepLease(now, m)
		case *protocol.SyncRequest:
			if s.cfg.NoHeartbeats {
				c := *m
				c.Heartbeats = false
				m = &c
			}
			before := s.leaseSyncs(n)
			if err = n.rep.StepSync(now, from.session, m); err == nil {
				s.leaseSynced(n, before)
			}
		}
		s.work(n, s.clock().Sub(t0))
		if nl := (*replica.NotLeaderError)(nil); errors.As(err, &nl) {
			leader, ok := s.byAddr[nl.Leader]
			if !ok {
				leader = -1
			}
			s.trace(n, "refuse %s (leader %q)", from.name, nl.Leader)
			s.send(n, from, refusal{leader: leader})
		} else if errors.Is(err, replica.ErrNoEpoch) {
			// The first leader, before its first entry commits: the
			// server answers Unavailable, and the client tries elsewhere.
			s.send(n, from, refusal{leader: -1})
		} else if err != nil {
			panic(fmt.Sprintf("%s rejected a well-formed message: %v", n.name, err))
		}
	case ownerNode:
		if from.kind == ownerNode {
			s.appDeliver(n, from, e.msg)
			break
		}
		n.heard = now
		m := e.msg.(*protocol.LeaseResponse)
		s.noteOwnerAnswer(n, m)
		s.trace(n, "recv resp from %s epoch=%d seq=%d ack=%d inc=%d leases=%d renewHeld=%v (my inc=%d)", from.name, m.Epoch, m.Seq, m.AckSeq, m.Incarnation, len(m.Leases), m.RenewHeld, n.inc)
		s.sbDeposedHeard(from, n, e.gen, m) // standby_deposed.go
		before := s.chk.heldNums(n)
		n.own.Step(now, m)
		s.chk.ownerStepped(n, before)
	case lookupNode:
		n.heard = now
		m := e.msg.(*protocol.SyncResponse)
		if n.thin == nil {
			m = s.compacts.of(m, s.broken().MarkFromCopyBlind) // as the Manager pushes to a Lookup that says compact_changes
		}
		if n.thin != nil {
			n.thin.Step(now, m)
		} else {
			before := n.look.View().LSN()
			fits := m != e.msg && m.Epoch == n.look.Epoch() && m.Namespace == namespace && m.Update.From == before
			n.look.Step(now, m)
			if m != e.msg {
				s.stats.CompactPushes++
				if fits {
					// Made for exactly this copy: it must apply.
					if n.look.View().LSN() != m.Update.To {
						s.chk.fail("compact fit", "%s refused a compact push %d..%d made for its copy at LSN %d (epoch %d)",
							n.name, m.Update.From, m.Update.To, before, m.Epoch)
					}
					for _, c := range m.Update.Changes {
						if c.FromCopy {
							s.stats.FromCopyChanges++
						}
						if c.OwnerFromCopy {
							s.stats.OwnerFromCopyChanges++
						}
					}
				}
			}
			if s.onLookup != nil && n.look.View().LSN() != before {
				s.onLookup(n.idx, n.look.View().LSN())
			}
		}
	}
	s.after(n)
}

// after sends what the node's core asks for, hands its upcalls to the
// checkers, and sets its timer.
func (s *Sim) after(n *node) {
	var deadline time.Time
	switch n.kind {
	case managerNode:
		deadline = s.afterReplica(n)
	case ownerNode:
		out, changes := n.own.Ready()
		for _, m := range out {
			s.trace(n, "send req to %s seq=%d ackE=%d ackS=%d held=%d heldAsAcked=%v inc=%d", s.mgrs[n.target].name, m.Seq, m.AckEpoch, m.AckSeq, len(m.Held), m.HeldAsAcked, m.Incarnation)
		}
		s.ownerChanged(n, changes)
		if s.cfg.Standbys {
			s.sbStep(n)
			s.sbFaultStep(n)
		}
		s.chk.acked(n)
		for _, m := range out {
			s.send(n, s.mgrs[n.target], m)
		}
		deadline = n.own.NextDeadline()
	case lookupNode:
		if n.thin != nil {
			for _, m := range n.thin.Ready() {
				s.send(n, s.mgrs[n.target], m)
			}
			deadline = n.thin.NextDeadline()
			break
		}
		out, losses := n.look.Ready()
		for _, l := range losses {
			s.trace(n, "loss all=%v %d ranges", l.All, len(l.Ranges))
		}
		for _, m := range out {
			s.trace(n, "send sync to %s id=%d lsn=%d epoch=%d", s.mgrs[n.target].name, m.ID, m.LSN, m.Epoch)
		}
		s.chk.lookupLosses(n, losses)
		for _, m := range out {
			s.send(n, s.mgrs[n.target], m)
		}
		deadline = n.look.NextDeadline()
	}
	if s.chk.violation != nil {
		return
	}
	n.gen++
	t := s.now
	if deadline.After(n.local(s.now)) {
		t = n.real(deadline)
		for n.local(t).Before(deadline) { // float rounding
			t++
		}
	}
	s.push(&event{at: t, kind: evTimer, to: n.pos, gen: n.gen})
}
