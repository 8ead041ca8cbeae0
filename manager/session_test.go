package manager_test

import (
	"context"
	"fmt"
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

// TestControlFromAnotherStreamIsRefused: while an Owner's stream is open,
// a request on another stream that names the Owner and asks to leave, to
// drain, or to change its incarnation is refused with FailedPrecondition,
// and the Owner keeps its leases; a stream that spoke for one Owner may not
// speak for another; an incarnation far ahead of the Manager's clock is
// refused. A new incarnation from another stream is refused while the
// stream the session is bound to is live and accepted once it has been
// quiet for Timing.OwnerQuiet; the replaced run is refused after that. A
// leave, a drain and handovers from another stream are refused the same
// way while the bound stream is live, and accepted once it is quiet.
func TestControlFromAnotherStreamIsRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm})
		defer c.stop(t)
		ctx := context.Background()
		o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: c.dial(),
			Timing:      tm,
		}, ID: "a", Addr: "a:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(ctx)
		time.Sleep(tm.ManagerLease + 2*tm.Renew)
		synctest.Wait()
		k := keyspace.KeyOf("alice")
		held, ok := o.CheckLeaseNow(k)
		if !ok {
			t.Fatal("the owner holds nothing")
		}
		var inc uint64
		for _, ns := range c.srv.Snapshot().Namespaces {
			for _, oi := range ns.Owners {
				if oi.ID == "a" {
					inc = oi.Incarnation
				}
			}
		}
		if inc == 0 {
			t.Fatal("the Manager does not show owner a's incarnation")
		}

		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, tc := range []struct {
			name string
			req  *pb.LeaseRequest
			code codes.Code
			want string
		}{
			{"leave", &pb.LeaseRequest{Namespace: "default", Owner: "a", Addr: "a:1", Incarnation: inc, Seq: 1 << 40, Leaving: true},
				codes.FailedPrecondition, "a leave for owner \"a\""},
			{"drain", &pb.LeaseRequest{Namespace: "default", Owner: "a", Addr: "a:1", Incarnation: inc, Seq: 1 << 40, Draining: true},
				codes.FailedPrecondition, "a drain for owner \"a\""},
			{"incarnation from the future", &pb.LeaseRequest{Namespace: "default", Owner: "z", Addr: "z:1", Incarnation: 1<<64 - 1, Seq: 1},
				codes.InvalidArgument, "ahead of the Manager's clock"},
			{"new incarnation", &pb.LeaseRequest{Namespace: "default", Owner: "a", Addr: "evil:1", Incarnation: inc + 1, Seq: 1},
				codes.FailedPrecondition, "a new incarnation for owner \"a\""},
		} {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := pb.NewLeasesClient(conn).Session(sctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(tc.req); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s from another stream: %v, want %v saying %q", tc.name, err, tc.code, tc.want)
			}
			cancel()
			time.Sleep(2 * tm.Renew)
			synctest.Wait()
			if n, ok := o.CheckLeaseNow(k); !ok || n != held {
				t.Fatalf("after %s from another stream the owner holds %+v %v, before %+v", tc.name, n, ok, held)
			}
		}

		// A new incarnation is refused while the stream its Owner's
		// session is bound to is live, and accepted once that stream has
		// gone quiet (a restart whose old stream lingers half-open); the
		// old run is refused from then on.
		qctx, qcancel := context.WithCancel(ctx)
		defer qcancel()
		session := func(qctx context.Context, req *pb.LeaseRequest) (pb.Leases_SessionClient, error) {
			st, err := pb.NewLeasesClient(conn).Session(qctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			return st, err
		}
		old, err := session(qctx, &pb.LeaseRequest{Namespace: "default", Owner: "q", Addr: "q:1", Incarnation: 1, Seq: 1})
		if err != nil {
			t.Fatalf("q's first request: %v", err)
		}
		for i := range 3 { // the original renews; each time a duplicate is refused
			time.Sleep(tm.Renew)
			if err := old.Send(&pb.LeaseRequest{Namespace: "default", Owner: "q", Addr: "q:1", Incarnation: 1, Seq: uint64(2 + i)}); err != nil {
				t.Fatal(err)
			}
			_, err := session(qctx, &pb.LeaseRequest{Namespace: "default", Owner: "q", Addr: "q:2", Incarnation: 2, Seq: 1})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "a new incarnation for owner \"q\"") {
				t.Fatalf("a new incarnation of q while its stream is live: %v, want FailedPrecondition", err)
			}
		}
		time.Sleep(tm.OwnerQuiet()) // the original's stream stays open, silent
		synctest.Wait()
		if _, err := session(qctx, &pb.LeaseRequest{Namespace: "default", Owner: "q", Addr: "q:2", Incarnation: 2, Seq: 1}); err != nil {
			t.Fatalf("a new incarnation of q once its old stream has been quiet for %s: %v, want it accepted", tm.OwnerQuiet(), err)
		}
		if err := old.Send(&pb.LeaseRequest{Namespace: "default", Owner: "q", Addr: "q:1", Incarnation: 1, Seq: 10}); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := old.Recv()
			if err == nil {
				continue // answers sent before
			}
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "newer incarnation") {
				t.Fatalf("the replaced run of q: %v, want FailedPrecondition", err)
			}
			break
		}
		qcancel()

		// A leave, a drain and handovers from another stream: refused
		// while the stream the session is bound to is live, accepted once
		// it has been quiet for OwnerQuiet (the Owner has given it up, and
		// these are its requests by another path).
		for i, tc := range []struct {
			name string
			set  func(*pb.LeaseRequest)
		}{
			{"a leave", func(r *pb.LeaseRequest) { r.Leaving = true }},
			{"a drain", func(r *pb.LeaseRequest) { r.Draining = true }},
			{"handovers", func(r *pb.LeaseRequest) {
				r.Handed = []*pb.Handed{{Range: &pb.Range{Start: 1, End: 2}, Lgn: 1, To: "b", Incarnation: 1}}
			}},
		} {
			id := fmt.Sprintf("m%d", i)
			qctx, qcancel := context.WithCancel(ctx)
			if _, err := session(qctx, &pb.LeaseRequest{Namespace: "default", Owner: id, Addr: id + ":1", Incarnation: 1, Seq: 1}); err != nil {
				t.Fatalf("%s's first request: %v", id, err)
			}
			req := &pb.LeaseRequest{Namespace: "default", Owner: id, Addr: id + ":1", Incarnation: 1, Seq: 2}
			tc.set(req)
			if _, err := session(qctx, req); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.name+" for owner") {
				t.Fatalf("%s from another stream while the bound one is live: %v, want FailedPrecondition", tc.name, err)
			}
			time.Sleep(tm.OwnerQuiet()) // the first stream stays open, silent
			synctest.Wait()
			req.Seq = 3
			if _, err := session(qctx, req); err != nil {
				t.Errorf("%s from another stream once the bound one has been quiet for %s: %v, want it accepted", tc.name, tm.OwnerQuiet(), err)
			}
			qcancel()
		}

		// One stream, two Owners.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := pb.NewLeasesClient(conn).Session(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.LeaseRequest{Namespace: "default", Owner: "b", Addr: "b:1", Incarnation: 1, Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("b's first request: %v", err)
		}
		if err := st.Send(&pb.LeaseRequest{Namespace: "default", Owner: "c", Addr: "c:1", Incarnation: 1, Seq: 2}); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := st.Recv()
			if err == nil {
				continue // b's answers
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "speaks for one owner") {
				t.Fatalf("a request for c on b's stream: %v, want InvalidArgument", err)
			}
			break
		}
	})
}
