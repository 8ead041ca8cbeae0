package e2e

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// TestDrainCutOff: three Managers with fast timings (4-s owner leases)
// behind proxies, three kv servers, leasehold watch --json and a
// read/write load. Twice an Owner is drained with leasehold drain while
// the leader's proxy stops forwarding its connections (everyone else's go
// on), keeping them open: the Owner reaches the leader only through a
// follower's relay, and the leader keeps a half-open stream of it.
//
//   - kv-1 is cut off, then drained: it renews through the relay, and the
//     drain's handovers go through it.
//   - kv-2 is drained, then cut off in the middle of the drain: the Manager
//     has asked it to hand its ranges over to kv-3, which is stopped
//     (SIGSTOP) for the moment, so the copies wait; kv-3 is continued just
//     after the cut, and kv-2 reports the handovers, in every request until
//     their deadline, through the relay only, on another stream than the
//     one its session was bound to.
//
// Each drain completes through the relay (the Owner holds no range), watch
// prints no loss, and every key keeps its latest acknowledged value.
func TestDrainCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	started := time.Now()
	// Renewals every second, so that on a loaded machine an answer wait
	// (half a renewal) rarely runs out with no cut, which would move an
	// Owner to a relay before its cut.
	tm := protocol.Fast()
	tm.OwnerLease, tm.Renew, tm.ManagerLease = 4*time.Second, time.Second, 4400*time.Millisecond
	g := &group{leasehold: leasehold, addrs: map[uint64]string{}, dirs: map[uint64]string{}, procs: map[uint64]*proc{},
		timing: &tm, env: envFor(t), listen: map[uint64]string{}}
	proxies := map[uint64]*proxy{}
	for id := uint64(1); id <= 3; id++ {
		g.dirs[id] = t.TempDir()
		g.addrs[id] = freeAddr(t)
		g.listen[id] = freeAddr(t)
		proxies[id] = startProxy(t, g.addrs[id], g.listen[id], fmt.Sprint(id))
	}
	for id := range g.dirs {
		g.restart(t, id)
	}
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: g.list()}
	watch := start(t, "watch", leasehold, "watch", "--manager", c.manager, "--json")
	w := &watcher{p: watch}
	servers := map[string]*proc{}
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		servers[id] = c.serve(id)
	}
	t.Cleanup(func() { _ = servers["kv-3"].cmd.Process.Signal(syscall.SIGCONT) }) // before the stop that start registered
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	settled := time.Now()
	ld := startLoad(t, c.manager, tm)
	time.Sleep(time.Second)
	if ok, fail := ld.counts(); ok == 0 {
		t.Fatalf("the load got no answer in a second (%d failures): %v", fail, ld.firstErr())
	}
	t.Logf("%s: three managers, three owners, the load running", since(started))

	drain := func(id string) {
		t.Helper()
		if out, err := command(t, leasehold, "drain", "--manager", c.manager, id).CombinedOutput(); err != nil {
			t.Fatalf("leasehold drain %s: %v: %s", id, err, out)
		}
	}
	ranges := func(id string) int {
		s, err := c.status()
		if err != nil {
			return -1
		}
		for _, o := range s.Owners {
			if o.ID == id {
				return o.Ranges
			}
		}
		return 0
	}
	// drained waits until id holds no range and the rest hold everything.
	drained := func(id string, holders ...string) time.Time {
		t.Helper()
		deadline := time.Now().Add(settleTimeout)
		for time.Now().Before(deadline) {
			if s, err := c.status(); err == nil && slices.Equal(s.holders(), holders) && s.complete() {
				return time.Now()
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s still holds %d ranges %s after its drain", id, ranges(id), settleTimeout)
		return time.Time{}
	}
	var summary []string
	round := func(what string, leader uint64, relays0 int, held0 int64, cutAt, drainAt, doneAt time.Time) {
		held, relays := proxies[leader].held.Load()-held0, relayLogs(g)-relays0
		now := g.leader(t, 0)
		line := fmt.Sprintf("%s: drained %s after the drain, %s after the cut; the proxy held %d chunks; the followers relayed %d owner streams; leader %d, now %d",
			what, doneAt.Sub(drainAt).Round(time.Millisecond), doneAt.Sub(cutAt).Round(time.Millisecond), held, relays, leader, now)
		switch {
		case held == 0:
			t.Errorf("%s: the proxy of leader %d held nothing: the cut did not cut", what, leader)
		case now != leader:
			t.Logf("%s: leader %d lost its leadership to %d, though only an Owner was cut off from it", what, leader, now)
		case relays == 0:
			t.Errorf("%s: the owner reached leader %d without it and without a relay", what, leader)
		}
		summary = append(summary, line)
		t.Logf("%s: %s", since(started), line)
	}

	// kv-1: cut off from the leader, then drained once it relays.
	leader := g.leader(t, 0)
	relays0, held0 := relayLogs(g), proxies[leader].held.Load()
	proxies[leader].cutFor("kv-1", true)
	cutAt := time.Now()
	for relayLogs(g) == relays0 {
		if time.Since(cutAt) > settleTimeout {
			t.Fatalf("no follower relayed kv-1's stream within %s of the cut", settleTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: kv-1 cut off from leader %d; a follower relays its stream %s after the cut", since(started), leader, since(cutAt))
	drainAt := time.Now()
	drain("kv-1")
	round("kv-1 cut off, then drained", leader, relays0, held0, cutAt, drainAt, drained("kv-1", "kv-2", "kv-3"))

	// kv-1 stops (SIGTERM): it leaves through the relay, which frees the
	// maintenance gate (one drain at a time) for the next drain.
	servers["kv-1"].stop()
	if st := servers["kv-1"].cmd.ProcessState; !st.Success() {
		t.Errorf("kv-1, drained and cut off from the leader, ended with %v on SIGTERM, want a clean exit", st)
	}
	member := func(id string) bool {
		s, err := c.status()
		if err != nil {
			return true
		}
		for _, o := range s.Owners {
			if o.ID == id && o.Member {
				return true
			}
		}
		return false
	}
	for member("kv-1") {
		if time.Since(drainAt) > settleTimeout {
			t.Fatalf("kv-1 is still a member %s after its drain", settleTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: kv-1 stopped and left", since(started))

	// kv-2: drained, then cut off while its handovers wait on kv-3.
	leader = g.leader(t, 0)
	relays0, held0 = relayLogs(g), proxies[leader].held.Load()
	if err := servers["kv-3"].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	drainAt = time.Now()
	drain("kv-2")
	time.Sleep(500 * time.Millisecond) // the Manager asks at once (MembershipEvery is 250 ms)
	left := ranges("kv-2")
	proxies[leader].cutFor("kv-2", true)
	cutAt = time.Now()
	if err := servers["kv-3"].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: kv-2 drained with kv-3 stopped, cut off from leader %d %s later holding %d ranges, kv-3 continued",
		since(started), leader, cutAt.Sub(drainAt).Round(time.Millisecond), left)
	if left <= 0 {
		t.Errorf("kv-2 held %d ranges when it was cut off: the cut did not land in the middle of the drain", left)
	}
	round("kv-2 drained, then cut off mid-drain", leader, relays0, held0, cutAt, drainAt, drained("kv-2", "kv-3"))

	time.Sleep(time.Second) // writes on kv-3 after the moves
	ld.stop()
	ok, fail := ld.counts()
	t.Logf("%s: the load: %d puts and gets answered, %d failed and retried (the first: %v)", since(started), ok, fail, ld.firstErr())
	for _, e := range ld.problems() {
		t.Errorf("%s", e)
	}
	// A lapse while the Owners first joined (a process stalled past its
	// lease on a loaded machine) is no part of the scenario.
	var ls []loss
	for _, l := range w.losses() {
		if l.at.After(settled) {
			ls = append(ls, l)
		} else {
			t.Logf("a loss event before the scenario, at %s: %+v", l.at.Sub(started), l)
		}
	}
	if len(ls) != 0 {
		t.Errorf("watch printed %d loss events, the first at %s: %+v", len(ls), ls[0].at.Sub(started), ls[0])
	}
	ld.checkLatest(t)
	t.Logf("summary:\n  %s", strings.Join(summary, "\n  "))
}
