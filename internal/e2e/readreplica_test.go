package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lh "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/protocol"
)

// Read replicas under Lookup load (docs/operations.md, "Read replicas"):
// one voter and two read replicas (leasehold manager --role read-replica,
// added with leasehold cluster add --read-replica), three kv servers, and
// Lookups in this process — half given every replica, half only the read
// replicas — each recording the loss notifications it raises. Faults, one
// after the other, each with a kv server SIGKILLed while it lasts, so the
// Manager records losses the Lookups must be told of:
//
//	(a) read replica 2 SIGSTOPped for 3 s (its Lookups leave it after the
//	    answer wait, rule 19, for their next choice);
//	(b) read replica 3 SIGKILLed and restarted from its data directory
//	    3 s later;
//
// and a second round of both. It runs with LEASEHOLD_E2E=all, alone
// (all_test.go says what covers read replicas in go test ./...).
//
// For every loss the voter logs (the change applied at real time T), every
// Lookup raises a notification covering its first range by T +
// NotificationBound + StaleBound × (1 + 2 × MaxDrift) — 2.9 s with the fast
// timings (docs/protocol.md, "Why recovery notification holds") — plus a
// 500-ms allowance for a process's timers on a loaded two-core machine;
// the worst delay is logged. The voter keeps its quorum alone throughout.

// readReplicaSlack is the allowance for late timers on a loaded machine.
const readReplicaSlack = 500 * time.Millisecond

// notifier is a Lookup and the loss notifications it raised.
type notifier struct {
	l    *lookup.Lookup
	mu   sync.Mutex
	seen []notified
}

type notified struct {
	at     time.Time
	all    bool
	ranges []keyspace.Range
}

// covered returns when n first raised a notification covering key at or
// after from, and false if it did not.
func (n *notifier) covered(key keyspace.Key, from time.Time) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.seen {
		if s.at.Before(from) {
			continue
		}
		if s.all {
			return s.at, true
		}
		for _, r := range s.ranges {
			if r.Contains(key) {
				return s.at, true
			}
		}
	}
	return time.Time{}, false
}

// recordedLoss is a loss notification the voter logged.
type recordedLoss struct {
	at    time.Time
	first keyspace.Key
}

// recordedLosses parses the voter's JSON log.
func recordedLosses(t *testing.T, p *proc) []recordedLoss {
	t.Helper()
	var out []recordedLoss
	for _, ln := range strings.Split(p.stderr.String(), "\n") {
		var rec struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			First string    `json:"first"`
		}
		if json.Unmarshal([]byte(ln), &rec) != nil || rec.Msg != "loss notification" {
			continue
		}
		// "[00c9aa87ac9f0f0d, 00edefcdd2b14ee6)"
		hexStart, _, _ := strings.Cut(strings.TrimPrefix(rec.First, "["), ",")
		k, err := strconv.ParseUint(hexStart, 16, 64)
		if err != nil {
			t.Fatalf("the voter logged a loss of %q", rec.First)
		}
		out = append(out, recordedLoss{rec.Time, keyspace.Key(k)})
	}
	return out
}

func TestReadReplicaFaults(t *testing.T) {
	onlyWithAll(t)
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	leasehold, kvBin := build(t)
	started := time.Now()
	tm := protocol.Fast()
	timings := []string{"--timings", "fast"}
	addrs := map[uint64]string{1: freeAddr(t), 2: freeAddr(t), 3: freeAddr(t)}
	dirs := map[uint64]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	voter := start(t, "manager-1", leasehold, append(timings, "manager", "--id", "1", "--peers", "1="+addrs[1],
		"--listen", addrs[1], "--data-dir", dirs[1], "--log-format", "json")...)
	voter.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	procs := map[uint64]*proc{}
	readReplica := func(id uint64) {
		p := start(t, fmt.Sprintf("manager-%d", id), leasehold, append(timings, "manager", "--role", "read-replica",
			"--id", fmt.Sprint(id), "--peers", "1="+addrs[1], "--listen", addrs[id], "--data-dir", dirs[id])...)
		p.waitLine(t, "leasehold manager listening on ", 10*time.Second)
		procs[id] = p
		t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	}
	for _, id := range []uint64{2, 3} {
		readReplica(id)
		out, err := command(t, leasehold, "cluster", "add", "--read-replica", fmt.Sprint(id), addrs[id], "--manager", addrs[1]).CombinedOutput()
		if err != nil {
			t.Fatalf("cluster add --read-replica %d: %v\n%s", id, err, out)
		}
	}
	g := &group{leasehold: leasehold, addrs: addrs, env: envFor(t)}
	s, err := g.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Managers {
		if want := map[uint64]string{1: "leader", 2: "read-replica", 3: "read-replica"}[m.ID]; m.Role != want {
			t.Fatalf("cluster status: manager %d is a %s, want a %s (%+v)", m.ID, m.Role, want, s)
		}
	}
	t.Logf("%s: one voter and two read replicas", since(started))
	for id, p := range procs {
		if strings.Contains(p.stderr.String(), "replica role") {
			t.Errorf("read replica %d says its role disagrees with the group's: %s", id, tail(p.stderr.String(), 5))
		}
	}

	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: g.list()}
	kvs := map[string]*proc{}
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		kvs[id] = c.serve(id)
	}
	c.settle("three owners", func(s status) bool { return len(s.holders()) == 3 && s.complete() })

	const nLookups = 24
	var ns []*notifier
	for i := range nLookups {
		managers := g.list()
		if i%2 == 1 {
			managers = addrs[2] + "," + addrs[3]
		}
		n := &notifier{}
		l, err := lookup.New(context.Background(), lookup.Config{
			Connection: lh.Connection{Manager: managers, Timing: tm, CertsDir: certsDirFor(t)},
			OnLoss: func(loss lookup.Loss) {
				n.mu.Lock()
				n.seen = append(n.seen, notified{time.Now(), loss.All, loss.Ranges})
				n.mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		n.l = l
		ns = append(ns, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	for _, n := range ns {
		if err := n.l.WaitSynced(ctx); err != nil {
			t.Fatalf("a Lookup never synced: %v", err)
		}
	}
	spread := lookupSpread(t, g)
	t.Logf("%s: %d Lookups synced; the Lookups each replica serves: %v", since(started), len(ns), spread)
	if int(spread[2]+spread[3]) < nLookups/2 {
		t.Errorf("the read replicas serve %d Lookups, want at least the %d given only them", spread[2]+spread[3], nLookups/2)
	}

	// Each round: a fault on a read replica, and a kv server killed while
	// it lasts (and started again after, so the next round has Owners).
	type fault struct {
		what string
		on   func()
		off  func()
	}
	stop2 := fault{"read replica 2 SIGSTOPped for 3 s", func() { signal(t, procs[2], syscall.SIGSTOP) }, func() { signal(t, procs[2], syscall.SIGCONT) }}
	kill3 := fault{"read replica 3 SIGKILLed, restarted 3 s later", func() { procs[3].kill(t) }, func() { readReplica(3) }}
	faults := []fault{stop2, kill3, stop2, kill3}
	from := time.Now()
	victims := []string{"kv-1", "kv-2", "kv-3"}
	for i, f := range faults {
		victim := victims[i%len(victims)]
		f.on()
		time.Sleep(200 * time.Millisecond)
		kvs[victim].kill(t)
		time.Sleep(3 * time.Second)
		f.off()
		if i < len(faults)-1 {
			kvs[victim] = c.serve(victim) // an Owner for a later round to kill
		}
		// The loss is recorded about ManagerLease after the kill, within
		// the fault, and reaches every Lookup within the bound, or not.
		time.Sleep(tm.SyncTimeout + readReplicaSlack)
		t.Logf("%s: %s, %s SIGKILLed meanwhile", since(started), f.what, victim)
	}

	bound := time.Duration(float64(tm.SyncTimeout)*(1+tm.MaxDrift)) + time.Duration(float64(10*tm.Renew/20)*(1+2*tm.MaxDrift))
	losses := recordedLosses(t, voter)
	var worst time.Duration
	checked := 0
	for _, loss := range losses {
		if loss.at.Before(from) {
			continue
		}
		checked++
		for i, n := range ns {
			at, ok := n.covered(loss.first, loss.at.Add(-time.Second))
			d := at.Sub(loss.at)
			switch {
			case !ok:
				t.Errorf("Lookup %d was never told of the loss of %016x the voter recorded at %s", i, uint64(loss.first), loss.at.Sub(started))
			case d > bound+readReplicaSlack:
				t.Errorf("Lookup %d was told of the loss of %016x %s after the voter recorded it: the bound is %s (+%s)", i, uint64(loss.first), d, bound, readReplicaSlack)
			}
			worst = max(worst, d)
		}
	}
	if checked == 0 {
		t.Fatal("the voter recorded no loss: the kv servers' deaths were not seen")
	}
	t.Logf("%s: %d losses recorded by the voter, each told to all %d Lookups; worst delay %s (bound %s)", since(started), checked, len(ns), worst.Round(time.Millisecond), bound)
	if s, err := g.status(); err != nil || s.Leader != 1 {
		t.Errorf("after the faults: leader %d (%v), want the voter, 1, throughout", s.Leader, err)
	}
}

func signal(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

// allEnabled reports whether LEASEHOLD_E2E=all asks for every scenario at
// full size.
func allEnabled() bool { return cliKeys() == nkeys }

// lookupSpread returns how many Lookups each replica serves, as leasehold
// cluster status --json reports them, once the count stops moving.
func lookupSpread(t *testing.T, g *group) map[uint64]uint32 {
	t.Helper()
	var last map[uint64]uint32
	for range 20 {
		out, err := command(t, g.leasehold, "cluster", "status", "--manager", g.list(), "--json", "--timeout", "1s").Output()
		if err != nil {
			t.Fatalf("cluster status: %v", err)
		}
		var s struct {
			Managers []struct {
				ID      uint64 `json:"id"`
				Lookups uint32 `json:"lookups"`
			} `json:"managers"`
		}
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatal(err)
		}
		now := map[uint64]uint32{}
		for _, m := range s.Managers {
			now[m.ID] = m.Lookups
		}
		if fmt.Sprint(now) == fmt.Sprint(last) {
			return now
		}
		last = now
		time.Sleep(250 * time.Millisecond)
	}
	return last
}
