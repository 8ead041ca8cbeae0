package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/protocol"
)

var stopsFlag = flag.String("e2e.stops", "3s",
	"the comma-separated lengths of the leader stops of TestLeaderStall and TestLeaderCutOff, one after the other")

// stops parses -e2e.stops.
func stops(t *testing.T) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, s := range strings.Split(*stopsFlag, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			t.Fatalf("-e2e.stops: %q is not a positive duration", s)
		}
		out = append(out, d)
	}
	return out
}

// TestLeaderStall: three Managers with fast timings (2-s owner leases),
// three kv servers, leasehold watch and a read/write load from an in-process
// frontend that talks to the kv servers directly. The leader is stopped
// with SIGSTOP for 3 s (-e2e.stops picks other lengths), longer than a
// lease, and continued: its connections stay open and answer nothing. The
// Owners leave it after the answer wait and renew with the new leader, so
// watch prints no loss, every key keeps its latest value, and the longest
// time any key could not be read or written is logged.
func TestLeaderStall(t *testing.T) {
	onlyWithAll(t)
	testLeaderOutage(t, false)
}

// TestLeaderCutOff: the same, with the leader cut off from the Owners,
// watch and the frontend by a proxy that stops forwarding but keeps their
// connections open, while it still reaches the other replicas: no election
// comes, the followers name the leader the clients cannot reach, and the
// Owners renew through a follower that relays their streams.
func TestLeaderCutOff(t *testing.T) {
	onlyWithAll(t)
	testLeaderOutage(t, true)
}

func testLeaderOutage(t *testing.T, proxied bool) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	lengths := stops(t)
	leasehold, kvBin := build(t)
	started := time.Now()
	tm := protocol.Fast()
	g := &group{leasehold: leasehold, addrs: map[uint64]string{}, dirs: map[uint64]string{}, procs: map[uint64]*proc{}, timing: &tm, env: envFor(t)}
	proxies := map[uint64]*proxy{}
	if proxied {
		g.listen = map[uint64]string{}
	}
	for id := uint64(1); id <= 3; id++ {
		g.dirs[id] = t.TempDir()
		g.addrs[id] = freeAddr(t)
		if proxied {
			// Replicas and clients reach replica id at its proxy, which
			// forwards to where it listens.
			g.listen[id] = freeAddr(t)
			proxies[id] = startProxy(t, g.addrs[id], g.listen[id], fmt.Sprint(id))
		}
	}
	for id := range g.dirs {
		g.restart(t, id)
	}
	for id := range g.procs {
		p := g.procs[id]
		t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }) // before the stop that start registered
	}
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: g.list()}
	watch := start(t, "watch", leasehold, "watch", "--manager", c.manager, "--json")
	w := &watcher{p: watch}
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		c.serve(id)
	}
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	t.Logf("%s: three managers, three owners", since(started))

	ld := startLoad(t, c.manager, tm)
	time.Sleep(time.Second)
	if ok, fail := ld.counts(); ok == 0 {
		t.Fatalf("the load got no answer in a second (%d failures): %v", fail, ld.firstErr())
	}
	what := "stopped (SIGSTOP)"
	if proxied {
		what = "cut off from the clients by its proxy"
	}
	var summary []string
	for _, d := range lengths {
		old := g.leader(t, 0)
		from := time.Now()
		ld.resetWorst()
		var held0 int64
		relays0 := relayLogs(g)
		if proxied {
			held0 = proxies[old].held.Load()
		}
		if proxied {
			proxies[old].setCut(true)
		} else if err := g.procs[old].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		if proxied {
			proxies[old].setCut(false)
		} else if err := g.procs[old].cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Requests that failed while it was out must succeed again before
		// their key's unavailability is known, and streams relayed around
		// the leader go back to it (after 16 answer waits, 4 s) before the
		// next round.
		time.Sleep(5 * time.Second)
		now := g.leader(t, 0)
		worst, key, slowest := ld.worst()
		var lossesSince int
		for _, l := range w.losses() {
			if l.at.After(from) {
				lossesSince++
			}
		}
		line := fmt.Sprintf("leader %d %s for %s: leader now %d; watch printed %d losses; longest unavailability of any key %s%s; slowest request %s",
			old, what, d, now, lossesSince, worst.Round(time.Millisecond), keyNote(key), slowest.Round(time.Millisecond))
		if proxied {
			held, relays := proxies[old].held.Load()-held0, relayLogs(g)-relays0
			line += fmt.Sprintf("; the proxy held %d chunks of the clients' connections; the followers relayed %d owner streams", held, relays)
			switch {
			case held == 0:
				t.Errorf("the proxy of leader %d held nothing: the cut did not cut", old)
			case now != old:
				// An election the cut did not cause (a heartbeat late on a
				// loaded machine, with 250-ms election timeouts) turns the
				// round into a failover, which must lose nothing either.
				t.Logf("leader %d lost its leadership to %d during the round, though only the clients were cut off from it", old, now)
			case relays == 0:
				t.Errorf("the owners renewed with leader %d without reaching it and without a relay", old)
			}
		}
		summary = append(summary, line)
		t.Logf("%s: %s", since(started), line)
	}
	ld.stop()
	ok, fail := ld.counts()
	t.Logf("%s: the load: %d puts and gets answered, %d failed and retried (the first: %v)", since(started), ok, fail, ld.firstErr())
	for _, e := range ld.problems() {
		t.Errorf("%s", e)
	}
	if ls := w.losses(); len(ls) != 0 {
		t.Errorf("watch printed %d loss events, the first at %s: %+v", len(ls), ls[0].at.Sub(started), ls[0])
	}
	ld.checkLatest(t)
	t.Logf("summary (%s):\n  %s", what, strings.Join(summary, "\n  "))
}

// relayLogs counts the relayed owner streams the managers logged.
func relayLogs(g *group) int {
	n := 0
	for _, p := range g.procs {
		n += strings.Count(p.stderr.String(), "relaying an owner's lease stream")
	}
	return n
}

func keyNote(k string) string {
	if k == "" {
		return " (no request failed)"
	}
	return " (" + k + ")"
}

// load reads and writes 200 keys over and over from an in-process kv
// client (a frontend with its own Lookup, routing each request to the
// key's kv server directly), one worker per slice of keys: each read must
// find the value the worker last put and had acknowledged (the loss of an
// acknowledged write shows as "not found" or an older value). It records
// how long each key went without a successful request, from the start of
// the first that failed to the end of the next that succeeded.
type load struct {
	c       *kv.Client
	manager string
	cancel  context.CancelFunc
	done    sync.WaitGroup

	ok, fail atomic.Int64

	mu         sync.Mutex
	latest     map[string]string // acknowledged
	tried      map[string]string // a put that failed since, which may or may not have been applied
	failing    map[string]time.Time
	worstGap   time.Duration
	worstKey   string
	slowest    time.Duration // the slowest request, answered or not
	firstError error
	bad        []string
}

func startLoad(t *testing.T, manager string, tm protocol.Timing) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := kv.NewClient(ctx, kv.ClientConfig{CertsDir: certsDirFor(t), Manager: manager, Timing: tm, MaxAttempts: 1, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, settleTimeout)
	defer scancel()
	if err := c.WaitSynced(sctx); err != nil {
		t.Fatal(err)
	}
	ld := &load{c: c, manager: manager, cancel: cancel, latest: map[string]string{}, tried: map[string]string{}, failing: map[string]time.Time{}}
	for w := range workers {
		var ks []string
		for i := w; i < nkeys; i += workers {
			ks = append(ks, fmt.Sprintf("key-%03d", i))
		}
		ld.done.Go(func() { ld.work(ctx, ks) })
	}
	t.Cleanup(ld.stop)
	return ld
}

func (ld *load) work(ctx context.Context, ks []string) {
	for n := 0; ctx.Err() == nil; n++ {
		for _, k := range ks {
			if ctx.Err() != nil {
				return
			}
			// Read the key: it must hold the value last put.
			ld.mu.Lock()
			want, maybe := ld.latest[k], ld.tried[k]
			ld.mu.Unlock()
			at := time.Now()
			got, err := ld.c.Get(ctx, k)
			ld.took(at)
			switch {
			case errors.Is(err, kv.ErrNotFound):
				if want != "" {
					ld.wrong(fmt.Sprintf("get %q: not found, though %q was put and acknowledged", k, want))
				}
			case err != nil:
				ld.failed(k, at, "", err)
				continue
			case string(got) != want && (maybe == "" || string(got) != maybe):
				ld.wrong(fmt.Sprintf("get %q = %q, want %q, the value last put", k, got, want))
			}
			// Write it anew.
			v := fmt.Sprintf("v%d-%s", n, k)
			pat := time.Now()
			err = ld.c.Put(ctx, k, []byte(v))
			ld.took(pat)
			if err != nil {
				ld.failed(k, at, v, err)
				continue
			}
			ld.put(k, v)
			ld.succeeded(k)
		}
	}
}

// took records the time a request started at took.
func (ld *load) took(at time.Time) {
	d := time.Since(at)
	ld.mu.Lock()
	ld.slowest = max(ld.slowest, d)
	ld.mu.Unlock()
}

func (ld *load) put(k, v string) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.latest[k] = v
	delete(ld.tried, k)
}

func (ld *load) failed(k string, at time.Time, v string, err error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if v != "" {
		ld.tried[k] = v
	}
	if errors.Is(err, context.Canceled) { // the load stopped
		return
	}
	ld.fail.Add(1)
	if _, ok := ld.failing[k]; !ok {
		ld.failing[k] = at
	}
	if ld.firstError == nil {
		ld.firstError = err
	}
}

func (ld *load) succeeded(k string) {
	ld.ok.Add(1)
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if from, ok := ld.failing[k]; ok {
		if gap := time.Since(from); gap > ld.worstGap {
			ld.worstGap, ld.worstKey = gap, k
		}
		delete(ld.failing, k)
	}
}

func (ld *load) wrong(s string) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.bad = append(ld.bad, s)
}

func (ld *load) counts() (ok, fail int64) { return ld.ok.Load(), ld.fail.Load() }

func (ld *load) firstErr() error {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.firstError
}

func (ld *load) problems() []string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return slices.Clone(ld.bad)
}

// resetWorst starts a new measurement of the longest unavailability.
func (ld *load) resetWorst() {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.worstGap, ld.worstKey, ld.slowest = 0, "", 0
}

// worst returns the longest unavailability since resetWorst, counting keys
// still failing up to now, the key concerned and the slowest request.
func (ld *load) worst() (time.Duration, string, time.Duration) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	gap, key := ld.worstGap, ld.worstKey
	for k, from := range ld.failing {
		if d := time.Since(from); d > gap {
			gap, key = d, k
		}
	}
	return gap, key, ld.slowest
}

func (ld *load) stop() {
	ld.cancel()
	ld.done.Wait()
	_ = ld.c.Close()
}

// checkLatest reads every key back: each must hold its latest acknowledged
// value (or the value of a put that failed after it, which the server may
// have applied before the answer was lost).
func (ld *load) checkLatest(t *testing.T) {
	t.Helper()
	c, err := kv.NewClient(context.Background(), kv.ClientConfig{CertsDir: certsDirFor(t), Manager: ld.manager, Timing: protocol.Fast(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if len(ld.latest) != nkeys {
		t.Errorf("only %d of %d keys were ever put", len(ld.latest), nkeys)
	}
	for k, want := range ld.latest {
		got, err := c.Get(context.Background(), k)
		if err != nil || string(got) != want && string(got) != ld.tried[k] {
			t.Errorf("get %q = %q, %v; want its latest value %q", k, got, err, want)
		}
	}
}
