package replica

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/faults"
)

// TestStrangerCannotDeposeLeader: a heartbeat from replica 99, no member
// of the group, at a higher term is dropped: the leader keeps its term and
// its lead.
func TestStrangerCannotDeposeLeader(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	l := g.runUntilLeader()
	term := l.Status().Term
	m := raftpb.Message{Type: raftpb.MsgHeartbeat, From: 99, To: l.ID(), Term: term + 10}
	if err := l.StepRaft(g.now, m); !errors.Is(err, ErrNotMember) {
		t.Fatalf("a heartbeat from replica 99: %v, want ErrNotMember", err)
	}
	g.run(100 * ms)
	if st := l.Status(); st.RaftState != raft.StateLeader || st.Term != term {
		t.Fatalf("after a heartbeat from replica 99 the leader is a %v at term %d, want the leader at term %d", st.RaftState, st.Term, term)
	}
	if l.Foreign() != 1 {
		t.Fatalf("Foreign() = %d, want 1", l.Foreign())
	}
}

// joiner adds replica id to g as a replica started to join (no group yet),
// down until the test brings it up.
func (g *group) joiner(id uint64) *Replica {
	g.t.Helper()
	r, err := NewReplica(ReplicaConfig{ID: id,
		Core: CoreConfig{Timing: groupTiming, Epoch: epoch, Seed: id, RaftTick: 25 * ms}}, g.now)
	if err != nil {
		g.t.Fatal(err)
	}
	g.reps[id], g.down[id] = r, true
	return r
}

func isVoter(r *Replica, id uint64) (member, voter bool) {
	cfg := r.Status().Config
	_, voter = cfg.Voters.IDs()[id]
	_, learner := cfg.Learners[id]
	return voter || learner, voter
}

// TestLearnerPromotedOnceCaughtUp: a replica added while it does not answer
// stays a learner, so the group's quorum is unchanged; once it answers and
// has caught up the leader promotes it.
func TestLearnerPromotedOnceCaughtUp(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	l := g.runUntilLeader()
	g.joiner(4)
	if err := l.AddLearner(g.now, 4, "m4:7400"); err != nil {
		t.Fatal(err)
	}
	g.run(2 * time.Second)
	if member, voter := isVoter(l, 4); !member || voter {
		t.Fatalf("replica 4, down, is member %v voter %v; want a learner", member, voter)
	}
	if err := l.AddLearner(g.now, 4, "m4:7400"); !errors.Is(err, ErrMember) {
		t.Fatalf("adding replica 4 again while it is a learner: %v, want ErrMember", err)
	}
	g.down[4] = false
	g.run(2 * time.Second)
	if member, voter := isVoter(g.leader(), 4); !member || !voter {
		t.Fatalf("replica 4, up and caught up, is member %v voter %v; want a voter", member, voter)
	}
}

// TestLearnerRemovedAfterTimeout: a learner that never answers is removed
// once LearnerTimeout has passed, and the group keeps its leader.
func TestLearnerRemovedAfterTimeout(t *testing.T) {
	g := newGroup(t, 1, faults.Set{})
	l := g.runUntilLeader()
	l.cfg.Core.LearnerTimeout = time.Second
	g.joiner(4)
	if err := l.AddLearner(g.now, 4, "m4:7400"); err != nil {
		t.Fatal(err)
	}
	g.run(500 * ms)
	if member, voter := isVoter(l, 4); !member || voter {
		t.Fatalf("replica 4 is member %v voter %v before the timeout; want a learner", member, voter)
	}
	g.run(time.Second)
	if member, _ := isVoter(l, 4); member {
		t.Fatal("replica 4 is still a member after the learner timeout")
	}
	if g.leader() != l {
		t.Fatal("the leader changed")
	}
}

// TestLoneLeaderSkipsRaftTicks: a leader with no other replica does not
// wake for Raft's ticks, which change nothing for it; a learner added to it
// brings them back, and is caught up and promoted as in any group.
func TestLoneLeaderSkipsRaftTicks(t *testing.T) {
	g := newGroup(t, 1, faults.Set{})
	l := g.runUntilLeader()
	g.run(time.Second)
	tick := l.cfg.Core.RaftTick
	if wait := l.NextDeadline().Sub(g.now); wait <= tick {
		t.Fatalf("an idle lone leader's next deadline is %v away, want more than a Raft tick (%v)", wait, tick)
	}
	term := l.Status().Term
	g.joiner(2)
	if err := l.AddLearner(g.now, 2, "m2:7400"); err != nil {
		t.Fatal(err)
	}
	g.settle()
	if wait := l.NextDeadline().Sub(g.now); wait > tick {
		t.Fatalf("with a learner, the leader's next deadline is %v away, want at most a Raft tick (%v)", wait, tick)
	}
	g.down[2] = false
	g.run(2 * time.Second)
	if member, voter := isVoter(l, 2); !member || !voter {
		t.Fatalf("replica 2, up and caught up, is member %v voter %v; want a voter", member, voter)
	}
	if st := l.Status(); st.RaftState != raft.StateLeader || st.Term != term {
		t.Fatalf("after the join the first replica is a %v at term %d, want the leader at term %d", st.RaftState, st.Term, term)
	}
}
