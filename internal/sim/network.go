package sim

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/protocol"
)

// The network: a message sent is lost to a partition or a drop, or
// delivered after a drawn delay (and, while faulting, sometimes twice); the
// sender of a snapshot is told whether it arrived, as a server's transport
// tells Raft.

// send puts a message on the network: partitions and drops lose it, delays
// reorder it, and it may arrive twice.
func (s *Sim) send(from, to *node, msg any) {
	s.stats.Messages++
	size := s.sizes.of(msg)
	if from.kind == managerNode && s.cfg.Probe != nil && s.leads(from) {
		s.cfg.Probe.ManagerTraffic(s.now, size, true)
	}
	switch {
	case from.kind == managerNode && to.kind == managerNode:
		s.stats.RaftMessages++
	case from.kind == ownerNode && to.kind == ownerNode:
		s.stats.Transfers++
	case from.kind == ownerNode || to.kind == ownerNode:
		s.stats.LeaseMessages++
		s.stats.LeaseBytes += int64(size)
	default:
		s.stats.SyncBytes += int64(size)
	}
	if _, ok := msg.(refusal); ok {
		s.stats.Refusals++
	}
	switch m := msg.(type) {
	case *protocol.SyncRequest:
		s.stats.LookupPolls++
	case *protocol.SyncResponse:
		if m.Request != 0 && m.ID == 0 {
			if len(m.Update.Changes) == 0 && !m.Update.Snapshot {
				s.stats.Heartbeats++
			} else {
				s.stats.Vouching++
			}
		}
	}
	s.noteOwnerMsg(from, to, msg)
	if s.sbOnSend(from, to, msg) {
		return // taken over by a standby fault (standby_faults.go)
	}
	e := &event{at: s.now + s.delay() + s.linkDelay(from, to), kind: evDeliver, from: from.pos, to: to.pos, msg: msg, gen: from.inc, toInc: to.inc}
	if from.part != to.part || s.cut(from, to) || (s.faulting && s.rng.Float64() < s.cfg.DropRate) {
		s.stats.Dropped++
		if isSnapshot(msg) {
			// The sender's transport learns the stream failed.
			s.at(e.at, func() { s.snapshotDone(e, false) })
		}
		return
	}
	copies := 1
	if s.faulting && s.rng.Float64() < s.cfg.DupRate && !isSnapshot(msg) {
		copies = 2
		s.stats.Duplicated++
	}
	for range copies {
		c := *e
		c.at = s.now + s.delay() + s.linkDelay(from, to)
		s.push(&c)
	}
}

func isSnapshot(msg any) bool {
	m, ok := msg.(raftpb.Message)
	return ok && m.Type == raftpb.MsgSnap
}

// snapshotDone reports to the sender of a MsgSnap whether it arrived, as a
// server's transport does (RawNode.ReportSnapshot): until it is told, Raft
// sends that replica nothing more. A restarted sender is not told.
func (s *Sim) snapshotDone(e *event, ok bool) {
	m, snap := e.msg.(raftpb.Message)
	from := s.nodes[e.from]
	if !snap || m.Type != raftpb.MsgSnap || !from.up || from.inc != e.gen {
		return
	}
	if from.stalled {
		from.stallQ = append(from.stallQ, func() { s.snapshotDone(e, ok) })
		return
	}
	status := raft.SnapshotFailure
	if ok {
		status = raft.SnapshotFinish
	}
	from.rep.ReportSnapshot(m.To, status)
	s.after(from)
}

func (s *Sim) delay() time.Duration {
	c := s.cfg
	if s.faulting && c.MaxDelay > 0 && s.rng.Float64() < c.LongDelayRate {
		return c.MaxDelay/2 + time.Duration(s.rng.Int64N(int64(c.MaxDelay/2)+1))
	}
	return c.MinDelay + time.Duration(s.rng.Int64N(int64(3*c.MinDelay)+1))
}
