package manager_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// fuzzMaxOwners is the fuzzed Manager's MaxOwners: small, so that inputs
// reach the limit.
const fuzzMaxOwners = 6

var fuzzed struct {
	once sync.Once
	c    *cluster
	conn *grpc.ClientConn
}

// fuzzManager is one in-process Manager shared by every input of a fuzz
// run (starting one per input would cost more than the input): its state
// carries over, as a long-running Manager's would.
func fuzzManager(t *testing.T) (*manager.Server, *grpc.ClientConn) {
	fuzzed.once.Do(func() {
		srv, err := manager.NewServer(manager.Config{Timing: protocol.Fast(), Namespaces: []string{"other"}, MaxOwners: fuzzMaxOwners, MaxMessageBytes: 16 << 10, MaxRequestRate: 1000, Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &cluster{lis: bufconn.Listen(1 << 20), done: make(chan error, 1), srv: srv, cancel: cancel}
		go func() { c.done <- srv.Serve(ctx, c.lis) }()
		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		fuzzed.c, fuzzed.conn = c, conn
	})
	return fuzzed.c.srv, fuzzed.conn
}

// fuzzInput reads the fuzzer's bytes as a sequence of small numbers.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *fuzzInput) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(in.byte())
	}
	return v
}

func (in *fuzzInput) pick(options ...string) string { return options[int(in.byte())%len(options)] }

func (in *fuzzInput) rng() *pb.Range {
	return &pb.Range{Start: in.u64(), End: in.u64()}
}

// knownCodes are the codes the Manager answers with on purpose; anything
// else (Internal, Unknown) is a bug or an input the boundary let through.
var knownCodes = map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true,
	codes.FailedPrecondition: true, codes.ResourceExhausted: true, codes.Unavailable: true,
	codes.Canceled: true, codes.DeadlineExceeded: true, codes.Aborted: true}

// FuzzManagerAPI decodes a sequence of requests from the input — lease
// requests on a few streams (any owner, incarnation, Seq, held leases,
// handovers, leaves, drains, capacity, load window), syncs, status, drain
// and removal calls — and sends them to an in-process Manager. The
// property: the Manager never panics (the test process would die), every
// error is a status with a known code, and the table's invariants as
// Status shows them hold (shares add up to at most the key space, free
// segments within the segments, at most MaxOwners Owners, capacities
// within wire.MaxCapacity). The seed corpus runs under go test in well
// under a second.
func FuzzManagerAPI(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 2, 1, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2, 1, 1, 3, 0, 1})
	f.Add([]byte{1, 0, 2, 3, 4, 0, 5, 1, 6, 7, 8, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 3, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 1, 200, 7})
	f.Add([]byte{6, 1, 0, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte("\x00\x04\x05\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x03\x03\x02\x01\x05\x04\x03"))
	f.Cleanup(func() {
		if fuzzed.c != nil {
			fuzzed.conn.Close()
			fuzzed.c.cancel()
			<-fuzzed.c.done
		}
		// go test -count=N runs the seeds again: each run starts its own
		// Manager, not the one this run stopped.
		fuzzed.once, fuzzed.c, fuzzed.conn = sync.Once{}, nil, nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		srv, conn := fuzzManager(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in := &fuzzInput{data}
		check := func(what string, err error) {
			t.Helper()
			s, ok := status.FromError(err)
			if !ok || !knownCodes[s.Code()] {
				t.Fatalf("%s: %v, not a status with a known code", what, err)
			}
		}
		streams := map[byte]pb.Leases_SessionClient{}
		for steps := 0; len(in.b) > 0 && steps < 32; steps++ {
			switch in.byte() % 7 {
			case 0, 1: // a lease request on one of four streams
				k := in.byte() % 4
				st := streams[k]
				if st == nil {
					var err error
					if st, err = pb.NewLeasesClient(conn).Session(ctx); err != nil {
						check("open a lease stream", err)
						continue
					}
					streams[k] = st
				}
				m := &pb.LeaseRequest{Namespace: in.pick("default", "other", "", "nope"), Owner: in.pick("a", "b", "c", "d", "e", "f", "g", "h", ""),
					Addr: "x:1", Incarnation: in.u64() % 4, Seq: uint64(in.byte()), AckEpoch: in.u64(), AckSeq: uint64(in.byte()),
					Leaving: in.byte()%5 == 0, Draining: in.byte()%5 == 0, Capacity: float64(in.byte()) - 10, WindowNanos: int64(in.u64() % uint64(time.Second))}
				for range in.byte() % 3 {
					m.Held = append(m.Held, &pb.Lease{Range: in.rng(), Lgn: uint64(in.byte())})
				}
				for range in.byte() % 2 {
					m.Handed = append(m.Handed, &pb.Handed{Range: in.rng(), Lgn: uint64(in.byte()), To: in.pick("a", "b"), Incarnation: in.u64() % 4})
				}
				if m.Incarnation > 0 {
					m.Incarnation = uint64(time.Now().UnixNano()) - m.Incarnation // a plausible run
				}
				if st.Send(m) != nil {
					_, err := st.Recv()
					check("a lease stream ended", err)
					delete(streams, k)
				}
			case 2:
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				sync, err := pb.NewLookupsClient(conn).Sync(rctx)
				if err != nil {
					rcancel()
					check("open a sync stream", err)
					continue
				}
				_ = sync.Send(&pb.SyncRequest{Namespace: in.pick("default", "other", "nope"), Id: uint64(in.byte()), Epoch: in.u64(), Lsn: in.u64()})
				_, err = sync.Recv()
				rcancel()
				if err != nil {
					check("a sync", err)
				}
			case 3:
				_, err := pb.NewAdminClient(conn).Status(ctx, &pb.StatusRequest{Namespace: in.pick("", "default", "nope")})
				check("status", err)
			case 4:
				_, err := pb.NewAdminClient(conn).Drain(ctx, &pb.DrainRequest{Namespace: in.pick("default", "nope", ""), Owner: in.pick("a", "b", "zz", "")})
				check("drain", err)
			case 5:
				_, err := pb.NewAdminClient(conn).RemovePeer(ctx, &pb.RemovePeerRequest{Id: uint64(in.byte()%4) + 2})
				check("remove a replica", err)
			case 6: // a Watch and a Poll naming it, another number or none
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				lc := pb.NewLookupsClient(conn)
				w, err := lc.Watch(rctx, &pb.WatchRequest{})
				var id uint64
				if err == nil {
					var first *pb.SyncResponse
					if first, err = w.Recv(); err == nil {
						id = first.GetWatch()
					}
				}
				if err != nil {
					rcancel()
					check("open a Watch", err)
					continue
				}
				var req *pb.SyncRequest
				if in.byte()%4 != 0 {
					req = &pb.SyncRequest{Namespace: in.pick("default", "other", "nope", ""), Id: uint64(in.byte()), Epoch: in.u64(), Lsn: in.u64(), NamesOnce: in.byte()%2 == 0}
				}
				if _, err := lc.Poll(rctx, &pb.PollRequest{Watch: id + uint64(in.byte()%3), Request: req}); err != nil {
					check("a Poll", err)
				} else if _, err := w.Recv(); err != nil {
					check("a Watch's answer", err)
				}
				rcancel()
			}
		}
		for k, st := range streams {
			_ = st.CloseSend()
			delete(streams, k)
		}
		snap := srv.Snapshot()
		for _, ns := range snap.Namespaces {
			share := 0.0
			for _, o := range ns.Owners {
				share += o.Share
				if o.Capacity > 100 || o.Capacity < 0 || math.IsNaN(o.Capacity) {
					t.Fatalf("namespace %s: owner %s has capacity %v", ns.Name, o.ID, o.Capacity)
				}
			}
			if share > 1+1e-9 {
				t.Fatalf("namespace %s: the owners' shares add up to %v", ns.Name, share)
			}
			if ns.FreeSegments > ns.Segments || ns.FreeSegments < 0 {
				t.Fatalf("namespace %s: %d free of %d segments", ns.Name, ns.FreeSegments, ns.Segments)
			}
			if len(ns.Owners) > fuzzMaxOwners {
				t.Fatalf("namespace %s: %d owners, past MaxOwners %d", ns.Name, len(ns.Owners), fuzzMaxOwners)
			}
		}
	})
}
