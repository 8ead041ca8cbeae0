package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// standbyManagerFlags give the default namespace one standby per range.
var standbyManagerFlags = []string{"--standbys", "default=1"}

// TestStandbyHolderKilled is the quick twin of TestStandbyScenario, run
// with LEASEHOLD_E2E=all beside it (all_test.go says why not by default): a
// Manager with standbys, three kv servers with --standbys 1 in three zones,
// a write load; one holder killed with SIGKILL. Its ranges go to their
// standbys, promoted: no acknowledged write is lost and watch prints no
// loss notification. The failover time (the kill to the first write served
// on one of its keys) is logged.
func TestStandbyHolderKilled(t *testing.T) {
	onlyWithAll(t)
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	t.Parallel()
	started := time.Now()
	sc := startStandbys(t, map[string]string{"kv-1": "zone-a", "kv-2": "zone-b", "kv-3": "zone-c"})
	t.Logf("%s: started", since(started))
	sc.inSync("every range with a standby in sync")
	t.Logf("%s: in sync", since(started))
	sc.statusShowsStandbys()
	ld := sc.startLoad(64)
	time.Sleep(time.Second)
	took := sc.killHolders(ld, []string{"kv-1"})
	t.Logf("%s: failed over", since(started))
	ld.stop()
	out := sc.noLoss(ld)
	t.Logf("%s: checked", since(started))
	t.Cleanup(func() { t.Logf("%s: cleaned up", since(started)) })
	t.Logf("holder killed → standby serving: %s (OwnerLease %s); %s", took, protocol.Fast().OwnerLease, out.excusedText())
}

// TestStandbyScenario is issue 32's real-process scenario: a Manager with
// standbys, six kv servers with --standbys 1 in three zones, leasehold
// watch, and a write load from an in-process client.
//
//  1. A holder killed with SIGKILL under the load: 0 acknowledged writes
//     lost, 0 loss notifications; the failover time (kill → a write on
//     one of its keys served by the promoted standby) is printed.
//  2. A zone (its two servers) killed at once, every range having had its
//     standby in another zone: 0 lost, 0 notifications.
//  3. A holder and its standby killed together: the loss notification
//     covers exactly the ranges the two held or stood by for each other,
//     within the bound from a kill (killBound: the ranges' reservation
//     runs out, then every Lookup hears within NotificationBound), and its
//     time (a plain crash's time to notification) is printed beside the
//     failover time.
//
// A live Owner's own lapse is excused in each step (standby_lapse_test.go
// says with what evidence), and each step's last line says how many ranges
// and keys of the load it excused.
func TestStandbyScenario(t *testing.T) {
	onlyWithAll(t)
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	zones := map[string]string{"kv-1": "zone-a", "kv-2": "zone-a", "kv-3": "zone-b", "kv-4": "zone-b",
		"kv-5": "zone-c", "kv-6": "zone-c"}
	sc := startStandbys(t, zones)
	tm := protocol.Fast()

	sc.inSync("six owners, every range's standby in sync")
	ld := sc.startLoad(nkeys)
	time.Sleep(time.Second)
	failover := sc.killHolders(ld, []string{"kv-1"})
	ld.stop()
	out := sc.noLoss(ld)
	t.Logf("1. holder kv-1 killed under load: failover %s, %d acknowledged writes lost, %d loss notifications; %s",
		failover, out.lost, out.notifications, out.excusedText())

	sc.inSync("five owners, every standby refilled")
	ld = sc.startLoad(nkeys)
	time.Sleep(time.Second)
	zoneFailover := sc.killHolders(ld, []string{"kv-5", "kv-6"})
	ld.stop()
	out = sc.noLoss(ld)
	t.Logf("2. zone-c (kv-5, kv-6) killed at once: failover %s, %d acknowledged writes lost, %d loss notifications; %s",
		zoneFailover, out.lost, out.notifications, out.excusedText())

	sc.inSync("three owners, every standby refilled")
	// The pair: kv-3 and the standby of most of its ranges.
	pairs := map[string]int{}
	for _, r := range sc.roles("kv-3").Standbys {
		pairs[r.Peer]++
	}
	delete(pairs, "")
	peer := ""
	for _, id := range slices.Sorted(maps.Keys(pairs)) {
		if peer == "" || pairs[id] > pairs[peer] {
			peer = id
		}
	}
	if peer == "" {
		t.Fatal("kv-3's ranges have no standby")
	}
	var common []keyspace.Range // the ranges one of the two held, the other standing by
	for _, pair := range [][2]string{{"kv-3", peer}, {peer, "kv-3"}} {
		for _, r := range sc.roles(pair[0]).Standbys {
			if r.Peer == pair[1] {
				common = append(common, r.keyRange())
			}
		}
	}
	ld = sc.startLoad(nkeys)
	time.Sleep(time.Second)
	sc.ev.note("3. killing kv-3 and %s; their common ranges %v", peer, common)
	killed := time.Now()
	for _, id := range []string{"kv-3", peer} {
		sc.servers[id].kill(t)
	}
	bound := killBound(tm)
	notified, ranges := sc.lossesAfter(killed, common, bound+slack)
	ld.stop()
	toNotify := notified.Sub(killed)
	sc.killed["kv-3"], sc.killed[peer] = true, true
	excused, others := sc.splitLosses(killed)
	sc.logExcused(excused)
	extra := false
	for _, l := range others {
		for _, r := range l.ranges {
			if !coveredBy(r, common) {
				extra = true
				t.Errorf("3. a loss notification for %v (%s's), which kv-3 and %s did not hold with each other as standby", r, l.owner, peer)
			}
		}
	}
	if extra {
		lines, _ := sc.w.p.snapshot()
		for _, l := range lines {
			if l.at.After(killed) && strings.Contains(l.text, `"event":"loss"`) {
				t.Logf("3. %s %s", l.at.Format("15:04:05.000"), l.text)
			}
		}
		t.Logf("3. the pair's ranges: %v", common)
	}
	for _, r := range common {
		if !coveredBy(r, ranges) {
			t.Errorf("3. no loss notification for %v, held by one of kv-3 and %s with the other as standby", r, peer)
		}
	}
	boundText := fmt.Sprintf("bound %s from the kill: ManagerLease × (1 + MaxDrift) + NotificationBound", bound.Round(10*time.Millisecond))
	if toNotify > bound+slack {
		t.Errorf("3. notified %s after the kill (+%s slack allowed); %s", toNotify, slack, boundText)
	}
	sc.noLossOutside(ld, append(slices.Clone(common), rangesOf(excused)...), nil)
	out = sbOutcome{excusedRanges: len(rangesOf(excused)), excusedKeys: ld.keysIn(rangesOf(excused))}
	t.Logf("3. kv-3 and its standby %s killed together: %d ranges notified lost, exactly theirs, %s after the kill (%s); %s",
		peer, len(common), toNotify.Round(10*time.Millisecond), boundText, out.excusedText())
	t.Logf("failover with a standby %s (a zone: %s) against a crash's time to notification %s",
		failover, zoneFailover, toNotify.Round(10*time.Millisecond))
}

// sbCluster is a Manager with standbys, its kv servers and a watcher.
type sbCluster struct {
	t       *testing.T
	c       *cli
	w       *watcher
	zones   map[string]string
	servers map[string]*proc
	addrs   map[string]string // kv HTTP addresses, by ID
	hc      *http.Client
	killed  map[string]bool
	ev      sbEvidence // kept with LEASEHOLD_E2E_LOGS
}

func startStandbys(t *testing.T, zones map[string]string) *sbCluster {
	t.Helper()
	leasehold, kvBin := build(t)
	mflags := append([]string{"manager", "--listen", "127.0.0.1:0", "--timings", "fast"}, standbyManagerFlags...)
	if os.Getenv(logsVar) != "" {
		mflags = append(mflags, "--log-level", "debug")
	}
	mgr := start(t, "manager", leasehold, mflags...)
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	sc := &sbCluster{t: t, c: &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}, zones: zones,
		servers: map[string]*proc{}, addrs: map[string]string{}, killed: map[string]bool{},
		hc: &http.Client{Transport: frontendTransport(t, certs.Owner), Timeout: 5 * time.Second}}
	sc.w = &watcher{p: start(t, "watch", leasehold, "watch", "--manager", addr, "--json")}
	sc.ev.add(mgr)
	sc.ev.add(sc.w.p)
	for _, id := range slices.Sorted(maps.Keys(zones)) {
		ownerCert(t, id)
		p := start(t, id, kvBin, "serve", "--manager", addr, "--listen", "127.0.0.1:0", "--id", id,
			"--zone", zones[id], "--standbys", "1")
		l := p.waitLine(t, "kv serving on ", 10*time.Second)
		a, _, _ := strings.Cut(strings.TrimPrefix(l, "kv serving on "), " ")
		sc.servers[id], sc.addrs[id] = p, a
		sc.ev.add(p)
	}
	sc.keepEvidence()
	return sc
}

// live returns the IDs of the servers not killed, sorted.
func (sc *sbCluster) live() []string {
	var ids []string
	for id := range sc.servers {
		if !sc.killed[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// sbRoles is a server's GET /standbys.
type sbRoles struct {
	Standbys []sbRole `json:"standbys"`
	Holders  []sbRole `json:"holders"`
}

type sbRole struct {
	Start  string `json:"start"`
	End    string `json:"end"`
	Peer   string `json:"peer"`
	InSync bool   `json:"in_sync"`
}

func (r sbRole) keyRange() keyspace.Range {
	return keyspace.Range{Start: hexKey(r.Start), End: hexKey(r.End)}
}

func (sc *sbCluster) roles(id string) sbRoles {
	sc.t.Helper()
	out, err := sc.getRoles(id)
	if err != nil {
		sc.t.Fatal(err)
	}
	return out
}

func (sc *sbCluster) getRoles(id string) (sbRoles, error) {
	resp, err := sc.hc.Get("https://" + sc.addrs[id] + "/standbys")
	if err != nil {
		return sbRoles{}, fmt.Errorf("GET %s/standbys: %v", id, err)
	}
	defer resp.Body.Close()
	var out sbRoles
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return sbRoles{}, fmt.Errorf("GET %s/standbys: %v", id, err)
	}
	return out, nil
}

// inSync waits until the live servers hold the whole key space, each of
// their leases has a standby among them, in sync, and the table has not
// changed for quiet since: no planned move is under way that would start
// a lease with a standby not yet filled.
func (sc *sbCluster) inSync(what string) {
	sc.t.Helper()
	live := sc.live()
	deadline := time.Now().Add(2 * settleTimeout)
	var last string
	var lsn keyspace.LSN
	var since time.Time
	for time.Now().Before(deadline) {
		st, err := sc.c.status()
		ok := err == nil && slices.Equal(st.holders(), live) && st.complete()
		if err != nil {
			last = err.Error()
		}
		for _, id := range live {
			if !ok {
				break
			}
			for _, r := range sc.roles(id).Standbys {
				if r.Peer == "" || !r.InSync || sc.killed[r.Peer] {
					ok, last = false, fmt.Sprintf("%s's range [%s, %s) has standby %q, in sync %v", id, r.Start, r.End, r.Peer, r.InSync)
					break
				}
			}
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero() || st.LSN != lsn:
			lsn, since = st.LSN, time.Now()
		case time.Since(since) >= quiet:
			sc.t.Logf("%s: in sync at LSN %d", what, lsn)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	sc.t.Fatalf("%s: not every standby in sync within %s; last: %s", what, 2*settleTimeout, last)
}

// statusShowsStandbys checks that leasehold status shows the namespace's
// standbys and, per live Owner, its zone and the leases it stands by for,
// all in sync (inSync waited for that), in JSON and in text.
func (sc *sbCluster) statusShowsStandbys() {
	sc.t.Helper()
	out, err := command(sc.t, sc.c.leasehold, "status", "--manager", sc.c.manager, "--json").Output()
	if err != nil {
		sc.t.Fatalf("leasehold status --json: %v", err)
	}
	var st struct {
		Standbys int `json:"standbys"`
		Owners   []struct {
			ID            string `json:"id"`
			Zone          string `json:"zone"`
			StandbyRanges int    `json:"standby_ranges"`
			StandbyInSync int    `json:"standby_in_sync"`
		} `json:"owners"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		sc.t.Fatalf("leasehold status --json: %v in %s", err, out)
	}
	if st.Standbys != 1 {
		sc.t.Errorf("status --json: standbys %d, want 1", st.Standbys)
	}
	total := 0
	for _, o := range st.Owners {
		if sc.killed[o.ID] {
			continue
		}
		if o.Zone != sc.zones[o.ID] || o.StandbyInSync != o.StandbyRanges {
			sc.t.Errorf("status --json: owner %+v, want zone %q and every lease it stands by for in sync", o, sc.zones[o.ID])
		}
		total += o.StandbyRanges
	}
	if total == 0 {
		sc.t.Errorf("status --json: no Owner stands by for any lease: %s", out)
	}
	text, err := command(sc.t, sc.c.leasehold, "status", "--manager", sc.c.manager).Output()
	if err != nil || !strings.Contains(string(text), "1 standby per range") || !strings.Contains(string(text), "STANDBY-FOR") {
		sc.t.Errorf("leasehold status: %v; no standbys shown in\n%s", err, text)
	}
}

// killHolders kills the servers ids at once under the load ld and returns
// the failover time: from the kill to the first write served on a key one
// of them held.
func (sc *sbCluster) killHolders(ld *sbLoad, ids []string) time.Duration {
	sc.t.Helper()
	// The probe: a key of one of ids, outside the load's, written in a
	// loop from the kill on.
	r := newRouter(sc.t, sc.c.manager)
	st := sc.c.settle("before the kill", func(status) bool { return true })
	var candidates []string
	for i := range 256 {
		candidates = append(candidates, fmt.Sprintf("probe-%d", i))
	}
	owners := r.owners(sc.t, st.LSN, candidates)
	probe := ""
	for _, k := range candidates {
		if slices.Contains(ids, owners[k]) {
			probe = k
			break
		}
	}
	if probe == "" {
		sc.t.Fatalf("none of %d keys is held by %v", len(candidates), ids)
	}
	sc.readyToKill(ids)
	sc.ev.note("killing %v", ids)
	killed := time.Now()
	for _, id := range ids {
		sc.servers[id].kill(sc.t)
		sc.killed[id] = true
	}
	c, err := kv.NewClient(context.Background(), kv.ClientConfig{CertsDir: certsDirFor(sc.t), Manager: sc.c.manager,
		Timing: protocol.Fast(), MaxAttempts: 1, Timeout: time.Second})
	if err != nil {
		sc.t.Fatal(err)
	}
	defer c.Close()
	for time.Since(killed) < settleTimeout {
		if c.Put(context.Background(), probe, []byte("x")) == nil {
			return time.Since(killed).Round(10 * time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sc.t.Fatalf("no write on %q served within %s of the kill of %v", probe, settleTimeout, ids)
	return 0
}

// readyToKill waits until, at once, every lease held by one of ids has a
// standby in sync that is not among ids nor in the zone of one of them
// (the scenario's premise: every range lost had a standby elsewhere), and
// logs how long that took; it fails the test if that does not come.
func (sc *sbCluster) readyToKill(ids []string) {
	sc.t.Helper()
	doomed := map[string]bool{}
	for _, id := range ids {
		doomed[sc.zones[id]] = true
	}
	from := time.Now()
	last := ""
	for time.Since(from) < settleTimeout {
		ok := true
		for _, id := range ids {
			for _, r := range sc.roles(id).Standbys {
				if !r.InSync || r.Peer == "" || sc.killed[r.Peer] || doomed[sc.zones[r.Peer]] {
					ok, last = false, fmt.Sprintf("%s's range [%s, %s) has standby %q (zone %s), in sync %v",
						id, r.Start, r.End, r.Peer, sc.zones[r.Peer], r.InSync)
					break
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			sc.t.Logf("every lease of %v with a standby in sync in another zone, %s before the kill", ids, since(from))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	sc.t.Fatalf("before killing %v: not every lease of theirs had a standby in sync elsewhere within %s; last: %s",
		ids, settleTimeout, last)
}

// lossesAfter waits for loss notifications printed after from until every
// range of want is covered or timeout passes, and returns when the last
// one needed was printed and every range notified.
func (sc *sbCluster) lossesAfter(from time.Time, want []keyspace.Range, timeout time.Duration) (time.Time, []keyspace.Range) {
	deadline := time.Now().Add(timeout)
	for {
		var got []keyspace.Range
		var last time.Time
		for _, l := range sc.w.losses() {
			if l.at.After(from) {
				got = append(got, l.ranges...)
				last = l.at
			}
		}
		done := true
		for _, r := range want {
			done = done && coveredBy(r, got)
		}
		if done || time.Now().After(deadline) {
			time.Sleep(quiet) // any notification beyond want comes with them
			got = got[:0]
			for _, l := range sc.w.losses() {
				if l.at.After(from) {
					got = append(got, l.ranges...)
				}
			}
			return last, got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// coveredBy reports whether rs together cover r.
func coveredBy(r keyspace.Range, rs []keyspace.Range) bool {
	return keyspace.NewRangeSet(rs...).CoversRange(r)
}

// sbOutcome is what a step's check found: acknowledged writes lost, loss
// notifications not excused, and what a live Owner's own lapse excused.
type sbOutcome struct {
	lost, notifications        int
	excusedRanges, excusedKeys int // ranges notified lost, and how many of the load's keys they cover
}

func (o sbOutcome) excusedText() string {
	return fmt.Sprintf("%d ranges (%d keys of the load) excused: a live Owner's own lease lapsed", o.excusedRanges, o.excusedKeys)
}

// keysIn returns how many of the load's keys rs cover.
func (ld *sbLoad) keysIn(rs []keyspace.Range) int {
	n := 0
	for _, k := range ld.keys {
		if coveredBy(keyspace.Range{Start: keyspace.KeyOf(k), End: keyspace.KeyOf(k) + 1}, rs) {
			n++
		}
	}
	return n
}

// noLoss checks that every key reads its last acknowledged value (or one
// of the writes tried after it, which may have been stored without an
// answer) and that watch printed no loss notification since the load
// started, but for a live Owner's own lapse (splitLosses), whose ranges are
// not read. The notifications are looked at after quiet and again after
// the reads: a range lost as the failover ends is notified a moment later,
// and counted before, its loss would pass for one without a notification.
func (sc *sbCluster) noLoss(ld *sbLoad) sbOutcome {
	sc.t.Helper()
	time.Sleep(quiet)
	excusedNow := func() []keyspace.Range {
		ex, _ := sc.splitLosses(ld.started)
		return rangesOf(ex)
	}
	var out sbOutcome
	out.lost = sc.noLossOutside(ld, excusedNow(), excusedNow)
	excused, others := sc.splitLosses(ld.started)
	sc.logExcused(excused)
	out.excusedRanges, out.excusedKeys = len(rangesOf(excused)), ld.keysIn(rangesOf(excused))
	for _, l := range others {
		out.notifications++
		sc.t.Errorf("a loss notification after the kill at %s: %d ranges of %s", l.at.Format("15:04:05.000"), len(l.ranges), l.owner)
	}
	return out
}

// noLossOutside checks every key outside the ranges notified lost: it
// reads its last acknowledged value, or one tried after it. A key that
// fails is then checked against later(), if given: ranges notified lost
// while the keys were read (a live Owner's lapse, excused by the caller).
func (sc *sbCluster) noLossOutside(ld *sbLoad, notified []keyspace.Range, later func() []keyspace.Range) int {
	sc.t.Helper()
	c, err := kv.NewClient(context.Background(), kv.ClientConfig{CertsDir: certsDirFor(sc.t), Manager: sc.c.manager,
		Timing: protocol.Fast(), Timeout: 10 * time.Second})
	if err != nil {
		sc.t.Fatal(err)
	}
	defer c.Close()
	type failure struct {
		key, msg string
		lost     bool
	}
	var failed []failure
	checked := 0
	for _, k := range ld.keys {
		if coveredBy(keyspace.Range{Start: keyspace.KeyOf(k), End: keyspace.KeyOf(k) + 1}, notified) {
			continue
		}
		want, tried := ld.state(k)
		if want == "" {
			continue
		}
		got, err := c.Get(context.Background(), k)
		checked++
		switch {
		case errors.Is(err, kv.ErrNotFound):
			failed = append(failed, failure{k, fmt.Sprintf("get %q: not found; %q was acknowledged", k, want), true})
		case err != nil:
			failed = append(failed, failure{k, fmt.Sprintf("get %q: %v", k, err), false})
		case string(got) != want && !slices.Contains(tried, string(got)):
			failed = append(failed, failure{k, fmt.Sprintf("get %q = %q; %q was acknowledged last", k, got, want), true})
		}
	}
	var excused []keyspace.Range
	if later != nil && len(failed) > 0 {
		excused = later()
	}
	lost, skipped := 0, 0
	for _, f := range failed {
		if coveredBy(keyspace.Range{Start: keyspace.KeyOf(f.key), End: keyspace.KeyOf(f.key) + 1}, excused) {
			skipped++
			continue
		}
		if f.lost {
			lost++
		}
		sc.t.Error(f.msg)
	}
	sc.t.Logf("%d keys read back: %d acknowledged writes lost (%d more in ranges a live Owner's lapse lost); %d writes acknowledged, %d failed (retried)",
		checked, lost, skipped, ld.acked(), ld.failures())
	return lost
}

// sbLoad writes each of its keys in turn from several goroutines, and keeps
// the last acknowledged value of each and the writes tried since.
type sbLoad struct {
	keys    []string
	started time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex
	latest map[string]string   // guarded by mu
	tried  map[string][]string // guarded by mu: failed since the last acknowledged
	ok     int                 // guarded by mu
	failed int                 // guarded by mu
}

func (sc *sbCluster) startLoad(n int) *sbLoad {
	sc.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := kv.NewClient(ctx, kv.ClientConfig{CertsDir: certsDirFor(sc.t), Manager: sc.c.manager,
		Timing: protocol.Fast(), MaxAttempts: 1, Timeout: 2 * time.Second})
	if err != nil {
		sc.t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, settleTimeout)
	defer scancel()
	if err := c.WaitSynced(sctx); err != nil {
		sc.t.Fatal(err)
	}
	ld := &sbLoad{started: time.Now(), cancel: cancel, latest: map[string]string{}, tried: map[string][]string{}}
	for i := range n {
		ld.keys = append(ld.keys, fmt.Sprintf("key-%03d", i))
	}
	for w := range workers {
		ld.wg.Go(func() {
			for round := 0; ctx.Err() == nil; round++ {
				for i := w; i < n && ctx.Err() == nil; i += workers {
					k := ld.keys[i]
					v := fmt.Sprintf("v%d-%s", round, k)
					err := c.Put(ctx, k, []byte(v))
					ld.record(k, v, err == nil) // cut short by stop: tried, perhaps stored
				}
			}
		})
	}
	sc.t.Cleanup(func() { ld.stop(); c.Close() })
	return ld
}

func (ld *sbLoad) stop() {
	ld.cancel()
	ld.wg.Wait()
}

func (ld *sbLoad) record(k, v string, ok bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ok {
		ld.latest[k] = v
		delete(ld.tried, k)
		ld.ok++
		return
	}
	ld.tried[k] = append(ld.tried[k], v)
	ld.failed++
}

func (ld *sbLoad) state(k string) (string, []string) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.latest[k], slices.Clone(ld.tried[k])
}

func (ld *sbLoad) acked() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.ok
}

func (ld *sbLoad) failures() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.failed
}
