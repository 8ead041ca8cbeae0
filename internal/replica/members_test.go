package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
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
		Settings: Settings{Lease: lease.Settings{Timing: groupTiming, Epoch: epoch, Seed: id}, RaftTick: 25 * ms}}, g.now)
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
	l.cfg.Settings.LearnerTimeout = time.Second
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
	tick := l.cfg.Settings.RaftTick
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

// TestLoneLeaderKeepsItsTimers: a lone leader driven only at its own
// deadlines, as the Manager's loop drives it, while eight Owners renew (a
// request every Renew/8, so the Core's own idle deadline keeps moving on),
// still forgets a Lookup that stopped syncing within two SyncTimeouts and
// a second: the Feed's timer does not ride on Raft's ticks.
func TestLoneLeaderKeepsItsTimers(t *testing.T) {
	g := newGroup(t, 1, faults.Set{})
	l := g.runUntilLeader()
	cur := g.now
	owners := map[string]*owner.Core{}
	starts := map[string]time.Time{}
	for i := range 8 {
		id := fmt.Sprintf("o%d", i)
		owners[id] = owner.NewCore(owner.CoreConfig{Namespace: protocol.DefaultNamespace, ID: id, Addr: id + ":7000",
			Incarnation: 1, Timing: groupTiming, Seed: uint64(i + 1)})
		starts[id] = cur.Add(time.Duration(i) * groupTiming.Renew / 8)
	}
	if err := l.StepSync(cur, 7, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1}); err != nil {
		t.Fatal(err)
	}
	if n := l.Feed().Lookups(protocol.DefaultNamespace); n != 1 {
		t.Fatalf("%d Lookup sessions after a sync, want 1", n)
	}
	end := cur.Add(2*groupTiming.SyncTimeout + time.Second + 100*ms)
	d := &testDriver{send: func(rd *Ready) {
		for _, m := range rd.Owners {
			owners[m.To].Step(cur, m.Msg)
		}
	}}
	ids := slices.Sorted(maps.Keys(owners))
	for steps := 0; cur.Before(end); steps++ {
		if steps > 100000 {
			t.Fatal("the run does not advance")
		}
		next := l.NextDeadline()
		for _, id := range ids {
			at := starts[id]
			if at.IsZero() {
				at = owners[id].NextDeadline()
			}
			if at.Before(next) {
				next = at
			}
		}
		cur = maxTime(cur, next)
		for _, id := range ids {
			o := owners[id]
			if at := starts[id]; (!at.IsZero() && !cur.Before(at)) || (at.IsZero() && !cur.Before(o.NextDeadline())) {
				starts[id] = time.Time{}
				o.Tick(cur)
				reqs, _ := o.Ready()
				for _, req := range reqs {
					_ = l.StepLease(cur, req)
				}
			}
		}
		if !cur.Before(l.NextDeadline()) {
			l.Tick(cur)
		}
		d.now = cur
		if err := Drive(l, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(owners["o0"].Held(cur)); n == 0 {
		t.Fatal("owner o0 holds nothing: the Owners did not run")
	}
	if n := l.Feed().Lookups(protocol.DefaultNamespace); n != 0 {
		t.Fatalf("%d Lookup sessions %v after the only sync, want none (forgotten after two SyncTimeouts, %v)",
			n, end.Sub(g.now), 2*groupTiming.SyncTimeout)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestLearnerAddedAfterCompaction: a replica added once the log has been
// compacted is sent a snapshot, and Raft throws away a snapshot whose
// configuration does not name the replica receiving it. The leader
// snapshots when it applies the change, so the learner catches up and is
// promoted (before, it was sent the snapshot taken before its addition
// until the next one, SnapshotEntries later).
func TestLearnerAddedAfterCompaction(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	for _, r := range g.reps {
		r.cfg.Settings.SnapshotEntries = 1000 // compacted once, below
	}
	l := g.runUntilLeader()
	g.addOwner("a")
	g.run(groupTiming.Renew)
	for _, r := range g.reps {
		r.cfg.Settings.SnapshotEntries = 1
	}
	g.run(groupTiming.Renew)
	for _, r := range g.reps {
		r.cfg.Settings.SnapshotEntries = 1000 // no snapshot but the change's from here
	}
	if l.Stats().Snapshots == 0 {
		t.Fatal("the log was not compacted")
	}
	j := g.joiner(4)
	g.down[4] = false
	if err := l.AddLearner(g.now, 4, "m4:7400"); err != nil {
		t.Fatal(err)
	}
	g.run(2 * time.Second)
	if member, voter := isVoter(g.leader(), 4); !member || !voter {
		t.Fatalf("replica 4, added after compaction, is member %v voter %v (applied %d of %d); want a voter",
			member, voter, j.Status().Applied, g.leader().Status().Commit)
	}
}
