package manager_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// net3 is three Manager replicas on in-memory listeners named m1, m2, m3.
type net3 struct {
	mu   sync.Mutex
	lis  map[string]*bufconn.Listener
	stop map[uint64]func()
	srv  map[uint64]*manager.Server
	dirs map[uint64]string
	// learnerTimeout, if set, is every replica's LearnerTimeout.
	learnerTimeout time.Duration
}

func (n *net3) dial() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			n.mu.Lock()
			l := n.lis["passthrough:///"+strings.TrimPrefix(addr, "passthrough:///")]
			n.mu.Unlock()
			if l == nil {
				return nil, fmt.Errorf("no listener %q", addr)
			}
			return l.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
}

func (n *net3) start(t *testing.T, id uint64, tm protocol.Timing) {
	t.Helper()
	var peers []manager.Peer
	for i := uint64(1); i <= 3; i++ {
		peers = append(peers, manager.Peer{ID: i, Addr: fmt.Sprintf("passthrough:///m%d", i)})
	}
	addr := fmt.Sprintf("passthrough:///m%d", id)
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: tm, LearnerTimeout: n.learnerTimeout, ID: id, Peers: peers, Advertise: addr,
		DataDir: n.dirs[id], PeerDialOptions: n.dial()})
	if err != nil {
		t.Fatal(err)
	}
	n.srv[id] = srv
	lis := bufconn.Listen(1 << 20)
	n.mu.Lock()
	n.lis[addr] = lis
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	n.stop[id] = func() {
		n.mu.Lock()
		delete(n.lis, addr)
		n.mu.Unlock()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager %d: %v", id, err)
		}
		delete(n.stop, id)
	}
}

// leader returns the replica that leads, 0 if none does.
func (n *net3) leader() uint64 {
	for id, srv := range n.srv {
		if n.stop[id] != nil && srv.Snapshot().Cluster.Role == "leader" {
			return id
		}
	}
	return 0
}

// TestFailoverKeepsLeases runs three Manager replicas, an Owner and a
// Lookup over gRPC in virtual time, stops the leader twice (restarting it
// from its data directory each time), and then all three at once: the
// Owner keeps every lease with the same LGN, and the Lookup reports no loss.
func TestFailoverKeepsLeases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Fast timings with leases long enough that all three replicas
		// can be restarted within one (2 s is shorter than a reconnection
		// backoff after every replica refused).
		tm := protocol.Fast()
		tm.OwnerLease, tm.Renew, tm.ManagerLease = 6*time.Second, time.Second, 6600*time.Millisecond
		tm.SyncTimeout, tm.LogRetention = 7*time.Second, 30*time.Second
		n := &net3{lis: map[string]*bufconn.Listener{}, stop: map[uint64]func(){}, srv: map[uint64]*manager.Server{}, dirs: map[uint64]string{}}
		for id := uint64(1); id <= 3; id++ {
			n.dirs[id] = t.TempDir()
			n.start(t, id, tm)
		}
		defer func() {
			for _, stop := range n.stop {
				stop()
			}
		}()
		ctx := context.Background()
		managers := "passthrough:///m1,passthrough:///m2,passthrough:///m3"
		var mu sync.Mutex
		var losses []lookup.Loss
		l, err := lookup.New(ctx, lookup.Config{
			Connection: leasehold.Connection{Manager: managers, DialOptions: n.dial(), Timing: tm},
			OnLoss:     func(loss lookup.Loss) { mu.Lock(); losses = append(losses, loss); mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{Manager: managers, DialOptions: n.dial(), Timing: tm}, ID: "a", Addr: "a:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(ctx)
		time.Sleep(time.Second + tm.ManagerLease + 2*tm.Renew)
		synctest.Wait()
		keys := []keyspace.Key{0, 1 << 62, 1 << 63, ^keyspace.Key(0)}
		held := map[keyspace.Key]owner.LeaseNum{}
		for _, k := range keys {
			num, ok := o.CheckLeaseNow(k)
			if !ok {
				t.Fatalf("before any failover the owner does not hold key %x", k)
			}
			held[k] = num
		}
		check := func(when string) {
			t.Helper()
			for _, k := range keys {
				num, ok := o.CheckLeaseNow(k)
				if !ok || num != held[k] {
					t.Fatalf("%s: key %x held as %+v %v, before %+v", when, k, num, ok, held[k])
				}
				if r, ok := l.Lookup(k); !ok || r.LGN != num.LGN {
					t.Fatalf("%s: key %x routes to %+v %v", when, k, r, ok)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(losses) != 0 {
				t.Fatalf("%s: the lookup reported losses %+v", when, losses)
			}
		}
		check("before any failover")

		for round := 1; round <= 2; round++ {
			old := n.leader()
			if old == 0 {
				t.Fatalf("round %d: no leader", round)
			}
			n.stop[old]()
			stopped := time.Now()
			for n.leader() == 0 && time.Since(stopped) < 10*time.Second {
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("round %d: leader %d %v after leader %d stopped", round, n.leader(), time.Since(stopped), old)
			time.Sleep(time.Second)
			synctest.Wait()
			check(fmt.Sprintf("after stopping leader %d", old))
			n.start(t, old, tm)
			time.Sleep(time.Second)
			synctest.Wait()
			if role := n.srv[old].Snapshot().Cluster.Role; role != "follower" {
				t.Fatalf("round %d: restarted manager %d is a %s, want a follower", round, old, role)
			}
			check(fmt.Sprintf("after restarting manager %d", old))
		}

		// All three stop, and start again from their data directories
		// within an owner lease.
		for id := uint64(1); id <= 3; id++ {
			n.stop[id]()
		}
		time.Sleep(tm.Renew)
		for id := uint64(1); id <= 3; id++ {
			n.start(t, id, tm)
		}
		time.Sleep(2 * tm.OwnerLease)
		synctest.Wait()
		check("after restarting all three")
	})
}

// TestRestartKeepsLeases: a Manager of one replica restarted from its data
// directory within an owner lease resumes its table: the Owner keeps its
// leases with the same numbers and the Lookup reports no loss. Without a
// data directory the same restart loses them (TestClientsReconnectToRestartedManager).
func TestRestartKeepsLeases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		dir := t.TempDir()
		var cur atomic.Pointer[cluster]
		dial := []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return cur.Load().lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
		cur.Store(startManager(t, manager.Config{Insecure: true, Timing: tm, DataDir: dir}))
		ctx := context.Background()
		var mu sync.Mutex
		var losses []lookup.Loss
		l, err := lookup.New(ctx, lookup.Config{
			Connection: leasehold.Connection{
				Manager:     "passthrough:///bufnet",
				DialOptions: dial,
				Timing:      tm,
			},
			OnLoss: func(loss lookup.Loss) { mu.Lock(); losses = append(losses, loss); mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: dial,
			Timing:      tm,
		}, ID: "a", Addr: "a:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(ctx)
		time.Sleep(tm.ManagerLease + 2*tm.Renew)
		synctest.Wait()
		k := keyspace.KeyOf("alice")
		before, ok := o.CheckLeaseNow(k)
		if !ok {
			t.Fatal("no lease before the restart")
		}
		cur.Load().stop(t)
		time.Sleep(tm.Renew / 2)
		cur.Store(startManager(t, manager.Config{Insecure: true, Timing: tm, DataDir: dir}))
		defer func() { cur.Load().stop(t) }()
		time.Sleep(2 * tm.OwnerLease)
		synctest.Wait()
		if after, ok := o.CheckLeaseNow(k); !ok || after != before || !o.CheckLeaseContinuous(k, before) {
			t.Fatalf("after the restart the owner holds %+v %v, before %+v", after, ok, before)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(losses) != 0 {
			t.Fatalf("the lookup reported losses across a restart from the data directory: %+v", losses)
		}
	})
}
