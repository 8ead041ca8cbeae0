package manager_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestCloseDrainsWithHandover runs a Manager, two Owners whose application
// hands state over, and a Lookup in virtual time. Closing one Owner moves
// every range it held to the other, marked migrated: the Lookup reports no
// loss, and the other Owner was told which grants carry state. The request
// counts of CheckLeaseNow reach the Manager's status.
func TestCloseDrainsWithHandover(t *testing.T) {
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
		var migrated atomic.Int64 // ranges granted to b with state
		var handedOver atomic.Int64
		for _, id := range []string{"a", "b"} {
			var o *owner.Owner
			cfg := owner.Config{
				Connection: leasehold.Connection{
					Manager:     "passthrough:///bufnet",
					DialOptions: c.dial(),
					Timing:      tm,
				},
				ID:        id,
				Addr:      id + ":1",
				Handovers: true,
				OnChange: func(ch owner.OwnershipChange) {
					for _, h := range ch.Handovers {
						handedOver.Add(1)
						o.HandoverDone(h, true) // the application copied the state to h.Addr
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
		time.Sleep(tm.ManagerLease + 3*tm.Renew)
		synctest.Wait()
		for i := range 1000 { // 1000 requests a second for a second
			k := keyspace.Key(uint64(i) * (1 << 54))
			owners["a"].CheckLeaseNow(k)
			owners["b"].CheckLeaseNow(k)
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		var load float64
		for _, o := range c.srv.Snapshot().Namespaces[0].Owners {
			load += o.Load
		}
		if load <= 0 {
			t.Fatalf("the Manager saw no load from 2000 CheckLeaseNow calls: %+v", c.srv.Snapshot().Namespaces[0].Owners)
		}
		mu.Lock()
		losses = nil
		mu.Unlock()

		if err := owners["a"].Close(ctx); err != nil {
			t.Fatal(err)
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
		if handedOver.Load() == 0 || migrated.Load() == 0 {
			t.Fatalf("%d handovers asked, %d migrated grants to b; want both", handedOver.Load(), migrated.Load())
		}
		mu.Lock()
		lost := losses
		mu.Unlock()
		if len(lost) != 0 {
			t.Fatalf("a drain with every range handed over made the lookup report %+v", lost)
		}
		if err := owners["b"].Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
