package manager_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// startLeaseCutNet is startCutNet with every replica holding read leases.
func startLeaseCutNet(t *testing.T, tm protocol.Timing) *cutNet {
	t.Helper()
	return startLeaseCutNetWith(t, tm, manager.ReadLease{All: true})
}

// startLeaseCutNetWith is startCutNet with the read leases rl.
func startLeaseCutNetWith(t *testing.T, tm protocol.Timing, rl manager.ReadLease) *cutNet {
	t.Helper()
	n := &cutNet{lis: map[string]*bufconn.Listener{}, srv: map[uint64]*manager.Server{}, healed: make(chan struct{})}
	var peers []manager.Peer
	for id := uint64(1); id <= 3; id++ {
		peers = append(peers, manager.Peer{ID: id, Addr: addrOf(id)})
	}
	for id := uint64(1); id <= 3; id++ {
		srv, err := manager.NewServer(manager.Config{Timing: tm, ReadLease: rl,
			ID: id, Peers: peers, Advertise: addrOf(id), PeerDialOptions: n.dial(addrOf(id)), Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		n.srv[id] = srv
		lis := bufconn.Listen(1 << 20)
		n.mu.Lock()
		n.lis[addrOf(id)] = lis
		n.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis) }()
		n.stopAll = append(n.stopAll, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager %d: %v", id, err)
			}
		})
	}
	return n
}

// TestStatusFromFollowerReadLease cuts a follower holding a read lease off
// from the leader: leasehold status --read-lease and the Holder read still
// answer from the follower alone, with the table the group had, while its
// lease lasts, and are refused (FAILED_PRECONDITION) once it has run out —
// within one lease of the cut.
func TestStatusFromFollowerReadLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		n := startLeaseCutNet(t, tm)
		defer func() {
			n.setCut(nil)
			for _, stop := range n.stopAll {
				stop()
			}
		}()
		ctx := context.Background()
		var lead uint64
		for i := 0; lead == 0; i++ {
			if i == 100 {
				t.Fatal("no leader within 10 s")
			}
			time.Sleep(100 * time.Millisecond)
			lead = n.leader()
		}
		f := lead%3 + 1
		conn, err := grpc.NewClient(addrOf(f), n.dial("client")...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		admin := pb.NewAdminClient(conn)
		ask := func() (*pb.StatusResponse, error) {
			return admin.Status(ctx, &pb.StatusRequest{ReadLease: true})
		}
		var before *pb.StatusResponse
		for i := 0; before == nil; i++ {
			if i == 100 {
				t.Fatalf("follower %d never answered from its read lease: %v", f, err)
			}
			time.Sleep(50 * time.Millisecond)
			before, err = ask()
		}
		if got := before.GetCluster().GetReadLease(); got == nil || !got.GetHolder() {
			t.Errorf("status shows no read lease for follower %d: %v", f, got)
		}

		cutAt := time.Now()
		lf, ll := addrOf(f), addrOf(lead)
		n.setCut(func(from, to string) bool { return (from == lf && to == ll) || (from == ll && to == lf) })
		served, lastServed := 0, time.Duration(0)
		for i := 0; ; i++ {
			if i == 200 {
				t.Fatalf("follower %d still answers from its lease 10 s after it was cut off from the leader", f)
			}
			resp, err := ask()
			if err != nil {
				if status.Code(err) != codes.FailedPrecondition {
					t.Fatalf("refused with %v, want FAILED_PRECONDITION", err)
				}
				break
			}
			if resp.GetNamespaces()[0].GetLsn() != before.GetNamespaces()[0].GetLsn() {
				t.Fatalf("the cut-off follower's table moved from LSN %d to %d", before.GetNamespaces()[0].GetLsn(), resp.GetNamespaces()[0].GetLsn())
			}
			if _, err := admin.Holder(ctx, &pb.HolderRequest{Key: 42}); err != nil && status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("Holder: %v", err)
			}
			served++
			lastServed = time.Since(cutAt)
			time.Sleep(20 * time.Millisecond)
		}
		refusedAt := time.Since(cutAt)
		lease := 10 * min(100*time.Millisecond, tm.Renew/20) // the default: one election timeout
		t.Logf("served %d answers from the lease until %s after the cut; refused at %s (lease %s)", served, lastServed, refusedAt, lease)
		if served == 0 {
			t.Error("the follower answered nothing from its lease after the cut")
		}
		if refusedAt > lease+100*time.Millisecond {
			t.Errorf("refused only %s after the cut, later than one lease (%s)", refusedAt, lease)
		}
		n.setCut(nil)
		for i := 0; ; i++ {
			if i == 100 {
				t.Fatalf("follower %d does not answer from a lease again after the cut healed", f)
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := ask(); err == nil {
				break
			}
		}
	})
}

// TestSyncFromFollowerReadLease cuts a follower holding a read lease off
// from the leader: a Lookup's sync there is still answered, from the
// follower's copy alone, while its lease lasts — also once no ReadIndex
// proof could let it answer (the lease is three election timeouts long) —
// and refused, as a follower that is not serving refuses, once the lease
// has run out.
func TestSyncFromFollowerReadLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		elect := 10 * min(100*time.Millisecond, tm.Renew/20) // ElectionTicks × RaftTick
		lease := 3 * elect
		n := startLeaseCutNetWith(t, tm, manager.ReadLease{All: true, Duration: lease})
		defer func() {
			n.setCut(nil)
			for _, stop := range n.stopAll {
				stop()
			}
		}()
		ctx := context.Background()
		var lead uint64
		for i := 0; lead == 0; i++ {
			if i == 100 {
				t.Fatal("no leader within 10 s")
			}
			time.Sleep(100 * time.Millisecond)
			lead = n.leader()
		}
		f := lead%3 + 1
		conn, err := grpc.NewClient(addrOf(f), n.dial("client")...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		admin, lookups := pb.NewAdminClient(conn), pb.NewLookupsClient(conn)
		sync := func() (*pb.SyncResponse, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := lookups.Sync(ctx)
			if err != nil {
				return nil, err
			}
			_ = st.Send(&pb.SyncRequest{Namespace: "default", Id: 1}) // a refusal shows in Recv
			return st.Recv()
		}
		for i := 0; ; i++ {
			if i == 100 {
				t.Fatalf("follower %d never served from its read lease", f)
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := admin.Status(ctx, &pb.StatusRequest{ReadLease: true}); err == nil {
				break
			}
		}
		before, err := sync()
		if err != nil {
			t.Fatalf("follower %d refused a sync while it held its lease: %v", f, err)
		}

		cutAt := time.Now()
		lf, ll := addrOf(f), addrOf(lead)
		n.setCut(func(from, to string) bool { return (from == lf && to == ll) || (from == ll && to == lf) })
		onLease, lastServed := 0, time.Duration(0)
		for i := 0; ; i++ {
			if i == 200 {
				t.Fatalf("follower %d still answers syncs 4 s after it was cut off from the leader", f)
			}
			resp, err := sync()
			if err != nil {
				if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not the leader") {
					t.Fatalf("refused with %v, want UNAVAILABLE, not the leader", err)
				}
				break
			}
			if resp.GetUpdate().GetTo() != before.GetUpdate().GetTo() {
				t.Fatalf("the cut-off follower's table moved from LSN %d to %d", before.GetUpdate().GetTo(), resp.GetUpdate().GetTo())
			}
			lastServed = time.Since(cutAt)
			if lastServed > elect+50*time.Millisecond {
				onLease++ // no ReadIndex proof from before the cut is young enough
			}
			time.Sleep(20 * time.Millisecond)
		}
		refusedAt := time.Since(cutAt)
		t.Logf("answered syncs until %s after the cut (%d past an election timeout %s); refused at %s (lease %s)", lastServed, onLease, elect, refusedAt, lease)
		if onLease == 0 {
			t.Error("no sync answered on the lease alone after the cut")
		}
		if refusedAt > lease+100*time.Millisecond {
			t.Errorf("refused only %s after the cut, later than one lease (%s)", refusedAt, lease)
		}
	})
}
