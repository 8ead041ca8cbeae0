package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Membership changes (leasehold cluster add and remove) must never cost the
// group its quorum. A replica is added as a learner, which receives the log
// but does not vote, so an address where nothing listens changes nothing the
// group needs; the leader promotes it to a voter only once it has caught up
// (its log within a tenth of the leader's, as etcd does) and the group with
// it would still have a quorum of replicas heard from. A learner that does not
// catch up within LearnerTimeout is removed again: left in place it would
// keep an ID bound to an address that may be wrong and keep the leader
// sending it snapshots, and the operator's retry of the same add would be
// refused. A change that would leave fewer voters heard from than a quorum
// is refused with ErrQuorum before it is proposed.

var (
	// ErrNotMember refuses a raft message from a replica outside the group.
	ErrNotMember = errors.New("manager: raft message from a replica that is not a member")
	// ErrQuorum refuses a membership change that would leave the group
	// without a quorum of reachable voters.
	ErrQuorum = errors.New("manager: the change would cost the group its quorum")
	// ErrConfPending refuses a membership change while another is in
	// flight, or while a new leader has not applied its first entry (Raft
	// would drop the change: an earlier leader's may be in its log).
	ErrConfPending = errors.New("manager: another membership change is in flight; retry")
	// ErrMember refuses adding a replica that is a member, and removing one
	// that is not.
	ErrMember = errors.New("manager: membership")
)

// DefaultLearnerTimeout is how long a learner may take to catch up when
// Settings.LearnerTimeout is 0.
const DefaultLearnerTimeout = 30 * time.Second

// caughtUp reports whether a learner whose log matches the leader's up to
// match has caught up with a leader whose log ends at last: within a tenth
// of it, as etcd asks before it promotes a learner.
func caughtUp(match, last uint64) bool { return match > 0 && match >= last-last/10 }

func (r *Replica) learnerTimeout() time.Duration {
	if d := r.cfg.Settings.LearnerTimeout; d > 0 {
		return d
	}
	return DefaultLearnerTimeout
}

// reachable reports whether this leader heard from replica id within an
// election timeout (a follower answers every heartbeat, one per tick).
func (r *Replica) reachable(now time.Time, id uint64) bool {
	if id == r.cfg.ID {
		return true
	}
	at, ok := r.heard[id]
	return ok && now.Sub(at) < r.electionTimeout()
}

// quorumAfter checks that the voters would still have a quorum of reachable
// replicas if voter add joined (0: none) and voter del left (0: none); add
// counts as reachable when addUp is true. The error names who is
// unreachable.
func (r *Replica) quorumAfter(now time.Time, add uint64, addUp bool, del uint64) error {
	voters := r.rn.Status().Config.Voters.IDs()
	delete(voters, del)
	up, n := 0, len(voters)
	var down []string
	for _, id := range slices.Sorted(maps.Keys(voters)) {
		if r.reachable(now, id) {
			up++
		} else {
			down = append(down, fmt.Sprint(id))
		}
	}
	if add != 0 {
		n++
		if addUp {
			up++
		}
	}
	if q := n/2 + 1; up < q {
		why := fmt.Sprintf("the group would have %d voters and need %d of them, but only %d answer", n, q, up)
		if len(down) > 0 {
			why += " (replica " + strings.Join(down, ", ") + " unreachable: bring it back, or remove it first)"
		}
		return fmt.Errorf("%w: %s", ErrQuorum, why)
	}
	return nil
}

// AddLearner asks the group to add replica id at addr as a learner, which
// the leader promotes to a voter once it has caught up (see above); for a
// voter it changes the address. Only the leader accepts. It is refused
// while another change is in flight, if id is a learner, and if the voters
// heard from are too few for a quorum of
// the group with id (a one-replica group may always grow: its replica
// alone cannot be a quorum of two, and the learner is promoted only once
// it answers).
func (r *Replica) AddLearner(now time.Time, id uint64, addr string) error {
	if r.role != raft.StateLeader {
		return r.notLeader()
	}
	if r.confPending || !r.termSeen {
		return ErrConfPending
	}
	if a, ok := r.st.Peers()[id]; ok {
		if r.st.ReadReplica(id) {
			// An operator's explicit promotion of a read replica: it
			// becomes an ordinary learner, promoted once caught up.
			if err := r.quorumAfter(now, id, false, 0); err != nil && len(r.rn.Status().Config.Voters.IDs()) > 1 {
				return err
			}
			if err := r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id, Context: PeerContext(addr)}); err != nil {
				return err
			}
			r.learners[id] = now.Add(r.learnerTimeout())
			return nil
		}
		if _, voter := r.rn.Status().Config.Voters.IDs()[id]; !voter {
			return fmt.Errorf("%w: replica %d, at %s, is already being added (a learner catching up)", ErrMember, id, a)
		}
		// A voter's new address: the configuration, and so the quorum,
		// stay as they are.
		return r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: id, Context: PeerContext(addr)})
	}
	if len(r.rn.Status().Config.Voters.IDs()) > 1 {
		if err := r.quorumAfter(now, id, false, 0); err != nil {
			return err
		}
	}
	cc := raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id, Context: PeerContext(addr)}
	if err := r.rn.ProposeConfChange(cc); err != nil {
		return err
	}
	r.confPending = true
	r.learners[id] = now.Add(r.learnerTimeout())
	return nil
}

// RemoveMember asks the group to remove replica id. Only the leader
// accepts. Removing a voter is refused if the voters left would not have a
// reachable quorum; a learner may always go.
func (r *Replica) RemoveMember(now time.Time, id uint64) error {
	if r.role != raft.StateLeader {
		return r.notLeader()
	}
	if _, ok := r.st.Peers()[id]; !ok {
		return fmt.Errorf("%w: no replica %d in the group", ErrMember, id)
	}
	if r.confPending || !r.termSeen {
		return ErrConfPending
	}
	cfg := r.rn.Status().Config
	if _, voter := cfg.Voters.IDs()[id]; voter {
		if len(cfg.Voters.IDs()) == 1 {
			return fmt.Errorf("%w: replica %d is the last voter", ErrQuorum, id)
		}
		if err := r.quorumAfter(now, 0, false, id); err != nil {
			return err
		}
	}
	return r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode, NodeID: id})
}

func (r *Replica) proposeConf(cc raftpb.ConfChange) error {
	if err := r.rn.ProposeConfChange(cc); err != nil {
		return err
	}
	r.confPending = true
	return nil
}

// promote runs on the leader at every Tick: it promotes each learner that
// has caught up, and removes each that has not by its deadline. A learner
// this leader did not add (its predecessor did) gets a full timeout from
// now. One change at a time: Raft accepts no other while one is in flight.
func (r *Replica) promote(now time.Time) {
	if r.role != raft.StateLeader || r.confPending || !r.termSeen {
		return
	}
	if len(r.conf.Learners) == 0 && len(r.learners) == 0 {
		return // no learner to promote or time out (without cloning Raft's configuration, as Status does)
	}
	st := r.rn.Status()
	for id := range st.Config.Learners {
		if _, ok := r.learners[id]; !ok && !r.readReplica(id) {
			r.learners[id] = now.Add(r.learnerTimeout())
		}
	}
	last := st.Progress[r.cfg.ID].Match
	for _, id := range slices.Sorted(maps.Keys(r.learners)) {
		deadline := r.learners[id]
		if _, ok := st.Config.Learners[id]; !ok {
			if _, voter := st.Config.Voters.IDs()[id]; voter || r.st.Peers()[id] == "" {
				delete(r.learners, id) // promoted or removed
			}
			continue // proposed, not yet applied
		}
		pr := st.Progress[id]
		if r.readReplica(id) {
			// Never promoted (readreplica.go).
			if r.readReplicaAdded(now, id, caughtUp(pr.Match, last)) {
				return
			}
			continue
		}
		if caughtUp(pr.Match, last) && r.reachable(now, id) && r.quorumAfter(now, id, true, 0) == nil {
			if r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: id, Context: PeerContext(r.st.Peers()[id])}) == nil {
				delete(r.learners, id)
			}
			return
		}
		if !now.Before(deadline) {
			if r.proposeConf(raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode, NodeID: id}) == nil {
				delete(r.learners, id)
			}
			return
		}
	}
}
