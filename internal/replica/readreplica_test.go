package replica

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// addReadReplicas starts replicas ids to join g and adds each as a read
// replica through leader l, one change at a time.
func (g *group) addReadReplicas(l *Replica, ids ...uint64) {
	g.t.Helper()
	for _, id := range ids {
		g.joiner(id)
		g.down[id] = false
		if err := l.AddReadReplica(g.now, id, "m"+string(rune('0'+id))+":7400"); err != nil {
			g.t.Fatal(err)
		}
		g.run(500 * ms)
	}
}

// checkReadReplica fails unless replica id is a learner of l's group,
// marked a read replica there and at itself.
func (g *group) checkReadReplica(l *Replica, id uint64) {
	g.t.Helper()
	if member, voter := isVoter(l, id); !member || voter {
		g.t.Fatalf("replica %d is member %v voter %v; want a learner", id, member, voter)
	}
	if !l.IsReadReplica(id) || !g.reps[id].ReadReplica() {
		g.t.Fatalf("replica %d: the leader says read replica %v, itself %v; want both", id, l.IsReadReplica(id), g.reps[id].ReadReplica())
	}
}

// TestReadReplicasNeverVote: a group of one voter and two read replicas
// keeps serving Owners and Lookups with the read replicas stopped (they
// count toward no quorum), never promotes them however long they are
// caught up, and loses its quorum when the voter stops: the read replicas
// neither campaign nor go on serving Lookups past StaleBound.
func TestReadReplicasNeverVote(t *testing.T) {
	g := newGroup(t, 1, faults.Set{})
	l := g.runUntilLeader()
	l.cfg.Settings.LearnerTimeout = time.Second
	g.addReadReplicas(l, 2, 3)
	o := g.addOwner("a")
	g.run(3 * time.Second) // past the learner timeout: neither promoted nor removed
	for _, id := range []uint64{2, 3} {
		g.checkReadReplica(l, id)
		if err := g.reps[id].StepSync(g.now, 1, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1}); err != nil {
			t.Fatalf("read replica %d refused a Lookup: %v", id, err)
		}
		g.reps[id].Feed().Ready()
	}
	if !held(o, g.now) {
		t.Fatal("the Owner holds no lease with every replica up")
	}

	// The read replicas stop: the voter alone is the quorum.
	g.down[2], g.down[3] = true, true
	before := l.Stats().Proposals
	g.addOwner("b") // a grant needs a committed entry
	g.run(3 * time.Second)
	if g.leaderOrNil() != l || l.Status().RaftState != raft.StateLeader {
		t.Fatal("the voter lost its lead with the read replicas stopped")
	}
	if l.Stats().Proposals == before || !held(o, g.now) {
		t.Fatal("the voter stopped committing with the read replicas stopped")
	}
	if err := l.StepSync(g.now, 2, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 2}); err != nil {
		t.Fatalf("the voter refused a Lookup with the read replicas stopped: %v", err)
	}

	// The voter stops: no quorum is left, and the read replicas, up and
	// caught up, neither campaign nor serve.
	g.down[2], g.down[3] = false, false
	g.run(time.Second)
	terms := map[uint64]uint64{2: g.reps[2].Status().Term, 3: g.reps[3].Status().Term}
	g.down[1] = true
	g.run(5 * time.Second)
	if r := g.leaderOrNil(); r != nil {
		t.Fatalf("replica %d took over with the only voter stopped", r.ID())
	}
	for _, id := range []uint64{2, 3} {
		r := g.reps[id]
		if st := r.Status(); st.RaftState != raft.StateFollower || st.Term != terms[id] {
			t.Fatalf("read replica %d is a %v at term %d (was %d): it campaigned", id, st.RaftState, st.Term, terms[id])
		}
		var nl *NotLeaderError
		if err := r.StepSync(g.now, 3, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 3}); !errors.As(err, &nl) {
			t.Fatalf("read replica %d served a Lookup with no quorum (err %v)", id, err)
		}
	}
}

// TestReadReplicaNotPromotedByANewLeader: which replicas are read replicas
// is replicated, so a leader that did not add one leaves it a learner too.
func TestReadReplicaNotPromotedByANewLeader(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	l := g.runUntilLeader()
	g.addReadReplicas(l, 4)
	g.down[l.ID()] = true
	g.run(2 * time.Second)
	n := g.leader()
	n.cfg.Settings.LearnerTimeout = time.Second
	g.run(3 * time.Second)
	g.checkReadReplica(n, 4)
}

// TestReadReplicaPromotedOnlyWhenAsked: adding a read replica's ID again
// without the mark (leasehold cluster add without --read-replica) is the
// operator's explicit promotion; adding it again as a read replica changes
// nothing, and a voter cannot be made one.
func TestReadReplicaPromotedOnlyWhenAsked(t *testing.T) {
	g := newGroup(t, 1, faults.Set{})
	l := g.runUntilLeader()
	g.addReadReplicas(l, 2)
	if err := l.AddReadReplica(g.now, 2, "m2:7400"); err != nil {
		t.Fatalf("adding read replica 2 again: %v", err)
	}
	if err := l.AddReadReplica(g.now, 1, "m1:7400"); !errors.Is(err, ErrMember) {
		t.Fatalf("making voter 1 a read replica: %v, want ErrMember", err)
	}
	g.run(2 * time.Second)
	g.checkReadReplica(l, 2)
	if err := l.AddLearner(g.now, 2, "m2:7400"); err != nil {
		t.Fatal(err)
	}
	g.run(2 * time.Second)
	if member, voter := isVoter(l, 2); !member || !voter || l.IsReadReplica(2) {
		t.Fatalf("replica 2 after its promotion: member %v voter %v read replica %v; want a voter", member, voter, l.IsReadReplica(2))
	}
}

// TestReadReplicaHoldsNoReadLease: ReadLease.All makes every voter a holder
// but no read replica, so no write waits for one to append; the voters'
// leases are unaffected by a read replica that stops.
func TestReadReplicaHoldsNoReadLease(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	leases := func(r *Replica) {
		r.cfg.Settings.ReadLease = ReadLease{All: true}
		r.cfg.Settings.SetDefaults()
		r.rl = newReadLeases(r)
	}
	for _, r := range g.reps {
		leases(r)
	}
	l := g.runUntilLeader()
	leases(g.joiner(4)) // every replica is given the same ReadLease
	g.down[4] = false
	if err := l.AddReadReplica(g.now, 4, "m4:7400"); err != nil {
		t.Fatal(err)
	}
	g.run(time.Second)
	g.checkReadReplica(l, 4)
	if g.reps[4].ReadLease(g.now).Holder {
		t.Fatal("read replica 4 is a read-lease holder under ReadLease.All")
	}
	for id := uint64(1); id <= 3; id++ {
		if !g.reps[id].ReadLease(g.now).Holder {
			t.Fatalf("voter %d is no read-lease holder under ReadLease.All", id)
		}
	}
	g.down[4] = true
	o := g.addOwner("a")
	g.run(2 * time.Second)
	if !held(o, g.now) {
		t.Fatal("no grant with read replica 4 stopped: a write waited for it")
	}
}

func held(o interface {
	CheckLeaseNow(time.Time, keyspace.Key) (owner.LeaseNum, bool)
}, now time.Time) bool {
	_, ok := o.CheckLeaseNow(now, keyspace.Key(1))
	return ok
}
