package manager_test

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestHeartbeatsSparePolls runs a Manager, an Owner and a Lookup over real
// gRPC streams in virtual time. Once the table is still, the Manager's
// heartbeats keep the Lookup's copy younger than Sync, and over a virtual
// minute the Lookup polls at most a fifth as often as once a Sync.
func TestHeartbeatsSparePolls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: tm, Epoch: 3})
		if err != nil {
			t.Fatal(err)
		}
		lis := bufconn.Listen(1 << 20)
		dial := []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ctx, lis) }()
		l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: dial,
			Timing:      tm,
		}})
		if err != nil {
			t.Fatal(err)
		}
		o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: dial,
			Timing:      tm,
		}, ID: "a", Addr: "a:1"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(tm.ManagerLease + 4*tm.Renew) // granted, and pushed
		synctest.Wait()

		before := srv.Snapshot()
		worst := time.Duration(0)
		for range 600 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			a := l.Age()
			if !a.Synced {
				t.Fatal("the Lookup has not synced")
			}
			worst = max(worst, a.Age)
		}
		after := srv.Snapshot()
		polls := after.Stats.SyncRequests - before.Stats.SyncRequests
		beats := after.Heartbeats - before.Heartbeats
		t.Logf("a virtual minute: %d polls, %d heartbeats, the copy at most %v old", polls, beats, worst)
		if beats < 60 {
			t.Errorf("%d heartbeats in a minute, want one at least every Sync", beats)
		}
		if polls > 12 {
			t.Errorf("%d polls in a minute, want at most 12 (a fifth of one per Sync)", polls)
		}
		if worst >= tm.Sync+tm.LookupAnswerWait() {
			t.Errorf("the copy aged to %v, want under %v", worst, tm.Sync+tm.LookupAnswerWait())
		}

		_ = o.Close(ctx)
		l.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}
