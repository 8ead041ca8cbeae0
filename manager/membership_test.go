package manager_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// addUnreachable asks the Manager at target (dialled with dial) to add
// replicas 7 and 8, one after the other, at an address where nothing
// listens: each add must fail with
// FailedPrecondition saying the replica never answered, and an Owner
// that held key 0 before must hold it with the same lease number for three
// owner leases after, so the group kept a leader that grants and renews.
func addUnreachable(t *testing.T, tm protocol.Timing, target string, dial []grpc.DialOption, managers string, leader func() uint64) {
	ctx := context.Background()
	o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{Manager: managers, DialOptions: dial, Timing: tm}, ID: "a", Addr: "a:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(ctx)
	time.Sleep(time.Second + tm.ManagerLease + 2*tm.Renew)
	synctest.Wait()
	before, ok := o.CheckLeaseNow(0)
	if !ok {
		t.Fatal("the owner holds no lease before the adds")
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, id := range []uint64{7, 8} {
		_, err = pb.NewAdminClient(conn).AddPeer(ctx, &pb.AddPeerRequest{Id: id, Addr: "127.0.0.1:1", ClientAddr: "127.0.0.1:1"})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "never answered") {
			t.Fatalf("adding an unreachable replica: %v, want FailedPrecondition saying it never answered", err)
		}
	}
	for range 3 {
		time.Sleep(tm.OwnerLease)
		synctest.Wait()
		if leader() == 0 {
			t.Fatal("no leader after adding an unreachable replica")
		}
		if num, ok := o.CheckLeaseNow(keyspace.Key(0)); !ok || num != before {
			t.Fatalf("after adding an unreachable replica the owner holds key 0 as %+v %v, before %+v", num, ok, before)
		}
	}
}

// TestAddUnreachableKeepsOneReplicaServing: a group of one that is asked to
// add a replica nobody runs keeps serving: the newcomer is a learner, never
// promoted, and removed again after the learner timeout.
func TestAddUnreachableKeepsOneReplicaServing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		nowhere := []grpc.DialOption{
			grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, errors.New("connection refused") }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
		c := startManager(t, manager.Config{Insecure: true, Timing: tm, LearnerTimeout: 3 * time.Second,
			PeerDialOptions: nowhere})
		defer c.stop(t)
		addUnreachable(t, tm, "passthrough:///bufnet", c.dial(), "passthrough:///bufnet", func() uint64 {
			if s := c.srv.Snapshot().Cluster; s.Role == "leader" && len(s.Peers) == 1 {
				return s.ID
			}
			return 0
		})
	})
}

// TestAddUnreachableKeepsThreeReplicasServing: the same for a group of
// three.
func TestAddUnreachableKeepsThreeReplicasServing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		n := &net3{lis: map[string]*bufconn.Listener{}, stop: map[uint64]func(){}, srv: map[uint64]*manager.Server{},
			dirs: map[uint64]string{}, learnerTimeout: 3 * time.Second}
		for id := uint64(1); id <= 3; id++ {
			n.dirs[id] = t.TempDir()
			n.start(t, id, tm)
		}
		defer func() {
			for _, stop := range n.stop {
				stop()
			}
		}()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		lead := n.leader()
		if lead == 0 {
			t.Fatal("no leader")
		}
		addUnreachable(t, tm, "passthrough:///m"+string(rune('0'+lead)), n.dial(),
			"passthrough:///m1,passthrough:///m2,passthrough:///m3", n.leader)
	})
}

// TestChangesThatCostQuorumAreRefused: with one of three replicas down,
// adding a fourth (which would need three of four voters) and removing a
// live follower (which would need both of the two left) are refused with
// FailedPrecondition naming the unreachable replica, and the group keeps
// its leader.
func TestChangesThatCostQuorumAreRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		n := &net3{lis: map[string]*bufconn.Listener{}, stop: map[uint64]func(){}, srv: map[uint64]*manager.Server{},
			dirs: map[uint64]string{}, learnerTimeout: 3 * time.Second}
		for id := uint64(1); id <= 3; id++ {
			n.dirs[id] = t.TempDir()
			n.start(t, id, tm)
		}
		defer func() {
			for _, stop := range n.stop {
				stop()
			}
		}()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		lead := n.leader()
		if lead == 0 {
			t.Fatal("no leader")
		}
		var down, live uint64
		for id := uint64(1); id <= 3; id++ {
			if id != lead && down == 0 {
				down = id
			} else if id != lead {
				live = id
			}
		}
		n.stop[down]()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///m%d", lead), n.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		admin := pb.NewAdminClient(conn)
		ctx := context.Background()
		want := fmt.Sprintf("replica %d unreachable", down)
		_, err = admin.AddPeer(ctx, &pb.AddPeerRequest{Id: 7, Addr: "127.0.0.1:1", ClientAddr: "127.0.0.1:1"})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
			t.Fatalf("adding a replica with replica %d down: %v, want FailedPrecondition saying %q", down, err, want)
		}
		_, err = admin.RemovePeer(ctx, &pb.RemovePeerRequest{Id: live})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
			t.Fatalf("removing replica %d with replica %d down: %v, want FailedPrecondition saying %q", live, down, err, want)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if l := n.leader(); l != lead {
			t.Fatalf("leader %d after the refused changes, want %d", l, lead)
		}
		if peers := n.srv[lead].Snapshot().Cluster.Peers; len(peers) != 3 {
			t.Fatalf("the group has %d members after the refused changes, want 3", len(peers))
		}
		// The removal of the replica that is down leaves two of two live.
		if _, err := admin.RemovePeer(ctx, &pb.RemovePeerRequest{Id: down}); err != nil {
			t.Fatalf("removing the replica that is down: %v", err)
		}
	})
}

// TestRaftMessageFromStrangerIsDropped: a heartbeat from "replica 99", no
// member of the group, with a higher term arrives over the Raft service and
// does not depose the leader.
func TestRaftMessageFromStrangerIsDropped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm})
		defer c.stop(t)
		time.Sleep(time.Second)
		synctest.Wait()
		before := c.srv.Snapshot().Cluster
		if before.Role != "leader" {
			t.Fatalf("the replica is a %s, want the leader", before.Role)
		}
		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := pb.NewRaftClient(conn).Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := raftpb.Message{Type: raftpb.MsgHeartbeat, From: 99, To: before.ID, Term: before.Term + 100}
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.RaftMessage{Message: b}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if after := c.srv.Snapshot().Cluster; after.Role != "leader" || after.Term != before.Term {
			t.Fatalf("after a heartbeat from replica 99 at term %d the replica is a %s at term %d, want the leader at term %d",
				m.Term, after.Role, after.Term, before.Term)
		}
		cancel()
	})
}

// TestAddPeerChangesAVotersAddress: AddPeer for a voter changes its
// address (as the API documents) without a learner phase: the group of one
// keeps leading.
func TestAddPeerChangesAVotersAddress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startManager(t, manager.Config{Insecure: true, Timing: protocol.Fast()})
		defer c.stop(t)
		time.Sleep(time.Second)
		synctest.Wait()
		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := pb.NewAdminClient(conn).AddPeer(context.Background(), &pb.AddPeerRequest{Id: 1, Addr: "127.0.0.1:9", ClientAddr: "127.0.0.1:9"})
		if err != nil {
			t.Fatalf("changing replica 1's address: %v", err)
		}
		if p := resp.GetCluster().GetPeers(); len(p) != 1 || p[0].GetAddr() != "127.0.0.1:9" || !p[0].GetVoter() {
			t.Fatalf("after the change the group is %v", p)
		}
		if s := c.srv.Snapshot().Cluster; s.Role != "leader" {
			t.Fatalf("after changing its address replica 1 is a %s", s.Role)
		}
	})
}
