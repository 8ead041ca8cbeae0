package replica

import (
	"bytes"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Read replicas (docs/operations.md, "Read replicas"; docs/protocol.md,
// "Read replicas") are members of the group that apply the log, run a Feed
// and answer Lookups like any follower (rule 17: on a ReadIndex proof less
// than an election timeout old), but are Raft learners for good:
//
//   - they never vote and never count toward a quorum: Raft counts only
//     voters in elections, in commit and in ReadIndex and CheckQuorum
//     rounds, and a learner never campaigns (Raft's promotable is false);
//   - the leader never promotes them: which replicas are read replicas is
//     replicated (lease.State.ReadReplica, set by the ConfChange that adds
//     one), so every leader, a new one included, leaves them learners;
//   - an operator may promote one explicitly (leasehold cluster add of the
//     same ID without --read-replica): that ConfChange clears the mark, and
//     the replica becomes an ordinary learner the leader promotes once it
//     is caught up, under the quorum checks a voter's add has;
//   - read leases: a read replica is never counted in a read lease's
//     majority (only voters' promises are), and ReadLease.All does not make
//     it a holder, so no write waits for it to append.
//
// The adding leader removes a read replica that never catches up within
// LearnerTimeout, as it does a voter's learner (the address may be wrong);
// a read replica that caught up once stays until an operator removes it,
// down or not: it costs the group nothing but the leader's attempts to
// reach it.

// readReplicaMark follows the address in a ConfChange's Context when the
// replica it adds is a read replica. An address never holds a NUL.
const readReplicaMark = "\x00read-replica"

// PeerContext is the Context of an AddNode ConfChange: the new replica's
// address.
func PeerContext(addr string) []byte { return []byte(addr) }

// ReadReplicaContext is the Context of the AddLearnerNode ConfChange that
// adds a read replica at addr.
func ReadReplicaContext(addr string) []byte { return []byte(addr + readReplicaMark) }

// parsePeerContext reads a ConfChange's Context: the address, and whether
// it names a read replica.
func parsePeerContext(ctx []byte) (addr string, readReplica bool) {
	if a, ok := bytes.CutSuffix(ctx, []byte(readReplicaMark)); ok {
		return string(a), true
	}
	return string(ctx), false
}

// ReadReplica reports whether this replica is a read replica of its group,
// as far as it has applied.
func (r *Replica) ReadReplica() bool { return r.st.ReadReplica(r.cfg.ID) }

// readReplica is IsReadReplica as promote sees it: false for every
// replica with the ReadReplicaPromoted twin.
func (r *Replica) readReplica(id uint64) bool {
	return r.st.ReadReplica(id) && !r.cfg.Break.ReadReplicaPromoted
}

// IsReadReplica reports whether member id is a read replica.
func (r *Replica) IsReadReplica(id uint64) bool { return r.st.ReadReplica(id) }

// AddReadReplica asks the group to add replica id at addr as a read
// replica (leasehold cluster add --read-replica). Only the leader accepts,
// one change at a time. It needs no quorum check: a learner changes no
// quorum. Adding a read replica already in the group at addr does nothing;
// at another address, it moves it. A voter, or a learner being caught up
// to be one, is refused: demoting a voter is not supported (remove it,
// then add it back as a read replica).
func (r *Replica) AddReadReplica(now time.Time, id uint64, addr string) error {
	if r.role != raft.StateLeader {
		return r.notLeader()
	}
	if r.confPending || !r.termSeen {
		return ErrConfPending
	}
	if a, ok := r.st.Peers()[id]; ok {
		switch {
		case !r.st.ReadReplica(id):
			return fmt.Errorf("%w: replica %d, at %s, is a voter (or being added as one); remove it first to make it a read replica", ErrMember, id, a)
		case a == addr:
			return nil
		}
		return r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id, Context: ReadReplicaContext(addr)})
	}
	if err := r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id, Context: ReadReplicaContext(addr)}); err != nil {
		return err
	}
	r.learners[id] = now.Add(r.learnerTimeout())
	return nil
}

// readReplicaAdded runs in promote for learner id, a read replica: the
// leader that added it forgets it once it has caught up, and removes it if
// it has not by its deadline; any other leaves it as it is. It reports
// whether it proposed a change.
func (r *Replica) readReplicaAdded(now time.Time, id uint64, caught bool) bool {
	deadline, mine := r.learners[id]
	switch {
	case !mine:
		return false
	case caught:
		delete(r.learners, id)
		return false
	case !now.Before(deadline):
		if r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode, NodeID: id}) == nil {
			delete(r.learners, id)
		}
		return true
	}
	return false
}
