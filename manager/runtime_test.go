package manager_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestMain lets the subtests that wait on the fast timings' leases wait side
// by side (internal/testwait).
func TestMain(m *testing.M) {
	testwait.Parallel()
	goleak.VerifyTestMain(m)
}

// cluster is a Manager served over an in-memory listener.
type cluster struct {
	lis    *bufconn.Listener
	cancel context.CancelFunc
	done   chan error
	srv    *manager.Server
}

func startManager(t *testing.T, cfg manager.Config) *cluster {
	t.Helper()
	srv, err := manager.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{lis: bufconn.Listen(1 << 20), done: make(chan error, 1), srv: srv}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- srv.Serve(ctx, c.lis) }()
	return c
}

func (c *cluster) stop(t *testing.T) {
	c.cancel()
	if err := <-c.done; err != nil {
		t.Errorf("manager: %v", err)
	}
}

func (c *cluster) dial() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return c.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
}

// TestRuntimesGrantRouteAndNotify runs a Manager, two Owners and a Lookup
// over gRPC in virtual time: the owners get the whole key space between
// them, the Lookup routes every key to the owner that holds it, and when
// one owner leaves its ranges move to the other with loss notifications.
func TestRuntimesGrantRouteAndNotify(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm})
		defer c.stop(t)
		ctx := context.Background()

		var mu sync.Mutex
		var losses []lookup.Loss
		l, err := lookup.New(ctx, lookup.Config{
			Connection: leasehold.Connection{
				Manager:     "passthrough:///bufnet",
				DialOptions: c.dial(),
				Timing:      tm,
			},
			OnLoss: func(loss lookup.Loss) { mu.Lock(); losses = append(losses, loss); mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		owners := map[string]*owner.Owner{}
		for _, id := range []string{"a", "b"} {
			o, err := owner.New(ctx, owner.Config{
				Connection: leasehold.Connection{
					Manager:     "passthrough:///bufnet",
					DialOptions: c.dial(),
					Timing:      tm,
				},
				ID:   id,
				Addr: id + ":1",
			})
			if err != nil {
				t.Fatal(err)
			}
			owners[id] = o
		}
		// A new Manager reserves everything for one ManagerLease, then grants.
		time.Sleep(tm.ManagerLease + 2*tm.Renew)
		synctest.Wait()

		keys := make([]keyspace.Key, 200)
		for i := range keys {
			keys[i] = keyspace.KeyOf(string(rune('a'+i%26)) + string(rune(i)))
		}
		for _, k := range keys {
			route, ok := l.Lookup(k)
			if !ok {
				t.Fatalf("key %x has no route", k)
			}
			holder := owners[route.Owner]
			if holder == nil || route.Addr != route.Owner+":1" {
				t.Fatalf("key %x routed to %+v", k, route)
			}
			n, ok := holder.CheckLeaseNow(k)
			if !ok || n.LGN != route.LGN {
				t.Fatalf("key %x: lookup says %+v, owner %s holds %+v %v", k, route, route.Owner, n, ok)
			}
			for id, o := range owners {
				if _, ok := o.CheckLeaseNow(k); ok && id != route.Owner {
					t.Fatalf("key %x held by both %s and %s", k, id, route.Owner)
				}
			}
		}

		// b leaves: its ranges go to a, and the Lookup reports them lost.
		if err := owners["b"].Close(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * tm.Renew)
		synctest.Wait()
		for _, k := range keys {
			if route, ok := l.Lookup(k); !ok || route.Owner != "a" {
				t.Fatalf("after b left, key %x routes to %+v %v", k, route, ok)
			}
			if _, ok := owners["a"].CheckLeaseNow(k); !ok {
				t.Fatalf("after b left, a does not hold key %x", k)
			}
		}
		mu.Lock()
		n := len(losses)
		mu.Unlock()
		if n == 0 {
			t.Fatal("no loss notification after an owner left without migrating")
		}
		if err := owners["a"].Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClientsReconnectToRestartedManager stops the Manager and starts a new
// one (a new epoch, no state) at the same address: the Owner and the Lookup
// reconnect on their own, the Lookup reports every range lost (the old
// Manager's leases died with it), and the Owner holds leases of the new
// epoch.
func TestClientsReconnectToRestartedManager(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		var cur atomic.Pointer[cluster]
		dial := []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return cur.Load().lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
		cur.Store(startManager(t, manager.Config{Insecure: true, Timing: tm}))
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
			t.Fatal("no lease from the first manager")
		}

		cur.Load().stop(t)
		cur.Store(startManager(t, manager.Config{Insecure: true, Timing: tm}))
		defer func() { cur.Load().stop(t) }()
		time.Sleep(2*tm.ManagerLease + 4*tm.Renew)
		synctest.Wait()

		after, ok := o.CheckLeaseNow(k)
		if !ok || after.Epoch == before.Epoch {
			t.Fatalf("after the manager restarted, the owner holds %+v %v (before: %+v)", after, ok, before)
		}
		if r, ok := l.Lookup(k); !ok || r.Epoch != after.Epoch || r.LGN != after.LGN {
			t.Fatalf("lookup routes %+v %v, owner holds %+v", r, ok, after)
		}
		mu.Lock()
		defer mu.Unlock()
		lost := keyspace.RangeSet{}
		for _, loss := range losses {
			lost = lost.Union(keyspace.NewRangeSet(loss.Ranges...))
		}
		if !lost.Contains(k) {
			t.Fatalf("the lookup did not report alice's range lost when the manager lost its state: %v", losses)
		}
	})
}
