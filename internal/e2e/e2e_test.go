package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/protocol"
)

// binDir holds the binaries build compiles, once for all the tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	// A run of the whole package starts linking the binaries at once, so
	// that the tests that need none (the Python client's) run meanwhile
	// instead of before it (build_test.go says in which order); a run of
	// chosen tests (-run) or -short builds only what a test asks for.
	flag.Parse()
	var prebuild sync.WaitGroup
	if !testing.Short() && flag.Lookup("test.run").Value.String() == "" {
		prebuilding = true
		prebuild.Go(func() {
			_ = linkFirst()
			_ = linkKV()
		})
	}
	sideBySide()
	goleak.VerifyTestMain(runThenWait{m, &prebuild}, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// defaultParallel is how many tests of the default set run at once unless
// -parallel says otherwise: all four that call t.Parallel (the two
// scenarios and the Python client's two checks).
const defaultParallel = 4

// sideBySide lets the default set's tests run all at once: go test's
// -parallel defaults to GOMAXPROCS, two on a machine of two cores, which
// ran the Python client's checks only once TestKVScenario and
// TestGatewayScenario were over (with TestDemo and
// TestEditedDataDirFailsLoudly, then in the default set, 6 s more of the
// package's 22), though each scenario spends most of its time waiting on
// the real leases and timers of its processes, not on a core. With LEASEHOLD_E2E=all, or a
// -parallel given, it leaves go test's setting as it is.
func sideBySide() {
	if allScenarios() {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(max(defaultParallel, runtime.GOMAXPROCS(0))))
	}
}

// runThenWait runs the tests, then waits for wg: a build the tests never
// asked for is over before goleak looks for goroutines left running.
type runThenWait struct {
	m  *testing.M
	wg *sync.WaitGroup
}

func (r runThenWait) Run() int {
	code := r.m.Run()
	r.wg.Wait()
	return code
}

const (
	// settleTimeout bounds every wait for the Manager's assignment.
	settleTimeout = 20 * time.Second
	// quiet is how long the lease table must stay unchanged to count as
	// settled: recalls and grants are pushed at once, so a transition still
	// under way changes it well within this.
	quiet = time.Second
	// workers run kv put and kv get processes in parallel.
	workers = 8
	// slack is added to the documented notification bound for what the
	// bound does not count: process scheduling and pipes on a loaded test
	// machine.
	slack = 3 * time.Second
	nkeys = 200
)

// TestKVScenario is the acceptance scenario: a Manager, three kv servers and
// a watcher as real processes; 24 keys (200 with LEASEHOLD_E2E=all) put and
// read back; one server killed
// with SIGKILL, its loss notified within the documented bound, its keys
// gone (never an old value) and the others intact; a fourth server joins
// and the keys that stayed put still read back.
//
// Soft state can also be lost by accident: a process stalled for longer than
// a lease (2 s here) on a loaded machine loses its leases. The guarantee
// then is recovery notification, so a key that should have kept its value
// may read "not found" only if watch printed a loss notification covering
// it after it was put. A wrong value is never accepted.
func TestKVScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	t.Parallel()
	leasehold := buildLeasehold(t)
	tm := protocol.Fast()
	started := time.Now()

	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: buildKV(t), manager: addr} // kv may link while the Manager starts

	// A Manager grants nothing for ManagerLease after it starts
	// (docs/design.md rule 9): the watcher, the servers (side by side), the
	// plaintext check and the router start meanwhile.
	watch := start(t, "watch", leasehold, "watch", "--manager", addr, "--json")
	w := &watcher{p: watch}
	servers := c.serveAll("kv-1", "kv-2", "kv-3")
	plaintextRefused(t, leasehold, addr)
	r := newRouter(t, addr)

	// Three owners share the 3 × 64 virtual nodes: 192 ranges, none free.
	st := c.settleOn(r, "kv-1", "kv-2", "kv-3")
	if st.sumRanges() != 192 {
		t.Fatalf("three owners hold %d ranges, want 192", st.sumRanges())
	}
	ks := make([]string, cliKeys())
	latest := map[string]string{}
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%03d", i)
		latest[ks[i]] = "v1-" + ks[i]
	}
	putAt := c.putAll(ks, latest)
	t.Logf("%s: %d keys put", since(started), len(ks))
	for k, res := range c.getAll(ks) {
		c.expect(w, k, res, latest[k], putAt[k])
	}
	before := r.owners(t, st.LSN, ks)
	t.Logf("%s: %d keys read back", since(started), len(ks))

	// Kill one owner with SIGKILL: no goodbye, its leases must run out.
	dead := "kv-2"
	var deadKeys []string
	for _, k := range ks {
		if before[k] == dead {
			deadKeys = append(deadKeys, k)
		}
	}
	if len(deadKeys) == 0 {
		t.Fatalf("no key is on %s", dead)
	}
	killedAt := time.Now()
	servers[dead].kill(t)

	// Only a loss that names the ranges counts here: a loss of "all" ranges
	// says the watcher lost touch with the Manager, not that it saw this
	// loss.
	bound := killBound(tm)
	deadline := killedAt.Add(bound + slack)
	var last time.Time
	for _, k := range deadKeys {
		at, ok := w.coveredAt(k, killedAt, time.Until(deadline), false)
		if !ok {
			t.Fatalf("watch printed no loss notification covering %q (on %s) within %s (+%s slack) of the kill", k, dead, bound, slack)
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("%s: loss notifications for all %d keys of %s within %s of the kill (bound %s)",
		since(started), len(deadKeys), dead, last.Sub(killedAt).Round(time.Millisecond), bound)

	// Two owners hold every range; the dead one holds none.
	st = c.settleOn(r, "kv-1", "kv-3")
	after := r.owners(t, st.LSN, ks)
	results := c.getAll(ks)
	for _, k := range ks {
		switch {
		case before[k] == dead:
			if results[k].found {
				t.Errorf("get %q = %q after its server %s was killed, want not found", k, results[k].value, dead)
			}
		case after[k] != before[k]:
			t.Errorf("%q moved from %s to %s, though its server stayed", k, before[k], after[k])
		default:
			c.expect(w, k, results[k], latest[k], putAt[k])
		}
	}
	t.Logf("%s: %d keys of %s not found, the others read back", since(started), len(deadKeys), dead)
	for _, k := range deadKeys {
		latest[k] = "v2-" + k
	}
	for k, at := range c.putAll(deadKeys, latest) {
		putAt[k] = at
	}
	for k, res := range c.getAll(deadKeys) {
		c.expect(w, k, res, latest[k], putAt[k])
	}

	// A fourth server joins and takes ranges from the others, without
	// migration: the keys that move may be lost, the others may not.
	joinedAt := time.Now()
	servers["kv-4"] = c.serve("kv-4")
	st = c.settleOn(r, "kv-1", "kv-3", "kv-4")
	final := r.owners(t, st.LSN, ks)
	results = c.getAll(ks)
	moved, kept := 0, 0
	for _, k := range ks {
		res := results[k]
		switch {
		case final[k] != after[k] && final[k] != "kv-4":
			t.Errorf("%q moved from %s to %s; only moves to the new server are expected", k, after[k], final[k])
		case final[k] != after[k]:
			moved++
			if res.found && res.value != latest[k] {
				t.Errorf("get %q = %q after it moved to kv-4, want %q or not found", k, res.value, latest[k])
			}
			if !res.found && !w.covered(k, joinedAt, tm.NotificationBound()+slack) {
				t.Errorf("%q moved to kv-4 and lost its value, but no loss notification covers it", k)
			}
		default:
			kept++
			c.expect(w, k, res, latest[k], putAt[k])
		}
	}
	if moved == 0 || kept == 0 {
		t.Errorf("%d keys moved to kv-4 and %d stayed: want some of each", moved, kept)
	}
	t.Logf("%s: kv-4 joined; %d keys moved to it, %d stayed and read back", since(started), moved, kept)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// killBound is the bound on a loss notification counted from the kill of
// the Owner that held the ranges: the Manager frees them when their
// reservation ends, at most ManagerLease × (1 + MaxDrift) after the kill,
// and every live Lookup reports the loss within NotificationBound of that
// (docs/protocol.md). With protocol.Fast it is 2.31 s + 2.625 s ≈ 4.94 s.
func killBound(tm protocol.Timing) time.Duration {
	return time.Duration(float64(tm.ManagerLease)*(1+tm.MaxDrift)) + tm.NotificationBound()
}

// goBuild runs go build -o out pkgs in the module's root: out is a file for
// one package, or a directory ending in a separator. The binaries
// are linked without DWARF (-ldflags=-w): the scenarios run them and never
// debug them, and DWARF is a third of the linker's work, 3 s of CPU of the
// 9 the three binaries of go test ./... took to link. A panic's stack
// trace and /debug/pprof need only the symbol table, which stays.
func goBuild(out string, pkgs ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	cmd := exec.Command(goBin, append([]string{"build", "-ldflags=-w", "-o", out}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, b)
	}
	return nil
}

// proc is a running child process whose stdout lines are kept.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{} // closed when the process has exited

	mu    sync.Mutex
	lines []line        // guarded by mu
	more  chan struct{} // guarded by mu; closed and replaced at each line
}

type line struct {
	at   time.Time
	text string
}

// start starts a process; t.Cleanup stops it (SIGTERM, then SIGKILL) and
// shows its stderr if the test failed.
func start(t *testing.T, name, path string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(path, args...), done: make(chan struct{}), more: make(chan struct{})}
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.Env = envFor(t)
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, line{time.Now(), sc.Text()})
			close(p.more)
			p.more = make(chan struct{})
			p.mu.Unlock()
		}
		_ = p.cmd.Wait() // after the last read, as StdoutPipe requires
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			lines, _ := p.snapshot()
			var out []string
			for _, l := range lines[max(0, len(lines)-20):] {
				out = append(out, l.at.Format("15:04:05.000 ")+l.text)
			}
			t.Logf("%s (%s)\nstdout, the last lines:\n%s\nstderr:\n%s", name, strings.Join(p.cmd.Args, " "),
				strings.Join(out, "\n"), tail(p.stderr.String(), 30))
		}
	})
	return p
}

// stop asks the process to end, and kills it if it does not within 5 s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.done
}

// snapshot returns the lines so far, and a channel closed at the next one.
func (p *proc) snapshot() ([]line, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines, p.more
}

// waitLine waits for a stdout line starting with prefix.
func (p *proc) waitLine(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		lines, more := p.snapshot()
		for _, l := range lines {
			if strings.HasPrefix(l.text, prefix) {
				return l.text
			}
		}
		select {
		case <-more:
		case <-p.done:
			t.Fatalf("%s exited (%v) before printing %q; stderr:\n%s", p.name, p.cmd.ProcessState, prefix, tail(p.stderr.String(), 20))
		case <-deadline:
			t.Fatalf("%s printed no line %q within %s; stderr:\n%s", p.name, prefix, timeout, tail(p.stderr.String(), 20))
		}
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// watcher reads the loss notifications that leasehold watch --json prints.
type watcher struct{ p *proc }

type loss struct {
	at     time.Time
	all    bool
	ranges []keyspace.Range
}

// losses parses the loss events printed so far.
func (w *watcher) losses() []loss {
	lines, _ := w.p.snapshot()
	var out []loss
	for _, l := range lines {
		var ev struct {
			Event  string `json:"event"`
			All    bool   `json:"all"`
			Ranges []struct {
				Start string `json:"start"`
				End   string `json:"end"`
			} `json:"ranges"`
		}
		if json.Unmarshal([]byte(l.text), &ev) != nil || ev.Event != "loss" {
			continue
		}
		ls := loss{at: l.at, all: ev.All}
		for _, r := range ev.Ranges {
			ls.ranges = append(ls.ranges, keyspace.Range{Start: hexKey(r.Start), End: hexKey(r.End)})
		}
		out = append(out, ls)
	}
	return out
}

// hexKey parses watch's 0x-hex keys; 0x10000000000000000, the end of the
// key space, is End 0.
func hexKey(s string) keyspace.Key {
	k, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return 0
	}
	return keyspace.Key(k)
}

// coveredAt waits up to timeout for a loss notification printed after from
// that covers key, and returns when it was read. A loss of all ranges
// counts if allOK.
func (w *watcher) coveredAt(key string, from time.Time, timeout time.Duration, allOK bool) (time.Time, bool) {
	k := keyspace.KeyOf(key)
	deadline := time.After(timeout)
	for {
		_, more := w.p.snapshot()
		for _, l := range w.losses() {
			if l.at.After(from) && (l.all && allOK || slices.ContainsFunc(l.ranges, func(r keyspace.Range) bool { return r.Contains(k) })) {
				return l.at, true
			}
		}
		select {
		case <-more:
		case <-w.p.done:
			return time.Time{}, false
		case <-deadline:
			return time.Time{}, false
		}
	}
}

// covered reports whether a loss notification printed after from, within
// timeout, covers key; a loss of all ranges does.
func (w *watcher) covered(key string, from time.Time, timeout time.Duration) bool {
	_, ok := w.coveredAt(key, from, timeout, true)
	return ok
}

// cli runs the short-lived commands.
type cli struct {
	t             *testing.T
	leasehold, kv string
	manager       string
}

// serve starts kv serve with the given ID and waits until it serves.
func (c *cli) serve(id string) *proc {
	c.t.Helper()
	ownerCert(c.t, id)
	p := start(c.t, id, c.kv, "serve", "--manager", c.manager, "--listen", "127.0.0.1:0", "--id", id)
	p.waitLine(c.t, "kv serving on ", 10*time.Second)
	return p
}

// serveAll starts kv serve with each ID, side by side, and waits until
// each serves.
func (c *cli) serveAll(ids ...string) map[string]*proc {
	c.t.Helper()
	servers := map[string]*proc{}
	for _, id := range ids {
		ownerCert(c.t, id)
		servers[id] = start(c.t, id, c.kv, "serve", "--manager", c.manager, "--listen", "127.0.0.1:0", "--id", id)
	}
	for _, id := range ids {
		servers[id].waitLine(c.t, "kv serving on ", 10*time.Second)
	}
	return servers
}

// status is the output of leasehold status --json.
type status struct {
	LSN        keyspace.LSN `json:"lsn"`
	Ranges     int          `json:"ranges"`
	FreeRanges int          `json:"free_ranges"`
	Owners     []struct {
		ID     string  `json:"id"`
		Addr   string  `json:"addr"`
		Member bool    `json:"member"`
		Ranges int     `json:"ranges"`
		Share  float64 `json:"share"`
	} `json:"owners"`
}

// holders returns the IDs of the owners holding ranges, sorted.
func (s status) holders() []string {
	var ids []string
	for _, o := range s.Owners {
		if o.Ranges > 0 {
			ids = append(ids, o.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func (s status) sumRanges() int {
	n := 0
	for _, o := range s.Owners {
		n += o.Ranges
	}
	return n
}

// complete reports whether the owners hold the whole key space: no free
// range, and shares that add up to 1.
func (s status) complete() bool {
	share := 0.0
	for _, o := range s.Owners {
		share += o.Share
	}
	return s.FreeRanges == 0 && math.Abs(share-1) < 1e-9
}

func (c *cli) status() (status, error) {
	cmd := command(c.t, c.leasehold, "status", "--manager", c.manager, "--json")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return status{}, fmt.Errorf("leasehold status: %w", err)
	}
	var s status
	if err := json.Unmarshal(out, &s); err != nil {
		return status{}, fmt.Errorf("leasehold status: %w in %q", err, out)
	}
	return s, nil
}

// settle polls leasehold status until ok holds of a status that covers the
// whole key space and the table (its LSN) has not changed for quiet.
func (c *cli) settle(what string, ok func(status) bool) status {
	c.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	var last status
	var lastErr error
	var since time.Time
	for time.Now().Before(deadline) {
		s, err := c.status()
		switch {
		case err != nil:
			lastErr, since = err, time.Time{}
		case !ok(s) || !s.complete():
			last, since = s, time.Time{}
		case since.IsZero() || s.LSN != last.LSN:
			last, since = s, time.Now()
		case time.Since(since) >= quiet:
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := json.Marshal(last)
	c.t.Fatalf("status did not settle on %s within %s; last %s (error: %v)", what, settleTimeout, b, lastErr)
	return status{}
}

// router is an in-process Lookup, to learn which server owns each key.
type router struct{ l *lookup.Lookup }

func newRouter(t *testing.T, manager string) *router {
	t.Helper()
	l, err := lookup.New(context.Background(), lookup.Config{Connection: leasehold.Connection{Manager: manager, Timing: protocol.Fast(), CertsDir: certsDirFor(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &router{l: l}
}

// owners waits until the router's copy reaches lsn and returns the owner of
// each key.
func (r *router) owners(t *testing.T, lsn keyspace.LSN, ks []string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for r.l.LSN() < lsn {
		if time.Now().After(deadline) {
			t.Fatalf("the lookup's copy is at LSN %d, want %d", r.l.LSN(), lsn)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := map[string]string{}
	for _, k := range ks {
		route, ok := r.l.Lookup(keyspace.KeyOf(k))
		if !ok {
			t.Fatalf("no route for %q at LSN %d", k, lsn)
		}
		out[k] = route.Owner
	}
	return out
}
