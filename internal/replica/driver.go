package replica

import (
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Ready is everything a Replica asks its driver to do: what to persist,
// send, apply and answer. Its fields are listed in the order the driver
// must do them, because safety rests on it (the order of etcd raft's
// Ready, with the Manager's answers added):
//
//  1. Persist HardState, Entries and Snapshot, and Compacted. Nothing may
//     leave the replica before the state it rests on is durable: a vote, or
//     an acknowledgement of entries, sent before its record is on disk is
//     forgotten by a crash, and the replica may then vote twice in a term or
//     lose entries a leader counted as committed.
//  2. Send Messages to the other replicas, once Peers has been applied to
//     the transport (a message may go to a replica just added).
//  3. Answer the Owners and Lookups. Owner messages are here only once
//     proven (the first failover rule): their round's entry committed in
//     the term it was proposed in, or a ReadIndex round confirmed the
//     replica still led. Lookup messages are read from the applied State.
//  4. Call Advance: the replica applies CommittedEntries (committed on a
//     quorum, so they need nothing of this Ready), takes over or steps down,
//     and queues what that releases for the next Ready.
//
// Drive does exactly this; manager.Server and the simulation both run it,
// so the order lives in one place.
type Ready struct {
	// 1. Persist.
	HardState raftpb.HardState
	Entries   []raftpb.Entry
	Snapshot  raftpb.Snapshot // from the leader: install it
	// Compacted, when not empty, is a snapshot the replica took: persist
	// it and drop the log entries it covers.
	Compacted raftpb.Snapshot

	// 2. Send.
	Peers    []Peer // replicas added (Addr set) or removed (Addr empty)
	Messages []raftpb.Message

	// 3. Answer.
	Owners  []lease.OwnerMessage
	Lookups []LookupMessage

	// 4. Applied by Advance.
	CommittedEntries []raftpb.Entry

	raft *raft.Ready // what Raft returned, nil if it had nothing
}

// A Driver is what a runtime gives Drive: a clock, durable storage and a
// network.
type Driver interface {
	// Now reads the replica's clock.
	Now() time.Time
	// Persist makes rd's HardState, Entries, Snapshot and Compacted
	// durable (step 1). An error stops the replica: one that cannot
	// persist must not answer.
	Persist(rd *Ready) error
	// Send applies rd.Peers to the transport, then hands rd.Messages to
	// the other replicas and rd.Owners and rd.Lookups to their clients
	// (steps 2 and 3). It never blocks on a slow receiver: a message it
	// cannot deliver is lost, which Raft and the protocol tolerate.
	Send(rd *Ready)
}

// Drive runs the replica's Ready/Advance cycle until it has nothing left to
// do. Drivers call it after every step, Tick or report they make.
func Drive(r *Replica, d Driver) error {
	for {
		rd, ok := r.Ready(d.Now())
		if !ok {
			return nil
		}
		if err := d.Persist(&rd); err != nil {
			return err
		}
		if err := r.record(&rd); err != nil {
			return err
		}
		d.Send(&rd)
		if err := r.Advance(d.Now(), rd); err != nil {
			return err
		}
	}
}

// record copies what rd persisted into the replica's MemoryStorage, the log
// Raft reads: once durable, it may be read back (the simulation keeps the
// MemoryStorage across a replica's restarts as its durable log).
func (r *Replica) record(rd *Ready) error {
	if rd.raft == nil {
		return nil
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.ms.ApplySnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := r.ms.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	return r.ms.Append(rd.Entries)
}

// MaxStepBatch is the most Raft messages a driver steps between two
// drives: the first it takes and up to 256 more already queued, so that a
// burst (a resumed replica's backlog, a leader's heartbeat answers) is one
// Ready, one fsync.
const MaxStepBatch = 257

// StepBatch is how a driver steps Raft messages: it steps the messages
// next yields, at most limit of them (MaxStepBatch if limit is out of
// 1..MaxStepBatch), all at one reading of the driver's clock, then drives
// the replica (Drive). next returns false when nothing more is queued;
// what it has not yielded stays queued for the next batch. It returns how
// many messages it stepped.
//
// Nothing is driven between the messages of a batch: the replica sees
// them as the server's loop hands them over, so a batch may hold, say, a
// heartbeat of a newer term and a read-lease ask queued behind it, stepped
// by a replica whose Raft has just stepped down while its Manager has not
// yet (its Advance has not run). manager.Server steps whole batches; the
// simulation draws each batch's limit at random up to MaxStepBatch, so its
// sweeps see every way the server can cut a backlog into batches.
// Messages Raft refuses (a stale term, a replica outside the group) are
// Raft's to ignore, and StepBatch does.
func StepBatch(r *Replica, d Driver, limit int, next func() (raftpb.Message, bool)) (int, error) {
	if limit < 1 || limit > MaxStepBatch {
		limit = MaxStepBatch
	}
	now := d.Now()
	n := 0
	for n < limit {
		m, ok := next()
		if !ok {
			break
		}
		_ = r.StepRaft(now, m)
		n++
	}
	return n, Drive(r, d)
}
