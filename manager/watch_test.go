package manager_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// openWatch opens a Watch on conn and returns it with its number.
func openWatch(t *testing.T, ctx context.Context, conn *grpc.ClientConn) (pb.Lookups_WatchClient, uint64) {
	t.Helper()
	w, err := pb.NewLookupsClient(conn).Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.GetWatch() == 0 || first.GetUpdate() != nil {
		t.Fatalf("a Watch's first message %v, want its number alone", first)
	}
	return w, first.GetWatch()
}

// pollAnswered polls Watch id, open as w on the Poll's connection lc,
// with request id req and checks that the answer comes on w.
func pollAnswered(t *testing.T, ctx context.Context, lc pb.LookupsClient, w pb.Lookups_WatchClient, id, req uint64) {
	t.Helper()
	if _, err := lc.Poll(ctx, &pb.PollRequest{Watch: id, Request: &pb.SyncRequest{Namespace: "default", Id: req}}); err != nil {
		t.Fatalf("a Poll of Watch %d: %v", id, err)
	}
	if m, err := w.Recv(); err != nil || m.GetId() != req {
		t.Fatalf("Watch %d after the Poll: %v, %v; want the answer to request %d", id, m, err, req)
	}
}

// TestPollNamesAWatchOnItsConnection: a Poll's request is answered on the
// Watch it names, and only a Poll on the Watch's own connection can name
// it: its number from another connection, one with a Watch of its own
// open, is refused with NotFound, as is a number no Watch has, and both
// Watches go on. (Watch numbers are the server's, so the other
// connection's Watch has another: a client whose calls move to a new
// connection cannot reach a stranger's Watch by its old number.)
func TestPollNamesAWatchOnItsConnection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startManager(t, manager.Config{Insecure: true, Timing: protocol.Fast()})
		defer c.stop(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dial := func() *grpc.ClientConn {
			conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		mine, other := dial(), dial()
		w, id := openWatch(t, ctx, mine)
		ow, oid := openWatch(t, ctx, other)
		if oid == id {
			t.Fatalf("two Watches numbered %d", id)
		}
		for _, tc := range []struct {
			conn *grpc.ClientConn
			id   uint64
		}{{other, id}, {mine, oid}, {mine, oid + 1}} {
			_, err := pb.NewLookupsClient(tc.conn).Poll(ctx, &pb.PollRequest{Watch: tc.id, Request: &pb.SyncRequest{Namespace: "default", Id: 9}})
			if status.Code(err) != codes.NotFound {
				t.Errorf("a Poll naming Watch %d (open as %d on another connection or this one): %v, want NotFound", tc.id, id, err)
			}
		}
		for i := uint64(1); i <= 3; i++ {
			pollAnswered(t, ctx, pb.NewLookupsClient(mine), w, id, i)
		}
		pollAnswered(t, ctx, pb.NewLookupsClient(other), ow, oid, 7)
	})
}

// TestRefusedPollEndsItsWatch: a Poll the Manager refuses — no request, a
// namespace it does not know, more than MaxRequestRate — gets a status
// that says why, and its Watch ends with the same status, as a Sync
// stream does on such a message; the rate refusal is counted.
func TestRefusedPollEndsItsWatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startManager(t, manager.Config{Insecure: true, Timing: protocol.Fast(), MaxRequestRate: 5})
		defer c.stop(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		many := func() []*pb.SyncRequest {
			var out []*pb.SyncRequest
			for i := range 40 {
				out = append(out, &pb.SyncRequest{Namespace: "default", Id: uint64(i) + 1})
			}
			return out
		}
		for _, tc := range []struct {
			name string
			reqs []*pb.SyncRequest
			code codes.Code
			want string
		}{
			{"no request", []*pb.SyncRequest{nil}, codes.InvalidArgument, "carries no request"},
			{"unknown namespace", []*pb.SyncRequest{{Namespace: "nope", Id: 1}}, codes.NotFound, `unknown namespace "nope"`},
			{"too many polls", many(), codes.ResourceExhausted, "requests per second on one stream"},
		} {
			before := limitRefusals(t, c.srv, "max-request-rate")
			wctx, wcancel := context.WithTimeout(ctx, time.Minute) // a Watch that does not end fails the case
			w, id := openWatch(t, wctx, conn)
			var got error
			for _, r := range tc.reqs {
				if _, got = pb.NewLookupsClient(conn).Poll(ctx, &pb.PollRequest{Watch: id, Request: r}); got != nil {
					break
				}
			}
			if s := status.Convert(got); s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
				t.Errorf("%s: the Poll got %v, want code %v with %q", tc.name, got, tc.code, tc.want)
			}
			var ended error
			for ended == nil {
				_, ended = w.Recv()
			}
			wcancel()
			if status.Code(ended) != status.Code(got) || status.Convert(ended).Message() != status.Convert(got).Message() {
				t.Errorf("%s: the Watch ended with %v, want the Poll's %v", tc.name, ended, got)
			}
			refused := limitRefusals(t, c.srv, "max-request-rate") - before
			if want := map[bool]float64{true: 1}[tc.code == codes.ResourceExhausted]; refused != want {
				t.Errorf("%s: %g refusals counted under max-request-rate, want %g", tc.name, refused, want)
			}
		}
	})
}

// TestPollsOfAConnectionBounded: a connection's Polls are refused past
// twice MaxRequestRate for each Watch open on it before they are read,
// whatever Watch they name (here none: a number no Watch has), and the
// refusal ends no Watch. With no Watch open, a Poll is a unary call.
func TestPollsOfAConnectionBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startManager(t, manager.Config{Insecure: true, Timing: protocol.Fast(), MaxRequestRate: 5, MaxCallRate: 3})
		defer c.stop(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		lc := pb.NewLookupsClient(conn)
		codesOf := func(n int, watch uint64) map[codes.Code]int {
			got := map[codes.Code]int{}
			for range n {
				_, err := lc.Poll(ctx, &pb.PollRequest{Watch: watch, Request: &pb.SyncRequest{Namespace: "default", Id: 1}})
				got[status.Code(err)]++
			}
			return got
		}
		// No Watch open: calls, MaxCallRate 3 with bursts of 6.
		if got := codesOf(10, 7); got[codes.NotFound] != 6 || got[codes.ResourceExhausted] != 4 {
			t.Errorf("10 Polls with no Watch open: %v, want 6 NotFound and 4 ResourceExhausted", got)
		}
		w, id := openWatch(t, ctx, conn)
		// One Watch open: 2 × 5 a second, bursts of 20.
		if got := codesOf(30, id+1); got[codes.NotFound] != 20 || got[codes.ResourceExhausted] != 10 {
			t.Errorf("30 Polls naming no Watch, one open: %v, want 20 NotFound and 10 ResourceExhausted", got)
		}
		time.Sleep(time.Second)
		pollAnswered(t, ctx, lc, w, id, 2)
	})
}

// TestLookupSyncsWithoutWatch: a Manager registered on a gRPC server built
// without its GRPCOptions keeps no connection state and refuses Watch as
// unimplemented, as a replica of a release before Watch does; the lookup
// library then keeps its copy over a Sync stream.
func TestLookupSyncsWithoutWatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: tm})
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		srv.Register(g)
		lis := bufconn.Listen(1 << 20)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan error, 1)
		go func() { ran <- srv.Run(ctx) }()
		go func() { _ = g.Serve(lis) }()
		defer func() {
			cancel()
			g.Stop()
			<-ran
		}()
		followsOver(t, ctx, lis, tm, tm.Sync, "over Sync")
	})
}

// poolingProxy serves the Lookups service as an L7 proxy that pools its
// connections to the Manager would: a Watch, and a Sync stream, go over
// one connection, every Poll over another.
type poolingProxy struct {
	pb.UnimplementedLookupsServer
	streams, polls pb.LookupsClient
}

func (p poolingProxy) Watch(req *pb.WatchRequest, ss pb.Lookups_WatchServer) error {
	up, err := p.streams.Watch(ss.Context(), req)
	if err != nil {
		return err
	}
	for {
		m, err := up.Recv()
		if err != nil {
			return err
		}
		if err := ss.Send(m); err != nil {
			return err
		}
	}
}

func (p poolingProxy) Poll(ctx context.Context, req *pb.PollRequest) (*pb.PollResponse, error) {
	return p.polls.Poll(ctx, req)
}

func (p poolingProxy) Sync(ss pb.Lookups_SyncServer) error {
	up, err := p.streams.Sync(ss.Context())
	if err != nil {
		return err
	}
	go func() {
		for {
			m, err := ss.Recv()
			if err != nil {
				_ = up.CloseSend()
				return
			}
			if up.Send(m) != nil {
				return
			}
		}
	}()
	for {
		m, err := up.Recv()
		if err != nil {
			return err
		}
		if err := ss.Send(m); err != nil {
			return err
		}
	}
}

// TestLookupBehindAPoolingProxy: behind a proxy that sends a Watch's Polls
// over another connection than the Watch, the first Poll finds no Watch;
// the lookup library then speaks Sync to that address and keeps its copy.
func TestLookupBehindAPoolingProxy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm})
		defer c.stop(t)
		up := func() pb.LookupsClient {
			conn, err := grpc.NewClient("passthrough:///bufnet", c.dial()...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return pb.NewLookupsClient(conn)
		}
		g := grpc.NewServer()
		pb.RegisterLookupsServer(g, poolingProxy{streams: up(), polls: up()})
		lis := bufconn.Listen(1 << 20)
		go func() { _ = g.Serve(lis) }()
		defer g.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		followsOver(t, ctx, lis, tm, 2*tm.Sync, "behind the proxy")
	})
}

// followsOver starts a Lookup that dials lis, and checks that it has its
// first copy within wait and keeps it fresh for five Syncs after.
func followsOver(t *testing.T, ctx context.Context, lis *bufconn.Listener, tm protocol.Timing, wait time.Duration, where string) {
	t.Helper()
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{
		Manager: "passthrough:///bufnet",
		DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		},
		Timing: tm,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := l.WaitSynced(wctx); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	time.Sleep(5 * tm.Sync)
	synctest.Wait()
	if a := l.Age(); a.Stale() {
		t.Errorf("the Lookup's copy is stale %s: %+v", where, a)
	}
}
