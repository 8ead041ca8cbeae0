// Command etcdcompare runs the same owners, lookups and crash schedule
// against a leasehold Manager and against the etcd sharding pattern (each
// owner holds an etcd lease kept alive at leasehold's renewal interval and
// puts its ranges as keys under it; each lookup watches the prefix), each
// server in its own child process, and prints server CPU, bytes and crash
// notification times side by side. See docs/peers.md.
//
//	go run ./cmd/etcdcompare -owners 50 -lookups 200 -duration 60s -out results
package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/bench/peers/internal/servers"
	"github.com/leasehold/leasehold/protocol"
)

type options struct {
	owners, lookups, crashes int
	duration, renew          time.Duration
	out                      string
	only                     string
	tls                      bool
	certsDir                 string // with tls: the CA and every certificate
	profile                  string
	settle                   time.Duration
	wirestats                bool
}

func main() {
	serve := flag.String("serve", "", "internal: run a server (leasehold or etcd) in this process")
	dir := flag.String("dir", "", "internal: etcd data directory")
	certsDir := flag.String("certs", "", "internal: the certificates directory of the server child")
	var o options
	flag.IntVar(&o.owners, "owners", 50, "owners per system")
	flag.IntVar(&o.lookups, "lookups", 100, "lookups (leasehold Lookups / etcd watchers) per system")
	flag.IntVar(&o.crashes, "crashes", 3, "owners crashed during the measured window, evenly spaced")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "measured window per system (after startup settles)")
	flag.DurationVar(&o.renew, "renew", time.Second, "renewal interval: leasehold Renew and etcd keepalive interval; other leasehold timers keep their production ratio to it")
	flag.StringVar(&o.out, "out", "peers-results", "directory for summary.csv and crashes.csv")
	flag.StringVar(&o.only, "only", "", "run only one system: leasehold or etcd")
	flag.BoolVar(&o.tls, "tls", false, "both systems with mutual TLS: every client presents a certificate of one CA, the servers require it")
	flag.DurationVar(&o.settle, "settle", 2*time.Minute, "how long each system may take to reach a steady state (every lookup sees every owner, at one LSN) before the run fails")
	flag.StringVar(&o.profile, "profile", "", "directory for each server's CPU and allocation profiles of the measured window (<system>-cpu.pprof, <system>-allocs-{start,end}.pprof)")
	flag.BoolVar(&o.wirestats, "wirestats", false, "count leasehold's Lookup messages by kind (polls, answers, pushes, changes) and print their bytes per lookup-hour; without -tls")
	flag.Parse()

	t := servers.TimingForRenew(o.renew)
	if *serve != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ready := func(addr string) { fmt.Printf("listening %s\n", addr) }
		if o.profile != "" {
			go profileOnSignal(filepath.Join(o.profile, *serve))
		}
		var err error
		switch *serve {
		case "leasehold":
			err = servers.RunLeasehold(ctx, "127.0.0.1:0", t, *certsDir, ready)
		case "etcd":
			err = servers.RunEtcd(ctx, *dir, "127.0.0.1:0", *certsDir, ready)
		default:
			err = fmt.Errorf("unknown -serve %q", *serve)
		}
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := t.Validate(); err != nil {
		log.Fatal(err)
	}
	if o.owners < 2 || o.lookups < 1 || o.crashes < 0 || o.crashes >= o.owners {
		log.Fatal("need owners >= 2, lookups >= 1, 0 <= crashes < owners")
	}
	fmt.Printf("timing: renew %s, leasehold OwnerLease %s ManagerLease %s Sync %s SyncTimeout %s; etcd lease TTL %ds keepalive every %s\n",
		t.Renew, t.OwnerLease, t.ManagerLease, t.Sync, t.SyncTimeout, etcdTTL(t), t.Renew)
	fmt.Printf("load: %d owners, %d lookups, %d crashes in a %s window per system\n", o.owners, o.lookups, o.crashes, o.duration)

	if o.tls {
		dir, err := os.MkdirTemp("", "etcdcompare-certs-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		var ids []string
		for i := range o.owners {
			ids = append(ids, ownerID(i))
		}
		if err := servers.MakeCerts(dir, ids); err != nil {
			log.Fatal(err)
		}
		o.certsDir = dir
		fmt.Printf("tls: mutual TLS on both systems (certificates in %s)\n", dir)
	}
	var results []*result
	if o.only == "" || o.only == "leasehold" {
		r, err := measure(o, t, &leaseholdSystem{})
		if err != nil {
			log.Fatalf("leasehold: %v", err)
		}
		results = append(results, r)
	}
	if o.only == "" || o.only == "etcd" {
		r, err := measure(o, t, &etcdSystem{})
		if err != nil {
			log.Fatalf("etcd: %v", err)
		}
		results = append(results, r)
	}
	report(results)
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at the end: %s", la)
	}
	if err := writeCSV(o.out, results); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s\n", filepath.Join(o.out, "summary.csv")+", "+filepath.Join(o.out, "crashes.csv"))
}

func etcdTTL(t protocol.Timing) int64 { return int64(math.Ceil(t.OwnerLease.Seconds())) }

// system is one of the two setups.
type system interface {
	name() string
	// start starts clients against the server at addr. Owner i must reach
	// the server through ownerProxy(i), lookup j through lookupProxy(j);
	// lookups call h.check(j) whenever their routing changed.
	start(ctx context.Context, addr string, h *harness) error
	// steady reports whether every lookup sees every owner and all agree.
	steady() bool
	// ownerKeys returns opaque probes for the ranges owner i holds now.
	probe(i int) func(j int) bool
	crash(i int)
	stop()
}

type harness struct {
	o                       options
	t                       protocol.Timing
	ownerBytes, lookupBytes atomic.Int64
	wire                    *wireStats // -wirestats
	ownerProxies            []*proxy
	lookupProxies           []*proxy
	mu                      sync.Mutex
	pending                 *pendingCrash
}

type pendingCrash struct {
	owner     int
	at        time.Time
	stillSees func(j int) bool // lookup j still routes some of the owner's ranges to it
	known     []time.Duration  // per lookup; 0 = not yet
	left      int
	done      chan struct{}
}

// check is called by lookup j after its routing changed.
func (h *harness) check(j int) {
	h.mu.Lock()
	p := h.pending
	h.mu.Unlock()
	if p == nil {
		return
	}
	if p.stillSees(j) {
		return
	}
	d := time.Since(p.at)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending == p && p.known[j] == 0 {
		p.known[j] = d
		p.left--
		if p.left == 0 {
			close(p.done)
		}
	}
}

type crashResult struct {
	owner       int
	max, median time.Duration
	unknown     int
}

type result struct {
	system                  string
	window                  time.Duration
	cpu                     float64
	ownerHours, lookupHours float64
	ownerBytes, lookupBytes int64
	crashes                 []crashResult
}

func startChild(args ...string) (*exec.Cmd, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, "", fmt.Errorf("server child: %w", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, "", fmt.Errorf("server child said %q", line)
	}
	return cmd, addr, nil
}

func measure(o options, t protocol.Timing, sys system) (*result, error) {
	fmt.Printf("== %s: starting server\n", sys.name())
	args := []string{"-serve", sys.name(), "-renew", t.Renew.String(), "-certs", o.certsDir}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "-profile", o.profile)
	}
	if sys.name() == "etcd" {
		dir, err := os.MkdirTemp("", "etcdcompare-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		args = append(args, "-dir", dir)
	}
	cmd, addr, err := startChild(args...)
	if err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()

	h := &harness{o: o, t: t}
	if o.wirestats && !o.tls {
		h.wire = &wireStats{}
	}
	for range o.owners {
		p, err := newProxy(addr, &h.ownerBytes)
		if err != nil {
			return nil, err
		}
		h.ownerProxies = append(h.ownerProxies, p)
	}
	for range o.lookups {
		p, err := newProxy(addr, &h.lookupBytes)
		if err != nil {
			return nil, err
		}
		h.lookupProxies = append(h.lookupProxies, p)
	}
	defer func() {
		for _, p := range append(h.ownerProxies, h.lookupProxies...) {
			p.Kill()
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startAt := time.Now()
	if err := sys.start(ctx, addr, h); err != nil {
		return nil, err
	}
	defer sys.stop()
	deadline := time.Now().Add(o.settle)
	for !sys.steady() {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no steady state after %s", o.settle)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Let startup traffic drain: a full lease and a sync period.
	time.Sleep(t.OwnerLease + t.Sync)
	fmt.Printf("== %s: steady after %s; measuring %s\n", sys.name(), time.Since(startAt).Round(time.Millisecond), o.duration)

	cpu0, err := cpuSeconds(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	ob0, lb0 := h.ownerBytes.Load(), h.lookupBytes.Load()
	if h.wire != nil {
		h.wire.start()
	}
	if o.profile != "" {
		cmd.Process.Signal(syscall.SIGUSR1) // start of the window: CPU profile on
	}
	t0 := time.Now()
	end := t0.Add(o.duration)
	crashedAt := map[int]time.Time{}
	var crashes []crashResult
	for k := range o.crashes {
		at := t0.Add(o.duration * time.Duration(k+1) / time.Duration(o.crashes+1))
		time.Sleep(time.Until(at))
		victim := k * o.owners / o.crashes
		p := &pendingCrash{owner: victim, stillSees: sys.probe(victim), known: make([]time.Duration, o.lookups),
			left: o.lookups, done: make(chan struct{})}
		h.mu.Lock()
		p.at = time.Now()
		h.pending = p
		h.mu.Unlock()
		h.ownerProxies[victim].Kill()
		sys.crash(victim)
		crashedAt[victim] = p.at
		// A lookup may have learned before any callback (none pending).
		for j := range o.lookups {
			h.check(j)
		}
		limit := 3*t.OwnerLease + 2*t.SyncTimeout
		select {
		case <-p.done:
		case <-time.After(limit):
		}
		h.mu.Lock()
		h.pending = nil
		known := slices.Clone(p.known)
		h.mu.Unlock()
		cr := crashResult{owner: victim}
		var ds []time.Duration
		for _, d := range known {
			if d == 0 {
				cr.unknown++
			} else {
				ds = append(ds, d)
			}
		}
		slices.Sort(ds)
		if len(ds) > 0 {
			cr.max, cr.median = ds[len(ds)-1], ds[len(ds)/2]
		}
		fmt.Printf("   crash %d: owner %d; every lookup knew after %s (median lookup %s, %d never)\n",
			k+1, victim, cr.max.Round(time.Millisecond), cr.median.Round(time.Millisecond), cr.unknown)
		crashes = append(crashes, cr)
	}
	time.Sleep(time.Until(end))
	if o.profile != "" {
		cmd.Process.Signal(syscall.SIGUSR2) // end of the window: profiles written
	}
	cpu1, err := cpuSeconds(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if h.wire != nil {
		classes := h.wire.stop()
		if sys.name() == "leasehold" {
			h.wire.print(classes, float64(o.lookups)*t1.Sub(t0).Hours(), h.lookupBytes.Load()-lb0)
		}
	}
	r := &result{
		system:      sys.name(),
		window:      t1.Sub(t0),
		cpu:         cpu1 - cpu0,
		ownerBytes:  h.ownerBytes.Load() - ob0,
		lookupBytes: h.lookupBytes.Load() - lb0,
		lookupHours: float64(o.lookups) * t1.Sub(t0).Hours(),
		crashes:     crashes,
	}
	for i := range o.owners {
		until := t1
		if c, ok := crashedAt[i]; ok {
			until = c
		}
		r.ownerHours += until.Sub(t0).Hours()
	}
	return r, nil
}

type metric struct {
	name string
	f    func(*result) float64
}

func maxCrash(r *result) float64 {
	var ds []float64
	for _, c := range r.crashes {
		if c.unknown == 0 {
			ds = append(ds, c.max.Seconds()*1000)
		}
	}
	if len(ds) == 0 {
		return math.NaN()
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func medianCrash(r *result) float64 {
	var ds []float64
	for _, c := range r.crashes {
		if c.median > 0 {
			ds = append(ds, c.median.Seconds()*1000)
		}
	}
	if len(ds) == 0 {
		return math.NaN()
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

var metrics = []metric{
	{"server CPU-s per owner-hour", func(r *result) float64 { return r.cpu / r.ownerHours }},
	{"server CPU-s (window)", func(r *result) float64 { return r.cpu }},
	{"owner bytes per owner-hour", func(r *result) float64 { return float64(r.ownerBytes) / r.ownerHours }},
	{"lookup bytes per lookup-hour", func(r *result) float64 { return float64(r.lookupBytes) / r.lookupHours }},
	{"all bytes per owner-hour", func(r *result) float64 { return float64(r.ownerBytes+r.lookupBytes) / r.ownerHours }},
	{"crash→every lookup knows, ms (median crash)", maxCrash},
	{"crash→median lookup knows, ms (median crash)", medianCrash},
	{"owner-hours in window", func(r *result) float64 { return r.ownerHours }},
	{"window s", func(r *result) float64 { return r.window.Seconds() }},
}

func report(rs []*result) {
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "metric\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t", r.system)
	}
	if len(rs) == 2 {
		fmt.Fprintf(w, "%s/%s\t", rs[0].system, rs[1].system)
	}
	fmt.Fprintln(w)
	for _, m := range metrics {
		fmt.Fprintf(w, "%s\t", m.name)
		for _, r := range rs {
			fmt.Fprintf(w, "%s\t", num(m.f(r)))
		}
		if len(rs) == 2 {
			fmt.Fprintf(w, "%.3f\t", m.f(rs[0])/m.f(rs[1]))
		}
		fmt.Fprintln(w)
	}
	w.Flush()
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func writeCSV(dir string, rs []*result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, rows [][]string) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		w := csv.NewWriter(f)
		w.WriteAll(rows)
		if err := w.Error(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	rows := [][]string{{"system", "metric", "value"}}
	for _, r := range rs {
		for _, m := range metrics {
			rows = append(rows, []string{r.system, m.name, strconv.FormatFloat(m.f(r), 'g', -1, 64)})
		}
	}
	if err := write("summary.csv", rows); err != nil {
		return err
	}
	rows = [][]string{{"system", "crash", "owner", "every_lookup_ms", "median_lookup_ms", "lookups_never"}}
	for _, r := range rs {
		for k, c := range r.crashes {
			rows = append(rows, []string{r.system, strconv.Itoa(k + 1), strconv.Itoa(c.owner),
				strconv.FormatInt(c.max.Milliseconds(), 10), strconv.FormatInt(c.median.Milliseconds(), 10), strconv.Itoa(c.unknown)})
		}
	}
	return write("crashes.csv", rows)
}
