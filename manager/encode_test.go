package manager

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// A real Manager serving Lookups over gRPC encodes an update it sends to
// all of them once, not once per stream, and every Lookup decodes the same
// update from the bytes. Plain streams share every update; streams that
// name Owners by number get their own copy of a small update (and merged
// deltas), and decode the same updates as each other.
func TestSharedUpdatesEncodedOnceOverGRPC(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(Config{Insecure: true, Timing: tm})
		if err != nil {
			t.Fatal(err)
		}
		lis := bufconn.Listen(1 << 20)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis) }()
		dial := []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
		var owners []*owner.Owner
		for i := range 3 {
			o, err := owner.New(ctx, owner.Config{
				Connection: leasehold.Connection{
					Manager:     "passthrough:///bufnet",
					DialOptions: dial,
					Timing:      tm,
				},
				ID:   fmt.Sprintf("o%d", i),
				Addr: fmt.Sprintf("o%d:1", i),
			})
			if err != nil {
				t.Fatal(err)
			}
			owners = append(owners, o)
		}
		time.Sleep(tm.ManagerLease + 6*tm.Renew)
		synctest.Wait()

		conn, err := grpc.NewClient("passthrough:///bufnet", dial...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		const plain, named = 8, 3
		type heard struct {
			named bool
			ups   []leasetable.Update
		}
		streams := make([]*heard, plain+named)
		var mu sync.Mutex
		messages, beats := 0, 0
		sctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range streams {
			h := &heard{named: i >= plain}
			streams[i] = h
			st, err := pb.NewLookupsClient(conn).Sync(sctx)
			if err != nil {
				t.Fatal(err)
			}
			var names *wire.LookupNames
			req := wire.SyncRequestToPB(&protocol.SyncRequest{Namespace: "default", ID: 1})
			if h.named {
				names = &wire.LookupNames{}
				req = names.Send(req)
			}
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for {
					m, err := st.Recv()
					if err != nil {
						return
					}
					if names != nil {
						if err := names.Recv(m); err != nil {
							t.Error(err)
							return
						}
					}
					r, err := wire.SyncResponseFromPB(m)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if r.Request != 0 && r.ID == 0 && r.Update.From == r.Update.To && !r.Update.Snapshot {
						beats++ // a heartbeat: an empty update of its own
					} else {
						messages++
						h.ups = append(h.ups, r.Update)
					}
					mu.Unlock()
				}
			})
		}
		time.Sleep(tm.Renew)
		synctest.Wait()
		// Each stream's snapshot answered its own request; the pushes that
		// follow go to every stream at once.
		mu.Lock()
		before, pushed, beat := srv.updateEncodings.Load(), messages, beats
		mu.Unlock()
		// Two Owners leave: their ranges are pushed to every Lookup.
		for _, o := range owners[:2] {
			if err := o.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(tm.ManagerLease + 6*tm.Renew)
		synctest.Wait()
		encodings := srv.updateEncodings.Load() - before
		stop()
		wg.Wait()
		_ = owners[2].Close(ctx)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}

		mu.Lock()
		defer mu.Unlock()
		for i, h := range streams {
			if len(h.ups) < 2 {
				t.Fatalf("stream %d heard %d updates, want a snapshot and the leaves' deltas", i, len(h.ups))
			}
		}
		// Per push: one encoding shared by the plain streams, and one for
		// each named stream's own copy.
		pushed = messages - pushed
		if pushes := pushed / len(streams); pushed == 0 || encodings > int64(pushes*(1+named)+beats-beat) {
			t.Errorf("%d updates marshalled for %d pushed messages to %d Lookups; shared updates must be marshalled once", encodings, pushed, len(streams))
		}
		// The same update (same LSNs) decodes the same on every stream of a
		// kind.
		for _, kind := range []bool{false, true} {
			seen := map[[3]uint64]leasetable.Update{}
			for i, h := range streams {
				if h.named != kind {
					continue
				}
				for _, u := range h.ups {
					snap := uint64(0)
					if u.Snapshot {
						snap = 1
					}
					k := [3]uint64{uint64(u.From), uint64(u.To), snap}
					if w, ok := seen[k]; ok && !reflect.DeepEqual(w, u) {
						t.Errorf("stream %d (names once: %v) decodes update %v differently: %+v, another stream %+v", i, kind, k, u, w)
					}
					seen[k] = u
				}
			}
		}
	})
}
