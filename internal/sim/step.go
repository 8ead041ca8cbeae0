package sim

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/replica"
)

// How a Manager replica steps Raft messages, as its server does
// (replica.StepBatch): a message delivered joins the replica's queue (the
// server's raftIn channel), and the replica's loop, once it wakes, steps a
// batch of what is queued and only then drives. The loop wakes at once
// half the time and otherwise after up to MinDelay (the server's loop was
// busy driving, or fsyncing), so that a burst of answers queues up; each
// batch's limit is drawn uniformly from 1 to the smaller of the queue's
// length and replica.MaxStepBatch, so every cut of a backlog into batches
// the server can make is one a sweep can draw. A stalled replica's backlog
// (a resumed SIGSTOP) is the largest of them: a heartbeat of a newer term
// and a read-lease ask queued behind it may be stepped with no drive
// between them.

// queueRaft queues a Raft message delivered to replica n and wakes its
// loop if it is not awake already.
func (s *Sim) queueRaft(n *node, e *event) {
	n.inbox = append(n.inbox, e)
	s.wake(n)
}

// wake schedules n's loop to step its queue.
func (s *Sim) wake(n *node) {
	if n.waking {
		return
	}
	n.waking = true
	busy := s.uniform(0, s.cfg.MinDelay)
	if s.rng.IntN(2) == 0 {
		busy = 0
	}
	inc := n.inc
	s.at(s.now+busy, func() {
		if n.inc == inc && n.up {
			s.stepInbox(n)
		}
	})
}

// stepInbox steps one batch of n's queue and drives n, then wakes again
// if more is queued.
func (s *Sim) stepInbox(n *node) {
	n.waking = false
	if len(n.inbox) == 0 {
		return
	}
	if n.stalled {
		// The loop is not running: the queue waits for it to resume.
		n.stallQ = append(n.stallQ, func() { s.wake(n) })
		return
	}
	s.stepBatch(n, 1+s.rng.IntN(min(len(n.inbox), replica.MaxStepBatch)))
}

// stepBatch steps up to limit messages of n's queue and drives n, then
// wakes n again if more is queued.
func (s *Sim) stepBatch(n *node, limit int) {
	var stepped []*event
	t0 := s.clock()
	_, err := replica.StepBatch(n.rep, replicaDriver{s, n, n.local(s.now)}, limit, func() (raftpb.Message, bool) {
		if len(n.inbox) == 0 {
			return raftpb.Message{}, false
		}
		e := n.inbox[0]
		n.inbox[0] = nil
		n.inbox = n.inbox[1:]
		stepped = append(stepped, e)
		return e.msg.(raftpb.Message), true
	})
	if err != nil {
		panic(fmt.Sprintf("%s: %v", n.name, err))
	}
	s.work(n, s.clock().Sub(t0))
	if len(stepped) > 1 {
		s.stats.RaftBatches++
		s.stats.LongestBatch = max(s.stats.LongestBatch, len(stepped))
	}
	s.after(n)
	for _, e := range stepped {
		s.snapshotDone(e, true)
	}
	if len(n.inbox) > 0 && n.up {
		s.wake(n)
	}
}
