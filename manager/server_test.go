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

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// TestBadInputEndsOnlyThatStream sends the Manager malformed, unknown-
// namespace, oversized and too-frequent messages on raw streams. Each gets a
// status that says what is wrong, and an Owner on another stream keeps its
// leases throughout.
func TestBadInputEndsOnlyThatStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm, MaxRequestRate: 5, MaxMessageBytes: 64 << 10})
		defer c.stop(t)
		ctx := context.Background()
		good, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: c.dial(),
			Timing:      tm,
		}, ID: "good", Addr: "good:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer good.Close(ctx)
		time.Sleep(tm.ManagerLease + 2*tm.Renew)
		synctest.Wait()
		k := keyspace.KeyOf("alice")
		held, ok := good.CheckLeaseNow(k)
		if !ok {
			t.Fatal("the good owner holds nothing")
		}

		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		leases := pb.NewLeasesClient(conn)
		valid := func() *pb.LeaseRequest {
			return &pb.LeaseRequest{Namespace: "default", Owner: "bad", Addr: "bad:1", Incarnation: 1, Seq: 1}
		}
		tests := []struct {
			name string
			msgs []*pb.LeaseRequest
			code codes.Code
			want string
		}{
			{"empty range", []*pb.LeaseRequest{func() *pb.LeaseRequest {
				m := valid()
				m.Held = []*pb.Lease{{Range: &pb.Range{Start: 5, End: 5}, Lgn: 1}}
				return m
			}()}, codes.InvalidArgument, "empty range"},
			{"missing namespace", []*pb.LeaseRequest{func() *pb.LeaseRequest { m := valid(); m.Namespace = ""; return m }()},
				codes.InvalidArgument, "namespace"},
			{"unknown namespace", []*pb.LeaseRequest{func() *pb.LeaseRequest { m := valid(); m.Namespace = "nope"; return m }()},
				codes.NotFound, `unknown namespace "nope"`},
			{"no incarnation", []*pb.LeaseRequest{func() *pb.LeaseRequest { m := valid(); m.Incarnation = 0; return m }()},
				codes.InvalidArgument, "incarnation"},
			{"oversized", []*pb.LeaseRequest{func() *pb.LeaseRequest { m := valid(); m.Addr = strings.Repeat("x", 100<<10); return m }()},
				codes.ResourceExhausted, "--max-message-bytes"},
			{"too many requests", func() []*pb.LeaseRequest {
				var out []*pb.LeaseRequest
				for i := range 50 {
					m := valid()
					m.Seq = uint64(i + 1)
					out = append(out, m)
				}
				return out
			}(), codes.ResourceExhausted, "requests per second"},
		}
		for _, tc := range tests {
			stream, err := leases.Session(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.msgs {
				if stream.Send(m) != nil {
					break // the server ended the stream; Recv says why
				}
			}
			var got error
			for got == nil {
				_, got = stream.Recv()
			}
			if s := status.Convert(got); s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
				t.Errorf("%s: got %v, want code %v with %q", tc.name, got, tc.code, tc.want)
			}
		}
		// Lookups too: an unknown namespace is refused by name.
		sync, err := pb.NewLookupsClient(conn).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = sync.Send(&pb.SyncRequest{Namespace: "nope", Id: 1})
		if _, err := sync.Recv(); status.Code(err) != codes.NotFound {
			t.Errorf("sync for an unknown namespace: %v, want NotFound", err)
		}

		time.Sleep(2 * tm.Renew)
		synctest.Wait()
		if !good.CheckLeaseContinuous(k, held) {
			t.Fatal("the good owner lost its lease while others sent garbage")
		}
	})
}
