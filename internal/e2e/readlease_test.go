package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/browser"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// readLease is the read lease of TestReadLeaseFaults' replicas: its bound
// B = readLease × (1 + MaxDrift) is the longest a holder that stops
// answering may hold the Manager's answers back. B stays under the Owners'
// answer wait (Renew / 2 = 500 ms in readLeaseTiming): an Owner whose
// answer is held longer than that gives the leader's stream up and tries
// the other replicas, the stalled holder among them, and with B = 525 ms
// and fast timings (a 250-ms answer wait) that detour cost Owners their
// leases in one run of three on a loaded machine.
const readLease = 400 * time.Millisecond

// readLeaseTiming is the fast profile with 4-s Owner leases renewed every
// second, and Lookups that raise a loss after 4 s without an answer: a
// lease outlasts the load of a shared two-core machine, and is still far
// shorter than each fault.
var readLeaseTiming = func() protocol.Timing {
	t := protocol.Fast()
	t.OwnerLease, t.Renew, t.ManagerLease = 4*time.Second, time.Second, 4400*time.Millisecond
	t.SyncTimeout = 4 * time.Second
	return t
}()

// faultLength is how long each fault of TestReadLeaseFaults lasts: five
// Owner leases.
const faultLength = 10 * time.Second

// TestReadLeaseFaults: three Managers with quorum read leases on all of
// them (--read-lease-holders all, --read-lease 400ms; 4-s Owner leases),
// three kv servers under a read/write load, leasehold watch, Owners
// joining and leaving two namespaces of their own (the Manager's writes),
// and lease reads (Admin/Holder, Admin/Status with read_lease) at every
// replica all along. Then, one after the other, at a follower:
//
//	(a) a one-way cut for 10 s: the leader's connections to it are held
//	    by its proxy, its own to the leader go on;
//	(b) SIGSTOP for 10 s;
//	(c) its removal from the group (Admin/RemovePeer, leasehold cluster
//	    remove's call) with the leader's messages to it cut just before,
//	    so that the others commit and apply the removal before it has it;
//	(d) leasehold cluster remove of the other follower: the leader goes
//	    on alone.
//
// Through all of it no Owner loses a lease (the kv servers'
// leasehold_owner_leases_lost_total, and watch prints no loss), every
// Owner answer comes within OwnerLease − Renew of the oldest request it
// answers, the wait an Owner can afford (the kv servers'
// leasehold_owner_answer_wait_longest_seconds; the figures are logged
// beside B), and no lease read misses a write acknowledged before it was
// asked (readlease_check_test.go).
//
// On a5b4102 (a) stalled every Owner answer for the whole cut and the kv
// servers lost all 192 leases, in (c) the removed replica served lease
// reads at a log index below one another replica had already answered
// at, and after (d) the kv servers lost 128 leases more.
func TestReadLeaseFaults(t *testing.T) {
	onlyWithAll(t)
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	t0 := time.Now()
	leasehold, kvBin := build(t)
	started := time.Now()
	t.Logf("the binaries built in %s", since(t0))
	t.Cleanup(func() { t.Logf("%s: stopped", since(started)) })
	tm := readLeaseTiming
	bound := time.Duration(float64(readLease) * (1 + tm.MaxDrift))
	// An answer held by a holder that stopped answering comes at most B
	// after the leader last heard it, on top of the write's own latency,
	// which a loaded machine (fsyncs, three replicas, two cores) stretches
	// past B now and then. What the Owners need is an answer within
	// OwnerLease − Renew of the oldest request unanswered: later, and a
	// lease would run out before the renewal that keeps it.
	answerBound := tm.OwnerLease - tm.Renew
	nss := []string{"rl-1", "rl-2"}
	g := &group{leasehold: leasehold, addrs: map[uint64]string{}, dirs: map[uint64]string{}, procs: map[uint64]*proc{},
		timing: &tm, env: envFor(t), listen: map[uint64]string{},
		// The lease readers ask each replica about 500 times a second on
		// one connection.
		extra: []string{"--read-lease-holders", "all", "--read-lease", readLease.String(), "--max-call-rate", "2000"}}
	for _, ns := range nss {
		g.extra = append(g.extra, "--namespace", ns)
	}
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
	for id := range g.procs {
		p := g.procs[id]
		t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }) // before the stop that start registered
	}
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: g.list()}
	watch := start(t, "watch", leasehold, "watch", "--manager", c.manager, "--json")
	w := &watcher{p: watch}
	var kvAddrs []string
	var kvs []*proc
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		p := c.serve(id)
		kvs = append(kvs, p)
		line := p.waitLine(t, "kv serving on ", time.Second)
		addr, _, _ := strings.Cut(strings.TrimPrefix(line, "kv serving on "), " ")
		kvAddrs = append(kvAddrs, addr)
	}
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	om := &ownerMetrics{t: t, addrs: kvAddrs, hc: &http.Client{Transport: frontendTransport(t, certs.Owner), Timeout: 5 * time.Second}}
	t.Logf("%s: three managers (read leases on all, B = %s), three kv servers", since(started), bound)

	// The Manager's writes, the lease reads, and the kv load.
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	defer func() { cancel(); bg.Wait() }()
	h := newHistory()
	for _, ns := range nss {
		bg.Go(func() { churn(ctx, t, h, c.manager, ns, tm, 50*time.Millisecond) })
	}
	op := sourceFor(t, certs.Operator, "e2e")
	admins := map[uint64]pb.AdminClient{}
	for id := uint64(1); id <= 3; id++ {
		conn, err := grpc.NewClient(g.listen[id], grpc.WithTransportCredentials(certs.ClientCredentials(op, certs.Replica)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		admins[id] = pb.NewAdminClient(conn)
		bg.Go(func() { readLoop(ctx, h, conn, id, nss, 2*time.Millisecond) })
	}
	ld := startLoad(t, c.manager, tm)
	time.Sleep(3 * time.Second)
	if ok, fail := ld.counts(); ok == 0 {
		t.Fatalf("the load got no answer in 3 s (%d failures): %v", fail, ld.firstErr())
	}
	if j, l, _ := h.acknowledged(started, time.Now()); j == 0 || l == 0 {
		t.Fatalf("the churning Owners had %d joins and %d goodbyes acknowledged in 3 s", j, l)
	}
	// follower returns the leader and a follower still in the group.
	removed := map[uint64]bool{}
	follower := func() (uint64, uint64) {
		ld := g.leader(t, 0)
		for id := uint64(1); id <= 3; id++ {
			if id != ld && !removed[id] {
				return id, ld
			}
		}
		t.Fatalf("no follower besides leader %d", ld)
		return 0, 0
	}
	// The command-line lease reads at a follower.
	f, _ := follower()
	// A churn write pending at the follower refuses them; they are asked
	// again until one is served.
	for _, args := range [][]string{{"status", "--read-lease"}, {"lookup", "key-001", "--read-lease"}} {
		var out []byte
		var err error
		for try := 0; try < 50; try++ {
			if out, err = command(t, leasehold, append(args, "--manager", g.addrs[f])...).CombinedOutput(); err == nil ||
				!strings.Contains(string(out), "FailedPrecondition") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("leasehold %s at follower %d: %v: %s", strings.Join(args, " "), f, err, out)
		} else {
			t.Logf("leasehold %s at follower %d: %s", strings.Join(args, " "), f, firstLine(string(out)))
		}
	}

	if wait, lost := om.scrape(); wait > answerBound || lost > 0 {
		t.Errorf("before any fault: the longest Owner answer wait %s (bound %s), %d leases lost", wait.Round(time.Millisecond), answerBound, lost)
	}
	var summary []string
	phase := func(name string, fault func() (target, leader uint64), recover time.Duration) {
		t.Helper()
		wait0, lost0 := om.scrape()
		from := time.Now()
		target, leader := fault()
		time.Sleep(recover)
		to := time.Now()
		wait, lost := om.scrape()
		bad, n := h.check(from, to)
		joins, leaves, unacked := h.acknowledged(from, to)
		served, refused, failed := h.counts(from, to)
		wnote := wait.Round(time.Millisecond).String()
		if wait <= wait0 {
			wnote = fmt.Sprintf("at most %s (no longer than before)", wait0.Round(time.Millisecond))
		}
		line := fmt.Sprintf("%s (replica %d, leader %d): longest Owner answer wait %s (bound %s); Owner leases lost %d; "+
			"%d joins and %d goodbyes acknowledged (%d not); %d lease reads checked (served by replica: %v; refused so far: %v; failed so far: %v), %d stale",
			name, target, leader, wnote, answerBound, lost-lost0, joins, leaves, unacked, n, served, refused, failed, len(bad))
		summary = append(summary, line)
		t.Logf("%s: %s", since(started), line)
		for i, s := range bad {
			if i == 5 {
				t.Errorf("… and %d more stale reads", len(bad)-5)
				break
			}
			t.Errorf("%s: stale read: %s", name, s)
		}
		if lost > lost0 {
			t.Errorf("%s: the kv servers lost %d leases", name, lost-lost0)
		}
		if wait > answerBound && wait > wait0 {
			t.Errorf("%s: an Owner waited %s for an answer, over the bound %s", name, wait.Round(time.Millisecond), answerBound)
		}
	}

	phase("(a) one-way cut (leader → follower) for 10 s", func() (uint64, uint64) {
		f, ld := follower()
		proxies[f].cutFrom(ld)
		time.Sleep(faultLength)
		proxies[f].setCut(false)
		t.Logf("%s: the proxy of replica %d held %d chunks of leader %d's connections", since(started), f, proxies[f].held.Load(), ld)
		return f, ld
	}, 3*time.Second)

	phase("(b) SIGSTOP of a follower for 10 s", func() (uint64, uint64) {
		f, ld := follower()
		if err := g.procs[f].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(faultLength)
		if err := g.procs[f].cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		return f, ld
	}, 3*time.Second)

	// (c) The removal of a holder the others commit and apply before it
	// has the entry: its link to the leader is cut just before. The
	// churn pauses first, so that the holder has applied everything and
	// serves; it resumes once the removal is applied.
	phase("(c) removal of a holder cut off just before", func() (uint64, uint64) {
		f, ld := follower()
		h.gate.pause()
		if !h.gate.waitParked(len(nss), settleTimeout) {
			t.Fatalf("the churning Owners did not pause within %s", settleTimeout)
		}
		time.Sleep(500 * time.Millisecond)
		proxies[f].cutFrom(ld)
		// leasehold cluster remove's call, from this process: the CLI's
		// start would take much of the holder's lease.
		at := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := admins[ld].RemovePeer(rctx, &pb.RemovePeerRequest{Id: f})
		rcancel()
		done := time.Now()
		h.gate.release()
		if err != nil {
			t.Errorf("removing replica %d at leader %d: %v", f, ld, err)
		}
		removed[f] = true
		time.Sleep(2 * time.Second)
		proxies[f].setCut(false)
		served, _, _ := h.counts(done, time.Now())
		t.Logf("%s: replica %d removed in %s; it then served %d lease reads",
			since(started), f, done.Sub(at).Round(time.Millisecond), served[f])
		return f, ld
	}, 2*time.Second)

	// (d) leasehold cluster remove of the other follower, under the load:
	// the leader goes on alone, with the removed replicas still named in
	// every client's list.
	phase("(d) leasehold cluster remove of the last follower", func() (uint64, uint64) {
		f, ld := follower()
		at := time.Now()
		out, err := command(t, leasehold, "cluster", "remove", fmt.Sprint(f), "--manager", c.manager, "--timeout", "10s").CombinedOutput()
		if err != nil {
			t.Errorf("leasehold cluster remove %d: %v: %s", f, err, out)
		}
		removed[f] = true
		t.Logf("%s: leasehold cluster remove %d took %s: %s", since(started), f, time.Since(at).Round(time.Millisecond), firstLine(string(out)))
		return f, ld
	}, 3*time.Second)
	cancel()
	bg.Wait()
	ld.stop()
	ok, fail := ld.counts()
	worst, key, slowest := ld.worst()
	t.Logf("%s: the kv load: %d puts and gets answered, %d failed and retried (the first: %v); longest unavailability of any key %s%s; slowest request %s",
		since(started), ok, fail, ld.firstErr(), worst.Round(time.Millisecond), keyNote(key), slowest.Round(time.Millisecond))
	for _, e := range ld.problems() {
		t.Errorf("%s", e)
	}
	if ls := w.losses(); len(ls) != 0 {
		t.Errorf("watch printed %d loss events, the first at %s: %+v", len(ls), ls[0].at.Sub(started), ls[0])
	}
	bad, n := h.check(started, time.Now())
	wait, lost := om.scrape()
	// A read times out after a second: the stopped replica's, about ten.
	if _, _, failed := h.counts(started, time.Now()); sum(failed) > 40 {
		h.mu.Lock()
		t.Errorf("%d lease reads failed other than by a refusal (by replica: %v; the last: %v)", sum(failed), failed, h.lastErr)
		h.mu.Unlock()
	}
	t.Logf("summary: %d lease reads checked, %d stale; longest Owner answer wait %s; Owner leases lost %d\n  %s",
		n, len(bad), wait.Round(time.Millisecond), lost, strings.Join(summary, "\n  "))
	if t.Failed() {
		saveLogs(t, append(slices.Collect(maps.Values(g.procs)), kvs...))
	}
	for _, p := range kvs {
		var warns []string
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "level=WARN") {
				warns = append(warns, l)
			}
		}
		if len(warns) > 0 {
			t.Logf("%s logged %d warnings; the last:\n%s", p.name, len(warns), strings.Join(warns[max(0, len(warns)-8):], "\n"))
		}
	}
}

// saveLogs writes the whole stderr of each process to
// $LEASEHOLD_ARTIFACTS/<test>/<name>.log, when that is set (CI sets it):
// a failure's cause is often further back than the tails the test prints.
func saveLogs(t *testing.T, ps []*proc) {
	root := os.Getenv(browser.ArtifactsEnv)
	if root == "" {
		return
	}
	dir := filepath.Join(root, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("saving the logs: %v", err)
		return
	}
	for _, p := range ps {
		if err := os.WriteFile(filepath.Join(dir, p.name+".log"), []byte(p.stderr.String()), 0o644); err != nil {
			t.Logf("saving the logs: %v", err)
		}
	}
	t.Logf("the processes' logs are in %s", dir)
}

func sum(m map[uint64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// ownerMetrics scrapes the kv servers' Owner metrics.
type ownerMetrics struct {
	t     *testing.T
	addrs []string
	hc    *http.Client
}

// scrape returns the longest answer wait any of the Owners saw and the
// leases they lost, so far.
func (m *ownerMetrics) scrape() (longest time.Duration, lost int) {
	m.t.Helper()
	for _, addr := range m.addrs {
		resp, err := m.hc.Get("https://" + addr + "/metrics")
		if err != nil {
			m.t.Fatalf("scraping the kv server at %s: %v", addr, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			name, rest, _ := strings.Cut(sc.Text(), "{")
			_, val, _ := strings.Cut(rest, "} ")
			v, _ := strconv.ParseFloat(val, 64)
			switch name {
			case "leasehold_owner_answer_wait_longest_seconds":
				longest = max(longest, time.Duration(v*float64(time.Second)))
			case "leasehold_owner_leases_lost_total":
				lost += int(v)
			}
		}
		resp.Body.Close()
	}
	return longest, lost
}
