package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/keyspace"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestCheckCost measures, in one run, what a lease check costs an
// application: the Go library's CheckLeaseNow (a linked server); the
// Python client's local check (time.monotonic_ns and a binary search over
// 64 ranges); and the agent's Check(key) round trip over its Unix socket,
// from Go over gRPC and from Python over the HTTP/JSON mirror.
// docs/results.md quotes it. It runs only when asked:
//
//	LEASEHOLD_AGENT_COST=1 go test -count=1 -run TestCheckCost -v ./internal/agent/
func TestCheckCost(t *testing.T) {
	if os.Getenv("LEASEHOLD_AGENT_COST") == "" {
		t.Skip("a measurement: run with LEASEHOLD_AGENT_COST=1")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	path, a := serve(t, 10*time.Second)
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := pb.NewAgentClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for { // the session holds the key space before anything is measured
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.AppMessage{Applied: ev.GetVersion()}); err != nil {
			t.Fatal(err)
		}
		if len(ev.GetHeld()) > 0 {
			break
		}
	}
	go func() { // acknowledge the heartbeats meanwhile
		for {
			ev, err := st.Recv()
			if err != nil || st.Send(&pb.AppMessage{Applied: ev.GetVersion()}) != nil {
				return
			}
		}
	}()
	o := a.openSession().owner
	key := keyspace.KeyOf("alice")

	const n = 2_000_000
	start := time.Now()
	for range n {
		if _, ok := o.CheckLeaseNow(key); !ok {
			t.Fatal("CheckLeaseNow: not held")
		}
	}
	goLocal := time.Since(start) / n

	client := pb.NewAgentClient(cc)
	const rt = 5000
	start = time.Now()
	for range rt {
		r, err := client.Check(ctx, &pb.CheckRequest{Key: uint64(key)})
		if err != nil || !r.GetHeld() {
			t.Fatalf("Check: %v %v", r, err)
		}
	}
	goGRPC := time.Since(start) / rt

	script := `
import sys, time
from leasehold_agent import Lease, LeaseTable, Session, key_of
n = 200000
table = LeaseTable()
step = (1 << 64) // 64
far = time.monotonic_ns() + 3600 * 10**9
table.replace([Lease({"range": {"start": str(i * step), "end": str(((i + 1) * step) % (1 << 64))}, "epoch": "1", "lgn": str(i + 1), "deadline_ns": str(far)}) for i in range(64)], 1)
k = key_of("alice")
t0 = time.perf_counter_ns()
for _ in range(n):
    l = table.check(k)
local = (time.perf_counter_ns() - t0) / n
t0 = time.perf_counter_ns()
for _ in range(n):
    time.monotonic_ns()
mono = (time.perf_counter_ns() - t0) / n
t0 = time.perf_counter_ns()
for _ in range(20000):
    key_of("alice")
hashing = (time.perf_counter_ns() - t0) / 20000
s = Session(sys.argv[1])
m = 3000
t0 = time.perf_counter_ns()
for _ in range(m):
    if s.check_remote(k) is None:
        raise SystemExit("check_remote: not held")
remote = (time.perf_counter_ns() - t0) / m
print("%.0f %.0f %.0f %.0f" % (local, mono, hashing, remote))
`
	dir, _ := filepath.Abs(filepath.Join("..", "..", "examples", "kv-python"))
	cmd := exec.Command(py, "-c", script, path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	t.Logf("Go owner.CheckLeaseNow (linked):                          %v per check", goLocal)
	t.Logf("Python LeaseTable.check (monotonic read + bisect of 64):  %s ns per check (time.monotonic_ns alone %s ns)", f[0], f[1])
	t.Logf("Python key_of (pure-Python xxhash64 of a 5-byte name):    %s ns", f[2])
	t.Logf("agent Check(key) round trip, Go gRPC over the Unix socket: %v", goGRPC)
	t.Logf("agent Check(key) round trip, Python HTTP/JSON mirror:      %s ns", f[3])
}
