package manager_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/peers"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestDrainMovesFromAQuietStream: an Owner whose stream to the Manager goes
// half-open (a proxy stops forwarding it and passes on no close) just as it
// starts to drain reaches the Manager again by another stream, every
// request of which says Draining, and later Handed and Leaving. The
// Manager takes them once the old stream has been quiet for
// Timing.OwnerQuiet, so the drain completes on the new stream well within a
// lease: every range moves to the other Owner with its state, and the
// Lookup reports no loss. The Manager's keepalive then ends the half-open
// connection within peers.KeepaliveServerTime + KeepaliveServerTimeout.
//
// Before, a drain, a handover or a leave was accepted only from the bound
// stream for as long as it stayed open, which with no pings of the
// Manager's own was 2 hours: the drain was refused until the Owner gave up
// on it, and its ranges were lost.
func TestDrainMovesFromAQuietStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm})
		defer c.stop(t)
		ctx := context.Background()
		path := &cutPath{lis: c.lis, ended: make(chan struct{})}
		dial := []grpc.DialOption{grpc.WithContextDialer(path.dial), grpc.WithTransportCredentials(insecure.NewCredentials())}

		var mu sync.Mutex
		var losses []lookup.Loss
		l, err := lookup.New(ctx, lookup.Config{
			Connection: leasehold.Connection{
				Manager:     "passthrough:///direct",
				DialOptions: dial,
				Timing:      tm,
			},
			OnLoss: func(loss lookup.Loss) { mu.Lock(); losses = append(losses, loss); mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var migrated atomic.Int64 // ranges granted to b with state
		owners := map[string]*owner.Owner{}
		// a reaches the Manager first by the path that is cut, then by
		// another, as an Owner cut off from the leader does by a
		// follower's relay: to the leader, either is a stream like any other.
		for id, managers := range map[string]string{"a": "passthrough:///cut,passthrough:///direct", "b": "passthrough:///direct"} {
			var o *owner.Owner
			cfg := owner.Config{
				Connection: leasehold.Connection{Manager: managers, DialOptions: dial, Timing: tm},
				ID:         id,
				Addr:       id + ":1",
				Handovers:  true,
				OnChange: func(ch owner.OwnershipChange) {
					for _, h := range ch.Handovers {
						o.HandoverDone(h, true)
					}
					for _, g := range ch.Granted {
						if g.Migrated && id == "b" {
							migrated.Add(1)
						}
					}
				},
			}
			if o, err = owner.New(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			owners[id] = o
		}
		defer owners["b"].Close(ctx)
		time.Sleep(tm.ManagerLease + 3*tm.Renew)
		synctest.Wait()
		if len(owners["a"].Held()) == 0 || len(owners["b"].Held()) == 0 {
			t.Fatalf("a holds %d leases and b %d; want both some", len(owners["a"].Held()), len(owners["b"].Held()))
		}

		path.setCut()
		cutAt := time.Now()
		if err := owners["a"].Close(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(cutAt)
		t.Logf("a drained and left %s after its stream was cut (OwnerQuiet %s, OwnerLease %s)", took, tm.OwnerQuiet(), tm.OwnerLease)
		if took > tm.OwnerLease {
			t.Errorf("a's drain and leave took %s after its stream was cut, want it within a lease (%s)", took, tm.OwnerLease)
		}
		time.Sleep(2 * tm.Renew)
		synctest.Wait()
		for i := range 64 {
			k := keyspace.Key(uint64(i) << 58)
			if _, ok := owners["b"].CheckLeaseNow(k); !ok {
				t.Fatalf("after a drained, b does not hold key %x", k)
			}
			if r, ok := l.Lookup(k); !ok || r.Owner != "b" {
				t.Fatalf("after a drained, key %x routes to %+v %v", k, r, ok)
			}
		}
		if migrated.Load() == 0 {
			t.Error("no range was granted to b with its state")
		}
		mu.Lock()
		lost := losses
		mu.Unlock()
		if len(lost) != 0 {
			t.Errorf("a drain around a half-open stream made the Lookup report %d losses, the first %+v", len(lost), lost[0])
		}

		bound := peers.KeepaliveServerTime + peers.KeepaliveServerTimeout + time.Second
		select {
		case <-path.ended:
			t.Logf("the Manager closed the half-open connection %s after the cut", time.Since(cutAt))
		case <-time.After(bound - time.Since(cutAt)):
			t.Errorf("the Manager had not closed the half-open connection %s after the cut", bound)
		}
	})
}

// cutPath carries connections to the Manager at lis. Those dialled for the
// address "cut" go through a pipe that, once cut, delivers nothing either
// way and passes on no close: a proxy that stopped forwarding, or a host
// that died, leaves a connection so, open at the Manager and silent. ended
// is closed when the Manager ends such a connection.
type cutPath struct {
	lis   *bufconn.Listener
	ended chan struct{}
	once  sync.Once
	cut   atomic.Bool
}

func (p *cutPath) setCut() { p.cut.Store(true) }

func (p *cutPath) dial(ctx context.Context, addr string) (net.Conn, error) {
	up, err := p.lis.DialContext(ctx)
	if err != nil || addr != "cut" {
		return up, err
	}
	client, mid := net.Pipe()
	go p.pipe(up, mid, false)
	go p.pipe(mid, up, true)
	return client, nil
}

// pipe copies src to dst until either ends, and then closes both, unless
// the path is cut: then it reads and drops, and when src ends it closes
// nothing more, so the other side never learns.
func (p *cutPath) pipe(dst, src net.Conn, fromManager bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		cut := p.cut.Load()
		if n > 0 && !cut {
			if _, werr := dst.Write(buf[:n]); werr != nil && !p.cut.Load() {
				src.Close()
				return
			}
		}
		if err != nil {
			if !cut {
				dst.Close()
			} else if fromManager {
				p.once.Do(func() { close(p.ended) })
			}
			return
		}
	}
}
