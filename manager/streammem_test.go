package manager_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// streamMemClient names the environment variable under which this test's
// binary, run again, is the Lookups' process: it dials the Manager at that
// address.
const streamMemClient = "LEASEHOLD_STREAMMEM_CLIENT"

// streamMemCerts names the environment variable that gives the clients'
// process the directory of its lookup certificate ("mem"), for a Manager
// that serves mutual TLS.
const streamMemCerts = "LEASEHOLD_STREAMMEM_CERTS"

// streamMemFloorEnv names the environment variable under which this
// test's binary, run again, measures a bare gRPC server's streams in a
// process of its own and prints "floor STACKS LIVE", bytes per stream: in
// the Manager's process, goroutines that ended would leave their
// descriptors for the next ones, and its loop's garbage would blur the
// bare server's heap.
const streamMemFloorEnv = "LEASEHOLD_STREAMMEM_FLOOR"

// TestIdleStreamMemory measures what an idle Lookup stream costs the
// Manager's process in goroutine stacks and live heap: the Lookups run in
// a process of their own (this test's binary run again), fifty streams to
// a connection over 127.0.0.1, each asked once and answered, so what grows
// in this process between 100 and 600 streams is the Manager's alone.
//
// A Watch (watch.go) is measured first, as the lookup library opens one:
// its handler parks in a select about 2.5 KB deep and keeps a 4-KB stack;
// the bound of 6 KB catches a handler that runs deep enough on its way to
// double it (as the generated handler, receiving the Watch's request on
// its own goroutine, does). The Watches go first because Go starts a new
// goroutine's stack at the average of those it scanned: measured after
// hundreds of Sync handlers, a Watch's would start, and stay, at 8 KB.
//
// A Sync stream, as a Lookup of a release before Watch opens, is measured
// next. Its handler is parked in gRPC's Recv about 4 KB deep (gRPC's
// frames from its stream goroutine to the handler and from Recv down to
// the select it waits in), past what a 4-KB stack holds; Go doubles a
// stack to 8 KB and shrinks it at a collection only when less than a
// quarter is in use. So 8 KB of stack is an idle stream's floor while gRPC
// runs a goroutine per stream; the bound catches a second goroutine per
// stream (a parked sender), or a handler that grows past 8 KB. The live
// heap's bound catches per-stream state allocated up front: with the queue
// of 64 messages a channel allocated with the stream, and a context of the
// handler's own, an idle stream held 5.4 KB; without them 3.7 KB, of which
// gRPC's stream state, its goroutine and the sudogs of its parked select
// are about 3 KB.
//
// The same is measured on a bare gRPC server (no interceptor, a handler
// that receives and answers on its own goroutine): gRPC-Go's own floor,
// 8 KB of stack and about 3 KB of heap per stream, for the record and as
// the base of the tightest bounds: the Manager may add at most 1 KB of
// either to it. A handler of 48 bytes there parks about 3.1 KB deep, yet
// its stack is 8 KB too: gRPC's code grows it past 4 KB on the way.
func TestIdleStreamMemory(t *testing.T) {
	if addr := os.Getenv(streamMemClient); addr != "" {
		streamMemLookups(t, addr)
		return
	}
	if os.Getenv(streamMemFloorEnv) != "" {
		streamMemBare(t)
		return
	}
	if raceEnabled {
		t.Skip("the race detector's larger frames and shadow memory change what is measured")
	}
	if testing.Short() {
		t.Skip("runs a second process")
	}
	const from, to, owners = 100, 600, 200
	n := float64(to - from)

	bareStacks, bareLive := streamMemFloor(t)

	// Watches over mutual TLS first, on a Manager of their own, closed
	// before the rest: the role check and the TLS records must not deepen
	// a Watch's goroutine either.
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []certs.Identity{{Role: certs.Replica, Name: "1"}, {Role: certs.Lookup, Name: "mem"}} {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	src, err := certs.Open(dir, certs.Replica, "1")
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr, stopTLS := streamMemManager(t, manager.Config{Certs: src})
	open, stop := streamMemClients(t, tlsAddr, dir, streamGoroutines)
	ta, tb := open("watches", from, from), open("watches", to, to)
	stop()
	stopTLS()
	checkWatches(t, "an idle Watch over TLS", ta, tb, n)
	runtime.GC() // the average stack a new goroutine starts with is the last collection's

	addr, stopPlain := streamMemManager(t, manager.Config{Insecure: true})
	defer stopPlain()
	open, stop = streamMemClients(t, addr, "", streamGoroutines)
	defer stop()
	wa, wb := open("watches", from, from), open("watches", to, to)
	a, b := open("lookups", from, to+from), open("lookups", to, 2*to)
	checkWatches(t, "an idle Watch", wa, wb, n)
	// An Owner is a connection and a stream of its own: what that costs
	// before its first request, for the record.
	c := open("owners", owners, 2*to+owners)
	stacks := float64(b.stacks-a.stacks) / n
	live := float64(b.live-a.live) / n
	goroutines := float64(b.goroutines-a.goroutines) / n
	t.Logf("per idle Sync stream, %d → %d streams: %.0f bytes of stacks, %.0f bytes of live heap, %.2f goroutines", from, to, stacks, live, goroutines)
	t.Logf("per stream of a bare gRPC server: %.0f bytes of stacks, %.0f bytes of live heap; the Manager's own: %.0f and %.0f",
		bareStacks, bareLive, stacks-bareStacks, live-bareLive)
	if stacks > 12<<10 {
		t.Errorf("an idle stream holds %.1f KB of goroutine stacks at the Manager, want at most 12 KB (one goroutine of 8 KB)", stacks/1024)
	}
	if live > 4608 {
		t.Errorf("an idle stream holds %.1f KB of live heap at the Manager, want at most 4.5 KB", live/1024)
	}
	if extra := stacks - bareStacks; extra > 1024 {
		t.Errorf("an idle stream holds %.1f KB of goroutine stacks at the Manager more than on a bare gRPC server, want at most 1 KB", extra/1024)
	}
	if extra := live - bareLive; extra > 1024 {
		t.Errorf("an idle stream holds %.1f KB of live heap at the Manager more than on a bare gRPC server, want at most 1 KB", extra/1024)
	}
	t.Logf("per idle Owner's connection and stream: %.0f bytes of stacks, %.0f bytes of live heap, %.2f goroutines",
		float64(c.stacks-b.stacks)/owners, float64(c.live-b.live)/owners, float64(c.goroutines-b.goroutines)/owners)
}

// checkWatches logs what each of n idle Watches opened between a and b
// holds, and bounds it: one goroutine of 4 KB (at most 6 KB of stacks)
// and at most 4.5 KB of live heap.
func checkWatches(t *testing.T, what string, a, b memPoint, n float64) {
	t.Helper()
	stacks, live := float64(b.stacks-a.stacks)/n, float64(b.live-a.live)/n
	t.Logf("%s: %.0f bytes of stacks, %.0f bytes of live heap, %.2f goroutines", what, stacks, live, float64(b.goroutines-a.goroutines)/n)
	if stacks > 6<<10 {
		t.Errorf("%s holds %.1f KB of goroutine stacks at the Manager, want at most 6 KB (one goroutine of 4 KB)", what, stacks/1024)
	}
	if live > 4608 {
		t.Errorf("%s holds %.1f KB of live heap at the Manager, want at most 4.5 KB", what, live/1024)
	}
}

// streamMemManager serves a Manager with cfg on 127.0.0.1 until stop.
func streamMemManager(t *testing.T, cfg manager.Config) (addr string, stop func()) {
	t.Helper()
	srv, err := manager.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	return lis.Addr().String(), func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
}

// streamMemClients starts the clients' process (this test's binary run
// again) against addr, with the lookup certificate in certsDir if set,
// and returns open, which asks it to open streams of
// a kind up to n and returns the memory of this process once count says
// streams goroutines serve them, and stop, which ends it.
func streamMemClients(t *testing.T, addr, certsDir string, count func() int) (open func(kind string, n, streams int) memPoint, stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleStreamMemory$", "-test.count=1")
	cmd.Env = append(os.Environ(), streamMemClient+"="+addr, streamMemCerts+"="+certsDir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(outPipe)
	open = func(kind string, n, streams int) memPoint {
		t.Helper()
		fmt.Fprintln(in, kind, n)
		for out.Scan() {
			if out.Text() == "ok "+strconv.Itoa(n) {
				return settledMemory(t, streams, count)
			}
		}
		t.Fatalf("the clients' process did not open %d %s: %v", n, kind, out.Err())
		return memPoint{}
	}
	return open, func() {
		in.Close()
		_ = cmd.Wait()
	}
}

// streamMemFloor runs this test's binary again to measure gRPC-Go's own
// cost of an idle stream (streamMemBare) and returns its stacks and live
// heap per stream.
func streamMemFloor(t *testing.T) (stacks, live float64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleStreamMemory$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), streamMemFloorEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the bare server's process: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if _, rest, ok := strings.Cut(l, "floor "); ok {
			if _, err := fmt.Sscan(rest, &stacks, &live); err == nil {
				return stacks, live
			}
		}
	}
	t.Fatalf("the bare server's process said no floor: %s", out)
	return 0, 0
}

// streamMemBare is the bare server's process: the Lookups service on
// grpc.NewServer(), streams opened by a clients' process of its own as for
// the Manager, from 100 to 600.
func streamMemBare(t *testing.T) {
	srv := grpc.NewServer()
	srv.RegisterService(&bareLookups, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	open, stop := streamMemClients(t, lis.Addr().String(), "", bareGoroutines)
	defer stop()
	const from, to = 100, 600
	a, b := open("lookups", from, from), open("lookups", to, to)
	fmt.Printf("floor %d %d\n", int64(b.stacks-a.stacks)/(to-from), (int64(b.live)-int64(a.live))/(to-from))
}

// bareLookups is the Lookups service on a bare gRPC server: Sync answers
// each request with an empty response, on the stream's own goroutine.
var bareLookups = grpc.ServiceDesc{
	ServiceName: "leasehold.v1.Lookups",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Sync", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error { return bareSync(ss) }}},
}

func bareSync(ss grpc.ServerStream) error {
	for {
		m := new(pb.SyncRequest)
		if err := ss.RecvMsg(m); err != nil {
			return err
		}
		if err := ss.SendMsg(&pb.SyncResponse{Id: m.GetId()}); err != nil {
			return err
		}
	}
}

// bareGoroutines counts the goroutines running bareSync.
func bareGoroutines() int { return countGoroutines("manager_test.bareSync") }

type memPoint struct{ stacks, live, goroutines uint64 }

// settledMemory reads the process's stacks, live heap and goroutines once
// n streams have their handler and no sender runs, after two collections
// (the second frees what the first's finalizers and stack shrinking left).
//
// count dumps every goroutine's stack, stopping the world for as long as
// that takes with hundreds of streams: polled every millisecond it kept
// the streams' goroutines from running on a loaded machine (a clone's
// first go test ./..., compiling beside it), and 10,000 polls took 145 s.
// So it polls every 10 ms, for at most 30 s of the wall clock: it settles
// in milliseconds, and a long wait is a loaded machine's scheduler.
func settledMemory(t *testing.T, n int, count func() int) memPoint {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines serve %d idle streams", count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	metrics.Read(s)
	return memPoint{stacks: s[0].Value.Uint64(), live: s[1].Value.Uint64(), goroutines: s[2].Value.Uint64()}
}

// streamMemLookups is the clients' process: for each line "lookups n" read
// from stdin it opens Lookup Sync streams up to n in all, fifty to a
// connection, asks on each once and reads its answer; for "watches n" the
// same with Watches, each asked by a Poll; for "owners n" it
// opens n connections with an Owner's lease stream each, which says
// nothing; then it says "ok n". At the end of stdin it closes them.
func streamMemLookups(t *testing.T, addr string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dial := grpc.WithTransportCredentials(insecure.NewCredentials())
	if dir := os.Getenv(streamMemCerts); dir != "" {
		src, err := certs.Open(dir, certs.Lookup, "mem")
		if err != nil {
			t.Fatal(err)
		}
		dial = certs.DialOption(src)
	}
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var streams []pb.Lookups_SyncClient
	var watches []pb.Lookups_WatchClient
	var owners []pb.Leases_SessionClient
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		kind, num, _ := strings.Cut(in.Text(), " ")
		n, err := strconv.Atoi(num)
		if err != nil {
			t.Fatal(err)
		}
		for kind == "owners" && len(owners) < n {
			c, err := grpc.NewClient(addr, dial)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			st, err := pb.NewLeasesClient(c).Session(ctx)
			if err != nil {
				t.Fatal(err)
			}
			owners = append(owners, st)
		}
		for kind == "lookups" && len(streams) < n {
			if len(streams)%50 == 0 {
				c, err := grpc.NewClient(addr, dial)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			st, err := pb.NewLookupsClient(conns[len(conns)-1]).Sync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&pb.SyncRequest{Namespace: "default", Id: 1}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			streams = append(streams, st)
		}
		for kind == "watches" && len(watches) < n {
			if len(watches)%50 == 0 {
				c, err := grpc.NewClient(addr, dial)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			lc := pb.NewLookupsClient(conns[len(conns)-1])
			st, err := lc.Watch(ctx, &pb.WatchRequest{})
			if err != nil {
				t.Fatal(err)
			}
			first, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lc.Poll(ctx, &pb.PollRequest{Watch: first.GetWatch(), Request: &pb.SyncRequest{Namespace: "default", Id: 1}}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			watches = append(watches, st)
		}
		fmt.Printf("ok %d\n", n)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// countGoroutines counts the goroutines whose stack names fn.
func countGoroutines(fn string) int {
	n := 0
	for _, g := range strings.Split(allStacks(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// allStacks returns every goroutine's stack trace, whole: a buffer of a
// fixed size cuts the dump of a few hundred streams short, and the
// goroutines past the cut would go uncounted (a trace's frames name the
// module's directory, as long as a clone's path is).
func allStacks() string {
	// About 5 KB a goroutine in these tests' dumps: one dump, usually.
	for size := max(64<<10, runtime.NumGoroutine()*8<<10); ; size *= 2 {
		buf := make([]byte, size)
		if n := runtime.Stack(buf, true); n < size {
			return string(buf[:n])
		}
	}
}
