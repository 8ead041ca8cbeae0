package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

func TestMain(m *testing.M) {
	// The tests run their Managers and clients in plaintext on 127.0.0.1;
	// trust_test.go runs them with certificates.
	os.Setenv(InsecureEnv, "1")
	// Most of them wait on the fast timings' leases: they run 4 at once
	// (internal/testwait). Those that start Raft groups, whose elections,
	// 4 groups at once beside the rest of go test ./... on a loaded
	// machine, lost their leaders, run 2 at most at once (groupSlots).
	//
	// A fresh Manager grants nothing for a ManagerLease, 2.2 s with the
	// fast timings (docs/design.md, rule 9), and the tests that need a
	// grant spend most of their time on that. Those start their Manager
	// before they call t.Parallel (go test runs that part of every test
	// one after another, before it releases the parallel parts), so the
	// reservation runs out while they wait for one of the 4 turns rather
	// than in one. A test that gets its turn at once waits the reservation
	// out as before; either way it checks the same things. One that starts
	// a leasehold manager command waits for it to listen before t.Parallel:
	// the command sets the collector's GOGC and memory limit for the whole
	// process first (applyGC), which TestGCPercent and TestMemoryLimit, run
	// one at a time before the parallel tests, set and read.
	testwait.Parallel()
	goleak.VerifyTestMain(m)
}

// groupSlots admits 2 tests at once to start Manager replicas with
// --peers: a test takes a slot at its first such start and gives it back
// when it ends.
var (
	groupSlots = make(chan struct{}, 2)
	inGroup    sync.Map // *testing.T → struct{}: the tests holding a slot
)

// holdGroupSlot takes a slot for t, once, if args start a Manager of a
// Raft group.
func holdGroupSlot(t *testing.T, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != "manager" || !slices.Contains(args, "--peers") {
		return
	}
	if _, held := inGroup.LoadOrStore(t, struct{}{}); held {
		return
	}
	groupSlots <- struct{}{}
	t.Cleanup(func() { <-groupSlots })
}

// syncBuffer is a bytes.Buffer safe to write from one goroutine while the
// test reads it from another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cli runs the command line in-process and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// background runs a long-running command line until the test cancels it.
type background struct {
	cancel         context.CancelFunc
	done           chan int
	stdout, stderr syncBuffer
}

func startCLI(t *testing.T, args ...string) *background {
	t.Helper()
	holdGroupSlot(t, args)
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cancel: cancel, done: make(chan int, 1)}
	go func() { b.done <- Execute(ctx, args, &b.stdout, &b.stderr) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// stop cancels the command (as SIGINT does) and returns its exit code.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.done:
		b.done <- code // stop may be called again by Cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("command did not stop within 10s; stderr:\n%s", b.stderr.String())
		return -1
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startManager serves a Manager with fast timings on a free local port.
func startManager(t *testing.T, namespaces ...string) string {
	t.Helper()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast(), Namespaces: namespaces})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return lis.Addr().String()
}

// startOwner joins an Owner to the Manager at addr; stop it with the
// returned function, which leaves gracefully (Owner.Close: it drains, then
// says goodbye), within 5 s.
//
// At cleanup an Owner the test has not stopped closes with a context
// already done, which skips the drain: the test is over and its Manager
// stops next (cleanups run last-registered first). A graceful Close there
// made the last Owner holding ranges wait out the whole 5 s for a drain
// with no other Owner to take them (5 of TestDashboardCommand's 7.6 s and
// of TestDrainGate's 7.3 s).
func startOwner(t *testing.T, addr, id, ownerAddr string) (stop func()) {
	t.Helper()
	o, err := owner.New(context.Background(), owner.Config{Connection: leasehold.Connection{Insecure: true, Manager: addr, Timing: protocol.Fast()}, ID: id, Addr: ownerAddr})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeWith := func(ctx context.Context) { once.Do(func() { _ = o.Close(ctx) }) }
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closeWith(ctx)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		closeWith(ctx)
	})
	return stop
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// oneErrorLine checks stderr is exactly one "leasehold: " line containing want.
func oneErrorLine(t *testing.T, stderr, want string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "leasehold: ") || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not one line starting with %q:\n%s", "leasehold: ", stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want it to contain %q", stderr, want)
	}
}

func TestStatusJSON(t *testing.T) {
	t.Parallel()
	addr := startManager(t)

	code, stdout, stderr := cli(t, "status", "--manager", addr, "--json")
	if code != ExitOK {
		t.Fatalf("status --json: exit %d, stderr %s", code, stderr)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("status --json printed %q: %v", stdout, err)
	}
	for _, field := range []string{"epoch", "namespace", "lsn", "ranges", "free_ranges", "lookups", "owners"} {
		if _, ok := raw[field]; !ok {
			t.Errorf("status --json has no %q: %s", field, stdout)
		}
	}
	if string(raw["owners"]) != "[]" || string(raw["namespace"]) != `"default"` {
		t.Errorf("empty manager: status --json = %s; want no owners in namespace default", stdout)
	}

	// An Owner shows up as soon as its first request arrives.
	startOwner(t, addr, "kv-1", "127.0.0.1:8001")
	var st statusJSON
	waitFor(t, "kv-1 in status --json", 10*time.Second, func() bool {
		code, stdout, _ := cli(t, "status", "--manager", addr, "--json")
		if code != ExitOK {
			return false
		}
		if err := json.Unmarshal([]byte(stdout), &st); err != nil {
			t.Fatalf("status --json printed %q: %v", stdout, err)
		}
		return len(st.Owners) == 1
	})
	if o := st.Owners[0]; o.ID != "kv-1" || o.Addr != "127.0.0.1:8001" || o.Incarnation == 0 {
		t.Errorf("owner in status --json: %+v", o)
	}
	if st.Epoch == 0 || st.Ranges == 0 {
		t.Errorf("status --json: %+v; want an epoch and at least one range", st)
	}
}

func TestStatusText(t *testing.T) {
	t.Parallel()
	addr := startManager(t, "presence")
	code, stdout, stderr := cli(t, "status", "--manager", addr)
	if code != ExitOK {
		t.Fatalf("status: exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"epoch ", "namespace default: lsn 0, 1 range (1 free), 0 lookups", "namespace presence: lsn 0", "no owners"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, stdout)
		}
	}

	code, stdout, _ = cli(t, "status", "--manager", addr, "--namespace", "presence")
	if code != ExitOK || strings.Contains(stdout, "namespace default") || !strings.Contains(stdout, "namespace presence") {
		t.Errorf("status --namespace presence: exit %d:\n%s", code, stdout)
	}

	code, _, stderr = cli(t, "status", "--manager", addr, "--namespace", "nope")
	if code != ExitFailure {
		t.Errorf("status of an unknown namespace: exit %d, want %d", code, ExitFailure)
	}
	oneErrorLine(t, stderr, `unknown namespace "nope"`)
}

func TestLookupOnEmptyManager(t *testing.T) {
	t.Parallel()
	addr := startManager(t)
	code, stdout, stderr := cli(t, "lookup", "--manager", addr, "alice")
	if code != ExitFailure || stdout != "" {
		t.Errorf("lookup with no owners: exit %d, stdout %q; want exit 1 and nothing", code, stdout)
	}
	oneErrorLine(t, stderr, "no owner holds alice (key "+hexKey(keyspace.KeyOf("alice"))+") in namespace default")
}

// TestLookupAndWatch follows one Owner's life: watch prints its grants as
// changes, lookup finds it, and when it leaves watch prints a loss.
func TestLookupAndWatch(t *testing.T) {
	// The Manager starts before t.Parallel, so that its start-up reservation
	// runs out while the test waits for its turn (TestMain).
	addr := startManager(t)
	t.Parallel()
	w := startCLI(t, "watch", "--manager", addr, "--json")
	waitFor(t, "watch's first snapshot", 10*time.Second, func() bool {
		return strings.Contains(w.stdout.String(), `"event":"snapshot"`)
	})
	stopOwner := startOwner(t, addr, "kv-1", "127.0.0.1:8001")

	// A new Manager reserves the key space for one ManagerLease (2.2 s),
	// then grants.
	var found lookupJSON
	waitFor(t, "lookup to find kv-1", 15*time.Second, func() bool {
		code, stdout, _ := cli(t, "lookup", "--manager", addr, "--json", "alice")
		if code != ExitOK {
			return false
		}
		if err := json.Unmarshal([]byte(stdout), &found); err != nil {
			t.Fatalf("lookup --json printed %q: %v", stdout, err)
		}
		return true
	})
	want := lookupJSON{Key: "alice", Hash: hexKey(keyspace.KeyOf("alice")), Owner: "kv-1", Addr: "127.0.0.1:8001", LGN: found.LGN}
	if found != want || found.LGN == 0 {
		t.Errorf("lookup --json alice = %+v, want %+v with an LGN", found, want)
	}
	// The same key given raw. On a loaded machine 2 s leases may lapse and
	// be granted again between two calls, so poll.
	waitFor(t, "lookup --raw to find kv-1", 10*time.Second, func() bool {
		code, stdout, stderr := cli(t, "lookup", "--manager", addr, "--raw", want.Hash)
		if code == ExitOK && !regexp.MustCompile(`^0x[0-9a-f]{16} -> kv-1 at 127\.0\.0\.1:8001 \(lgn \d+\)\n$`).MatchString(stdout) {
			t.Fatalf("lookup --raw %s: stdout %q, stderr %q", want.Hash, stdout, stderr)
		}
		return code == ExitOK
	})

	waitFor(t, "watch to print kv-1's grants", 10*time.Second, func() bool {
		return strings.Contains(w.stdout.String(), `"event":"change"`) && strings.Contains(w.stdout.String(), `"owner":"kv-1"`)
	})
	stopOwner() // leaving: its ranges are freed at once, and their state is lost
	waitFor(t, "watch to print a loss", 10*time.Second, func() bool {
		return strings.Contains(w.stdout.String(), `"event":"loss"`)
	})
	if code := w.stop(t); code != ExitOK {
		t.Errorf("watch stopped with exit %d, stderr %s", code, w.stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(w.stdout.String()), "\n") {
		var ev struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Event == "" {
			t.Errorf("watch --json printed a line that is not an event: %q (%v)", line, err)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"manager", "--timings", "fast", "--manager-lease", "1s"}, "--manager-lease 1s is unsafe: ManagerLease (1s) must be at least OwnerLease (2s)"},
		{[]string{"manager", "--owner-lease", "2m"}, "--owner-lease 2m0s is unsafe: ManagerLease (1m5s) must be at least OwnerLease (2m0s)"},
		{[]string{"manager", "--sync", "40s"}, "--sync 40s is unsafe: SyncTimeout (1m15s) must be at least twice Sync (40s)"},
		{[]string{"manager", "--renew", "0s"}, "--renew 0s is unsafe: Renew (0s) must be positive"},
		{[]string{"manager", "--timings", "slow"}, `invalid argument "slow" for "--timings" flag: must be production or fast`},
		{[]string{"manager", "--log-level", "loud"}, `"--log-level"`},
		{[]string{"manager", "--namespace", ""}, "--namespace must not be empty"},
		{[]string{"manager", "extra"}, `unknown command "extra"`},
		{[]string{"lookup", "--raw", "xyz"}, `--raw key "xyz" is not a uint64`},
		{[]string{"lookup", "--raw", "0x"}, `--raw key "0x" is not a uint64`},
		{[]string{"lookup", "--raw", "18446744073709551616"}, "--raw key"},
		{[]string{"lookup"}, "lookup takes one KEY argument, got 0"},
		{[]string{"status", "--timeout", "0s"}, "--timeout 0s must be positive"},
		{[]string{"watch", "--namespace", ""}, "--namespace must not be empty"},
		{[]string{"status", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"stats"}, `unknown command "stats" for "leasehold" Did you mean this? status`},
	} {
		code, stdout, stderr := cli(t, tc.args...)
		if code != ExitUsage {
			t.Errorf("leasehold %s: exit %d, want %d; stderr %s", strings.Join(tc.args, " "), code, ExitUsage, stderr)
		}
		if stdout != "" {
			t.Errorf("leasehold %s printed to stdout: %q", strings.Join(tc.args, " "), stdout)
		}
		oneErrorLine(t, stderr, tc.want)
		if !strings.Contains(stderr, "--help')") {
			t.Errorf("leasehold %s: no usage hint in %q", strings.Join(tc.args, " "), stderr)
		}
	}
}

func TestUnreachableManager(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"status", "--manager", addr},
		{"status", "--manager", addr, "--json"},
		{"lookup", "--manager", addr, "alice"},
		{"watch", "--manager", addr},
	} {
		start := time.Now()
		code, stdout, stderr := cli(t, args...)
		if code != ExitFailure || stdout != "" {
			t.Errorf("leasehold %s: exit %d, stdout %q; want exit 1 and nothing", strings.Join(args, " "), code, stdout)
		}
		oneErrorLine(t, stderr, "cannot reach the manager at "+addr+": ")
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("leasehold %s took %s to give up", strings.Join(args, " "), d)
		}
	}
}

func TestManagerEnv(t *testing.T) {
	addr := closedAddr(t)
	t.Setenv(ManagerEnv, addr)
	code, _, stderr := cli(t, "status")
	if code != ExitFailure {
		t.Errorf("status: exit %d, want %d", code, ExitFailure)
	}
	oneErrorLine(t, stderr, "cannot reach the manager at "+addr)
	_, help, _ := cli(t, "status", "--help")
	if !strings.Contains(help, `(default "`+addr+`")`) {
		t.Errorf("status --help does not show $%s as the default:\n%s", ManagerEnv, help)
	}
}

var listeningLine = regexp.MustCompile(`^leasehold manager listening on (\S+) \(timings fast, replica (\d+)\)\n$`)

func TestManagerCommand(t *testing.T) {
	t.Parallel()
	m := startCLI(t, "manager", "--timings", "fast", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--namespace", "presence", "--namespace", "presence", "--namespace", "default", "--sync", "800ms")
	var addr string
	waitFor(t, "the listening line", 10*time.Second, func() bool {
		match := listeningLine.FindStringSubmatch(m.stdout.String())
		if match != nil {
			addr = match[1]
		}
		return match != nil
	})
	var metricsURL string
	waitFor(t, "the metrics URL in the log", 10*time.Second, func() bool {
		match := regexp.MustCompile(`url=(http://\S+/metrics)`).FindStringSubmatch(m.stderr.String())
		if match != nil {
			metricsURL = match[1]
		}
		return match != nil
	})

	code, stdout, stderr := cli(t, "status", "--manager", addr)
	if code != ExitOK || !strings.Contains(stdout, "namespace default:") || !strings.Contains(stdout, "namespace presence:") {
		t.Errorf("status against the manager command: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}

	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`leasehold_ranges{namespace="presence"} 1`, "leasehold_sync_requests_total ", "go_goroutines "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}

	if code := httpStatus(t, strings.TrimSuffix(metricsURL, "/metrics")+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: status %d, want 404", code)
	}

	if code := m.stop(t); code != ExitOK {
		t.Errorf("manager stopped with exit %d; stderr:\n%s", code, m.stderr.String())
	}
	if s := m.stderr.String(); !strings.Contains(s, "sync=800ms") || strings.Contains(s, "level=ERROR") {
		t.Errorf("manager log:\n%s", s)
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// --pprof serves Go's profiles on the metrics listener, and only there;
// without a metrics listener it is a usage error.
func TestManagerPprof(t *testing.T) {
	t.Parallel()
	m := startCLI(t, "manager", "--timings", "fast", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--pprof")
	var base string
	waitFor(t, "the metrics URL in the log", 10*time.Second, func() bool {
		match := regexp.MustCompile(`url=(http://\S+)/metrics`).FindStringSubmatch(m.stderr.String())
		if match != nil {
			base = match[1]
		}
		return match != nil
	})
	resp, err := http.Get(base + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("/debug/pprof/: status %d, body:\n%s", resp.StatusCode, body)
	}
	if code := httpStatus(t, base+"/debug/pprof/allocs"); code != http.StatusOK {
		t.Errorf("/debug/pprof/allocs: status %d", code)
	}
	if code := m.stop(t); code != ExitOK {
		t.Errorf("manager stopped with exit %d; stderr:\n%s", code, m.stderr.String())
	}

	code, stdout, stderr := cli(t, "manager", "--listen", "127.0.0.1:0", "--pprof", "--log-level", "warn")
	if code != ExitUsage || stdout != "" || !strings.Contains(stderr, "--pprof needs --metrics-listen") {
		t.Errorf("--pprof without --metrics-listen: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestManagerAddressInUse(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	code, stdout, stderr := cli(t, "manager", "--listen", lis.Addr().String(), "--log-level", "warn")
	if code != ExitFailure || stdout != "" {
		t.Errorf("manager on a busy address: exit %d, stdout %q", code, stdout)
	}
	oneErrorLine(t, stderr, "cannot listen on "+lis.Addr().String()+": ")

	code, _, stderr = cli(t, "manager", "--listen", "127.0.0.1:0", "--metrics-listen", lis.Addr().String(), "--log-level", "warn")
	if code != ExitFailure {
		t.Errorf("manager with a busy metrics address: exit %d", code)
	}
	oneErrorLine(t, stderr, "cannot listen on "+lis.Addr().String()+" for metrics: ")
}

func TestHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := cli(t, "--help")
	if code != ExitOK {
		t.Errorf("--help: exit %d", code)
	}
	for _, sub := range []string{"manager", "status", "lookup", "watch", "drain"} {
		if !strings.Contains(stdout, "\n  "+sub+" ") {
			t.Errorf("--help does not list %s:\n%s", sub, stdout)
		}
	}
	for sub, flags := range map[string][]string{
		"manager": {`--listen ADDR`, `(default "127.0.0.1:7400")`, "--timings production|fast", "(default production)", "--manager-lease duration", "--namespace NS", "--metrics-listen ADDR", "(default info)", "--handover duration", "--drain-gate int", "(default 1)"},
		"drain":   {"OWNER_ID", "--manager ADDR", "--namespace NS", "--json", "--drain-gate"},
		"status":  {`--manager ADDR`, `--namespace NS`, "--json", "(default 5s)"},
		"lookup":  {"--raw", "--json", "KEY"},
		"watch":   {"--json", `"event":"loss"`},
	} {
		code, stdout, _ := cli(t, sub, "--help")
		if code != ExitOK {
			t.Errorf("%s --help: exit %d", sub, code)
		}
		for _, f := range flags {
			if !strings.Contains(stdout, f) {
				t.Errorf("%s --help lacks %q:\n%s", sub, f, stdout)
			}
		}
	}
}
