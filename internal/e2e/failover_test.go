package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// TestManagerFailover is the replicated Manager's acceptance scenario, as
// a user would run it: three Managers in a Raft group, three kv servers,
// leasehold watch, and 48 keys (200 with LEASEHOLD_E2E=all). The leader is
// killed with SIGKILL, once (twice with LEASEHOLD_E2E=all; each time the
// killed one is restarted and rejoins as a follower), then all three at
// once and restarted from their data directories. Through all
// of it no owner's range count changes, watch prints no loss, and every key
// reads back its value.
func TestManagerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	t.Parallel()
	leasehold, kvBin := build(t)
	started := time.Now()
	g := newGroup(t, leasehold, 3)
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: g.list()}
	plaintextRefused(t, leasehold, g.addrs[1])

	watch := start(t, "watch", leasehold, "watch", "--manager", c.manager, "--json")
	w := &watcher{p: watch}
	var servers []*proc
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		servers = append(servers, c.serve(id))
	}
	// The kv servers stop before the Managers the test restarted (t.Cleanup
	// would stop those first): a server stopping hands its ranges over
	// through the Manager, and without one it waits out its stop timeout.
	defer func() {
		for _, p := range servers {
			p.stop()
		}
	}()
	st := c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	counts := rangeCounts(st)
	ks := make([]string, nkeys)
	latest := map[string]string{}
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%03d", i)
		latest[ks[i]] = "v1-" + ks[i]
	}
	c.putAll(ks, latest)
	t.Logf("%s: three managers, three owners, %d keys put", since(started), len(ks))

	check := func(when string) {
		t.Helper()
		for k, res := range c.getAll(ks) {
			if !res.found || res.value != latest[k] {
				t.Fatalf("%s: get %q = %+v, want %q", when, k, res, latest[k])
			}
		}
		s, err := c.status()
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got := rangeCounts(s); !maps.Equal(got, counts) {
			t.Fatalf("%s: owners hold %v ranges, before %v", when, got, counts)
		}
		if ls := w.losses(); len(ls) != 0 {
			t.Fatalf("%s: watch printed %d loss events, the first at %s: %+v", when, len(ls), ls[0].at.Sub(started), ls[0])
		}
	}
	check("before any failover")

	// A frontend loop reads the keys over and over while managers die.
	var reads, bad atomic.Int64
	var firstBad atomic.Value
	stopLoop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			for _, k := range ks {
				select {
				case <-stopLoop:
					return
				default:
				}
				out, err := c.run("get", k)
				reads.Add(1)
				if got := strings.TrimSuffix(out, "\n"); err != nil || got != latest[k] {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("get %q = %q, %v (want %q)", k, got, err, latest[k]))
				}
			}
		}
	}()
	defer func() {
		close(stopLoop)
		<-loopDone
		t.Logf("the frontend loop read %d keys during the failovers, %d wrong or failed", reads.Load(), bad.Load())
		if bad.Load() != 0 {
			t.Errorf("%d reads failed during the failovers; the first: %v", bad.Load(), firstBad.Load())
		}
	}()

	for range 2 { // the second kills a leader elected after a failover
		old := g.leader(t, 0)
		killedAt := time.Now()
		g.kill(t, old)
		nl := g.leader(t, old)
		t.Logf("%s: killed leader %d; leasehold status reports leader %d %s after the kill",
			since(started), old, nl, time.Since(killedAt).Round(time.Millisecond))
		check(fmt.Sprintf("after killing leader %d", old))
		g.restart(t, old)
		g.waitRole(t, old, "follower")
		t.Logf("%s: manager %d rejoined as a follower", since(started), old)
	}

	// All three at once, restarted from their data directories within an
	// owner lease.
	killedAt := time.Now()
	for id := range g.procs {
		g.kill(t, id)
	}
	for id := range g.procs {
		g.restart(t, id)
	}
	nl := g.leader(t, 0)
	t.Logf("%s: all three killed and restarted; leader %d %s after the kill", since(started), nl, time.Since(killedAt).Round(time.Millisecond))
	check("after restarting all three")
}

// failoverTiming is the fast profile with leases long enough to restart
// three processes by hand (well, by test) within one.
var failoverTiming = func() protocol.Timing {
	t := protocol.Fast()
	t.OwnerLease, t.Renew, t.ManagerLease = 6*time.Second, time.Second, 6600*time.Millisecond
	t.Sync, t.SyncTimeout, t.LogRetention = time.Second, 7*time.Second, 30*time.Second
	return t
}()

// group is a Raft group of Manager processes on 127.0.0.1.
type group struct {
	env       []string // of the cluster status processes: envFor the test
	leasehold string
	addrs     map[uint64]string
	dirs      map[uint64]string
	procs     map[uint64]*proc
	timing    *protocol.Timing  // nil: failoverTiming
	listen    map[uint64]string // where each listens, when not at its address (a proxy's)
	extra     []string          // more flags for every replica
}

func newGroup(t *testing.T, leasehold string, n int) *group {
	t.Helper()
	g := &group{leasehold: leasehold, addrs: map[uint64]string{}, dirs: map[uint64]string{}, procs: map[uint64]*proc{}, env: envFor(t)}
	for id := uint64(1); id <= uint64(n); id++ {
		g.addrs[id] = freeAddr(t)
		g.dirs[id] = t.TempDir()
	}
	for id := range g.addrs {
		g.restart(t, id)
	}
	return g
}

func (g *group) list() string {
	var out []string
	for id := uint64(1); id <= uint64(len(g.addrs)); id++ {
		out = append(out, g.addrs[id])
	}
	return strings.Join(out, ",")
}

func (g *group) peers() string {
	var out []string
	for id := uint64(1); id <= uint64(len(g.addrs)); id++ {
		out = append(out, fmt.Sprintf("%d=%s", id, g.addrs[id]))
	}
	return strings.Join(out, ",")
}

// restart starts Manager id from its data directory.
func (g *group) restart(t *testing.T, id uint64) {
	t.Helper()
	tm := failoverTiming
	if g.timing != nil {
		tm = *g.timing
	}
	listen := []string{"--listen", g.addrs[id]}
	if g.listen != nil {
		listen = []string{"--listen", g.listen[id], "--advertise", g.addrs[id]}
	}
	p := start(t, fmt.Sprintf("manager-%d", id), g.leasehold, append([]string{"manager", "--timings", "fast",
		"--owner-lease", tm.OwnerLease.String(), "--renew", tm.Renew.String(), "--manager-lease", tm.ManagerLease.String(),
		"--sync", tm.Sync.String(), "--sync-timeout", tm.SyncTimeout.String(), "--log-retention", tm.LogRetention.String(),
		"--id", fmt.Sprint(id), "--data-dir", g.dirs[id], "--peers", g.peers()}, append(listen, g.extra...)...)...)
	p.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	g.procs[id] = p
}

func (g *group) kill(t *testing.T, id uint64) {
	t.Helper()
	g.procs[id].kill(t)
	<-g.procs[id].done
}

// clusterStatus is leasehold cluster status --json.
type clusterStatus struct {
	Leader   uint64 `json:"leader"`
	Managers []struct {
		ID   uint64 `json:"id"`
		Role string `json:"role"`
	} `json:"managers"`
}

func (g *group) status() (clusterStatus, error) {
	var s clusterStatus
	cmd := exec.Command(g.leasehold, "cluster", "status", "--manager", g.list(), "--json", "--timeout", "1s")
	cmd.Env = g.env
	out, err := cmd.Output()
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(out, &s)
}

// leader polls leasehold cluster status until it reports a leader other
// than not, for at most settleTimeout (a guard against hangs; the time it
// takes is logged by the caller and measured by leasehold-bench failover).
func (g *group) leader(t *testing.T, not uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for time.Now().Before(deadline) {
		if s, err := g.status(); err == nil && s.Leader != 0 && s.Leader != not {
			return s.Leader
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no leader other than %d within %s", not, settleTimeout)
	return 0
}

func (g *group) waitRole(t *testing.T, id uint64, role string) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for time.Now().Before(deadline) {
		if s, err := g.status(); err == nil {
			for _, m := range s.Managers {
				if m.ID == id && m.Role == role {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("manager %d is not a %s within %s", id, role, settleTimeout)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func rangeCounts(s status) map[string]int {
	out := map[string]int{}
	for _, o := range s.Owners {
		out[o.ID] = o.Ranges
	}
	return out
}
