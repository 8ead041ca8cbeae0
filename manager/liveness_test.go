package manager_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
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

// cutNet is three Manager replicas on in-memory listeners whose
// connections can be cut without closing them: a cut connection holds
// what is written to it and delivers nothing, as a stopped process or a
// proxy that stopped forwarding does, until it is restored.
type cutNet struct {
	mu      sync.Mutex
	lis     map[string]*bufconn.Listener
	cut     func(from, to string) bool // guarded by mu
	healed  chan struct{}              // closed and replaced at each change; guarded by mu
	srv     map[uint64]*manager.Server
	stopAll []func()
}

func addrOf(id uint64) string { return fmt.Sprintf("passthrough:///m%d", id) }

// dial returns the dial options of from, a replica's address or "client".
func (n *cutNet) dial(from string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			to := "passthrough:///" + strings.TrimPrefix(addr, "passthrough:///")
			n.mu.Lock()
			l := n.lis[to]
			n.mu.Unlock()
			if l == nil {
				return nil, fmt.Errorf("no listener %q", addr)
			}
			c, err := l.DialContext(ctx)
			if err != nil {
				return nil, err
			}
			return &cutConn{Conn: c, n: n, from: from, to: to, closed: make(chan struct{})}, nil
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
}

// setCut makes f decide which connections are cut, from now on, for
// connections open and new; nil restores every one.
func (n *cutNet) setCut(f func(from, to string) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = f
	close(n.healed)
	n.healed = make(chan struct{})
}

// hold blocks while the connection from → to is cut, until it is restored
// or closed; it reports false if closed.
func (n *cutNet) hold(c *cutConn) bool {
	for {
		n.mu.Lock()
		cut := n.cut != nil && n.cut(c.from, c.to)
		healed := n.healed
		n.mu.Unlock()
		if !cut {
			return true
		}
		select {
		case <-healed:
		case <-c.closed:
			return false
		}
	}
}

// cutConn is one client connection (the dialling side); holding it there
// stalls both directions.
type cutConn struct {
	net.Conn
	n        *cutNet
	from, to string
	once     sync.Once
	closed   chan struct{}
}

func (c *cutConn) Read(b []byte) (int, error) {
	if !c.n.hold(c) {
		return 0, net.ErrClosed
	}
	k, err := c.Conn.Read(b)
	if k > 0 && !c.n.hold(c) { // arrived while cut: delivered once restored
		return 0, net.ErrClosed
	}
	return k, err
}

func (c *cutConn) Write(b []byte) (int, error) {
	if !c.n.hold(c) {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

func (c *cutConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func startCutNet(t *testing.T, tm protocol.Timing) *cutNet {
	t.Helper()
	n := &cutNet{lis: map[string]*bufconn.Listener{}, srv: map[uint64]*manager.Server{}, healed: make(chan struct{})}
	var peers []manager.Peer
	for id := uint64(1); id <= 3; id++ {
		peers = append(peers, manager.Peer{ID: id, Addr: addrOf(id)})
	}
	for id := uint64(1); id <= 3; id++ {
		srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: tm, ID: id, Peers: peers, Advertise: addrOf(id),
			PeerDialOptions: n.dial(addrOf(id))})
		if err != nil {
			t.Fatal(err)
		}
		n.srv[id] = srv
		lis := bufconn.Listen(1 << 20)
		n.mu.Lock() // the replicas started already dial it
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

func (n *cutNet) leader() uint64 {
	for id, srv := range n.srv {
		if srv.Snapshot().Cluster.Role == "leader" {
			return id
		}
	}
	return 0
}

// TestLeaderCutOffKeepsLeases runs three replicas, an Owner and a Lookup
// in virtual time with fast timings (2-s owner leases) and cuts the
// leader's connections without closing them, for far longer than a lease:
//
//   - stalled: every connection to and from the leader, as a SIGSTOP or a
//     long pause does. The others elect a new leader; the Owner's request
//     goes unanswered, it leaves the old leader after the answer wait and
//     renews with the new one.
//   - cut off from the clients: only the Owner's and the Lookup's
//     connections to the leader, which keeps its quorum, so no election
//     comes. The followers name the leader the Owner cannot reach; it asks
//     one to relay its stream, and renews through it.
//
// In the stalled case a follower may be asked to relay too, when the
// Owner's answer wait runs out before the election ends (the election's
// timeouts are random); that relay gets no answer either, and the Owner
// moves to the new leader. So only the second case must relay.
//
// Either way the Owner holds every key under the same lease throughout,
// checked every 50 ms, and the Lookup reports no loss.
func TestLeaderCutOffKeepsLeases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		cutOff    func(leader string) func(from, to string) bool
		mustRelay bool
	}{
		{"stalled", func(l string) func(from, to string) bool {
			return func(from, to string) bool { return from == l || to == l }
		}, false},
		{"cut off from the clients", func(l string) func(from, to string) bool {
			return func(from, to string) bool { return from == "client" && to == l }
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := protocol.Fast()
				n := startCutNet(t, tm)
				defer func() {
					n.setCut(nil)
					for _, stop := range n.stopAll {
						stop()
					}
				}()
				ctx := context.Background()
				managers := addrOf(1) + "," + addrOf(2) + "," + addrOf(3)
				var mu sync.Mutex
				var losses []lookup.Loss
				l, err := lookup.New(ctx, lookup.Config{
					Connection: leasehold.Connection{Manager: managers, DialOptions: n.dial("client"), Timing: tm},
					OnLoss:     func(loss lookup.Loss) { mu.Lock(); losses = append(losses, loss); mu.Unlock() },
				})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{Manager: managers, DialOptions: n.dial("client"), Timing: tm}, ID: "a", Addr: "a:1"})
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
						t.Fatalf("before the cut the owner does not hold key %x", k)
					}
					held[k] = num
				}
				old := n.leader()
				if old == 0 {
					t.Fatal("no leader")
				}
				n.setCut(tc.cutOff(addrOf(old)))
				cutAt := time.Now()
				relays := int64(0)
				for range int(10 * time.Second / (50 * time.Millisecond)) {
					time.Sleep(50 * time.Millisecond)
					for _, k := range keys {
						if !o.CheckLeaseContinuous(k, held[k]) {
							t.Fatalf("%s after the cut the owner lost key %x (leader %d, was %d)",
								time.Since(cutAt), k, n.leader(), old)
						}
					}
					for id, srv := range n.srv {
						if id != old {
							relays = max(relays, srv.Relays())
						}
					}
				}
				if tc.mustRelay && relays == 0 {
					t.Errorf("no follower relayed the owner's stream to the leader it could not reach")
				}
				if now := n.leader(); tc.mustRelay && now != old {
					t.Errorf("leader %d, was %d: the cut should not have cost the leader its quorum", now, old)
				}
				n.setCut(nil)
				time.Sleep(2 * tm.OwnerLease)
				synctest.Wait()
				for _, k := range keys {
					if !o.CheckLeaseContinuous(k, held[k]) {
						t.Fatalf("after the cut healed the owner lost key %x", k)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(losses) != 0 {
					t.Fatalf("the lookup reported losses: %+v", losses)
				}
			})
		})
	}
}
