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
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// TestHeartbeatsNeedTheManagersDrift runs a Manager with MaxDrift 0.2 over
// real gRPC streams in virtual time. A Lookup on the default 0.05 adopts
// the Manager's from its first answer, says so in its next poll and is
// kept fresh by heartbeats from then on. A Lookup that says a smaller
// MaxDrift — here one of the release before, which says none — has its
// polls answered, each naming the Manager's MaxDrift, but gets no message
// that vouches for freshness.
func TestHeartbeatsNeedTheManagersDrift(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		tm.MaxDrift, tm.ManagerLease = 0.2, 2400*time.Millisecond // ≥ OwnerLease × 1.2
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
			Timing:      protocol.Fast(),
		}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * tm.Sync)
		synctest.Wait()

		before := srv.Snapshot()
		worst := time.Duration(0)
		for range 200 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			worst = max(worst, l.Age().Age)
		}
		after := srv.Snapshot()
		polls := after.Stats.SyncRequests - before.Stats.SyncRequests
		beats := after.Heartbeats - before.Heartbeats
		t.Logf("20 virtual seconds: %d polls, %d heartbeats, the copy at most %v old", polls, beats, worst)
		if beats < 20 || polls > 10 {
			t.Errorf("%d heartbeats and %d polls in 20 Syncs, want at least 20 and at most 10: "+
				"the Lookup that adopted the Manager's MaxDrift is kept fresh by heartbeats", beats, polls)
		}
		if worst >= tm.Sync+tm.LookupAnswerWait() {
			t.Errorf("the copy aged to %v, want under %v", worst, tm.Sync+tm.LookupAnswerWait())
		}
		l.Close()

		// A Lookup of the release before: names_once, no max_drift.
		conn, err := grpc.NewClient("passthrough:///bufnet", dial...)
		if err != nil {
			t.Fatal(err)
		}
		st, err := leaseholdv1.NewLookupsClient(conn).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msgs := make(chan *leaseholdv1.SyncResponse, 64)
		go func() {
			for {
				m, err := st.Recv()
				if err != nil {
					close(msgs)
					return
				}
				msgs <- m
			}
		}()
		var answers, vouching int
		var told []float64
		for id := uint64(1); id <= 10; id++ {
			if err := st.Send(&leaseholdv1.SyncRequest{Namespace: "default", Id: id, NamesOnce: true}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tm.Sync)
			synctest.Wait()
			for drained := false; !drained; {
				select {
				case m := <-msgs:
					if m.GetId() != 0 {
						answers++
					}
					if m.GetSyncNanos() != 0 { // a message that says the timings (once per stream)
						told = append(told, m.GetMaxDrift())
					}
					if m.GetRequest() != 0 {
						vouching++
					}
				default:
					drained = true
				}
			}
		}
		if len(told) != 1 || told[0] != tm.MaxDrift {
			t.Errorf("the stream said max_drift %v, want once the Manager's %g", told, tm.MaxDrift)
		}
		if answers != 10 || vouching != 0 {
			t.Errorf("a Lookup saying no MaxDrift: %d of 10 polls answered, %d messages vouching; want 10 and 0", answers, vouching)
		}
		_ = st.CloseSend()
		conn.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}
