package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

func init() {
	scenarios["loopback"] = scenario{
		about: "PRS Figures 7–8 on real sockets: one leasehold manager process and thousands of real Owner and Lookup clients on 127.0.0.1; Manager CPU, RSS, messages, bytes, renewal and propagation p99",
		run:   runLoopback,
	}
}

// loopbackPoint is one size of the loopback sweep. Each size runs one
// Manager process: a window without churn, then one with churn.
type loopbackPoint struct{ owners, lookups int }

// loopbackFull is how many of a point's Lookups are the real lookup
// library with a full copy of the table; the rest are thin (loopback_clients.go).
const loopbackFull = 20

type loopbackPlan struct {
	points    []loopbackPoint
	timing    protocol.Timing
	profile   string        // the Manager's --timings
	measure   time.Duration // each window
	spread    time.Duration // Owners start over this long
	perLookup time.Duration // Lookups start one per this long
	churn     []bool
	tls       bool // mutual TLS between every client and the Manager (loopback_tls.go)
	perConn   int  // thin Lookups per gRPC connection (1: each its own)
	sync      bool // thin Lookups open Sync streams rather than Watches
	replicas  int  // read replicas beside the leader, serving every Lookup
}

func (p loopbackPlan) lookupSpread(n int) time.Duration { return p.perLookup * time.Duration(n) }

func loopbackPlanFor(o Options) loopbackPlan {
	p := loopbackPlan{timing: protocol.Production(), profile: "production", measure: 2 * time.Minute,
		spread: 20 * time.Second, perLookup: 100 * time.Millisecond,
		points: []loopbackPoint{{100, 400}, {500, 2000}, {1000, 4000}}}
	if o.Beyond {
		p.points = append(p.points, loopbackPoint{2000, 8000})
	}
	if o.Size == Smoke {
		p.timing, p.profile, p.measure, p.spread, p.perLookup = protocol.Fast(), "fast", 3*time.Second, 200*time.Millisecond, 10*time.Millisecond
		p.points = []loopbackPoint{{4, 16}}
	}
	if o.Measure > 0 {
		p.measure = o.Measure
	}
	if o.Owners > 0 && o.Lookups > 0 {
		p.points = []loopbackPoint{{o.Owners, o.Lookups}}
	}
	p.tls = o.TLS
	p.perConn = max(o.LookupsPerConn, 1)
	p.sync = o.SyncStreams
	p.replicas = o.ReadReplicas
	if o.LookupEvery > 0 {
		p.perLookup = o.LookupEvery
	}
	switch o.Churn {
	case "on":
		p.churn = []bool{true}
	case "off":
		p.churn = []bool{false}
	default:
		p.churn = []bool{false, true}
	}
	return p
}

// loopbackResult is one measured window.
type loopbackResult struct {
	loopbackPoint
	churn                  bool
	window                 time.Duration
	cpu                    float64         // Manager CPU seconds (user + system) per second
	driverCPU              float64         // the load driver's, likewise
	rss, peakRSS           int64           // bytes, at the window's end
	bytes, msgs            float64         // per second, both directions
	renewals               []time.Duration // steady renewals' round trips
	requests               []time.Duration // every lease request's
	propagation            []time.Duration // per change with a loss notification
	replicaLag             []time.Duration // per such change, from the leader's apply to the last read replica's
	unreached              int             // such changes some Lookup had not applied by the end
	ownerEvents, lookupRes int
	warnings               int64     // clients' warnings in the window (loopback_clients.go)
	load                   string    // /proc/loadavg at the window's end
	answerP99              string    // the Manager's own answer p99, a bucket of its histogram (loopback_metrics.go)
	procs                  []procUse // each process's use: the leader, the read replicas, the driver's (loopback_procs.go)
}

func runLoopback(ctx context.Context, o Options) (*Report, error) {
	plan := loopbackPlanFor(o)
	bin := o.Manager
	if bin == "" {
		dir, err := os.MkdirTemp("", "leasehold-loopback")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.progress(0, "building the leasehold command")
		pkg := "./cmd/leasehold"
		if o.ManagerProfile != "" {
			pkg = "./cmd/leasehold-bench/internal/bench/profiledmanager"
		}
		if bin, err = buildLeasehold(ctx, dir, pkg); err != nil {
			return nil, err
		}
	}
	var results []loopbackResult
	var failed []string
	for i, pt := range plan.points {
		step := fmt.Sprintf("%d owners, %d lookups", pt.owners, pt.lookups)
		o.progress(float64(i)/float64(len(plan.points)), step)
		prof := ""
		if o.ManagerProfile != "" {
			prof = filepath.Join(o.ManagerProfile, fmt.Sprintf("%d-%d", pt.owners, pt.lookups))
			if err := os.MkdirAll(prof, 0o755); err != nil {
				return nil, err
			}
		}
		rs, err := runLoopbackPoint(ctx, bin, prof, plan, pt)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			// A point past what the machine can carry fails to settle:
			// report it and keep the others.
			failed = append(failed, fmt.Sprintf("%s: %v", step, err))
			continue
		}
		results = append(results, rs...)
		for _, r := range rs { // a line per window as it ends, for long sweeps
			fmt.Fprintf(os.Stderr, "loopback: %d/%d churn=%v: manager CPU %.2f%%, %.0f msgs/s, %.1f KB/s, renewal p99 %s (Manager's answer %s), propagation p99 %s (%d changes, %d not reached), load %s\n",
				r.owners, r.lookups, r.churn, 100*r.cpu, r.msgs, r.bytes/1000, fmtDur(r.renewals, 99), r.answerP99, fmtDur(r.propagation, 99), len(r.propagation), r.unreached, r.load)
			fmt.Fprintf(os.Stderr, "loopback: per process: %s\n", procsString(r.procs))
		}
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("every point failed: %s", strings.Join(failed, "; "))
	}
	r := loopbackReport(plan, results)
	for _, f := range failed {
		r.Notes = append(r.Notes, "not measured: "+f)
	}
	return r, nil
}

func runLoopbackPoint(ctx context.Context, bin, profDir string, plan loopbackPlan, pt loopbackPoint) (_ []loopbackResult, err error) {
	var trust *loopbackTrust
	if plan.tls {
		if trust, err = newLoopbackTrust(pt.owners, pt.lookups); err != nil {
			return nil, err
		}
		defer trust.close()
	}
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	mm, err := newManagerMetrics(metricsAddr, trust)
	if err != nil {
		return nil, err
	}
	mgr, err := startManager(ctx, bin, profDir, plan.profile, trust, metricsAddr)
	if err != nil {
		return nil, err
	}
	defer mgr.stop()
	pid := mgr.cmd.Process.Pid
	procs := []benchProc{{name: "leader", pid: pid, metrics: mm}}
	lookupAddrs := []string{mgr.addr}
	var replicas []*managerProc
	if plan.replicas > 0 {
		lookupAddrs = nil
	}
	for i := range plan.replicas { // stopped before the leader: defers run last first
		rr, rm, err := startLoopbackReplica(ctx, bin, plan.profile, trust, mgr, uint64(i+2))
		if err != nil {
			return nil, err
		}
		defer rr.stop()
		lookupAddrs = append(lookupAddrs, rr.addr)
		replicas = append(replicas, rr)
		procs = append(procs, benchProc{name: fmt.Sprintf("read replica %d", i+2), pid: rr.cmd.Process.Pid, metrics: rm})
	}
	dctx, cancel := context.WithCancel(ctx)
	d := &loadDriver{ctx: dctx, addrs: lookupAddrs, timing: plan.timing, meter: &wireMeter{}, trust: trust, perConn: plan.perConn, sync: plan.sync}
	defer func() {
		cancel()
		d.stopAll()
		d.wg.Wait()
	}()
	// Warm-up: the Owners start, and once each holds leases the Lookups
	// start, each asking for a snapshot of the table (sent to all alike);
	// once every Lookup has a copy and every range is owned, two renewals
	// more so that the start-up moves are over. Lookups starting while the
	// table is being built would each be sent every change of it.
	certsDir := ""
	if trust != nil {
		certsDir = trust.dir
	}
	d.nOwners = pt.owners
	d.owners, err = startOwnerProc(dctx, ownerProcConfig{Addr: mgr.addr, Owners: pt.owners, Spread: plan.spread,
		Timing: plan.timing, CertsDir: certsDir, Seed: uint64(pt.owners)})
	if err != nil {
		return nil, err
	}
	procs = append(procs, benchProc{name: "driver (Lookups)", pid: os.Getpid()}, benchProc{name: "driver (Owners)", pid: d.owners.cmd.Process.Pid})
	limit := time.Now().Add(plan.spread + 3*plan.timing.ManagerLease + 5*time.Minute)
	for {
		hold, err := d.ownersHold()
		if err != nil {
			return nil, err
		}
		if hold {
			break
		}
		select {
		case <-mgr.done:
			return nil, fmt.Errorf("the manager exited: %s", mgr.lastLines())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(plan.timing.Renew / 30):
		}
		if time.Now().After(limit) {
			return nil, errors.New("the Owners did not all hold leases in time")
		}
	}
	if err := d.startLookups(pt.lookups, plan.lookupSpread(pt.lookups)); err != nil {
		return nil, err
	}
	limit = time.Now().Add(5 * time.Minute)
	for {
		settled, err := d.settled()
		if err != nil {
			return nil, err
		}
		if settled {
			break
		}
		select {
		case <-mgr.done:
			return nil, fmt.Errorf("the manager exited: %s", mgr.lastLines())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(plan.timing.Renew / 30):
		}
		if time.Now().After(limit) {
			return nil, fmt.Errorf("%d of %d Lookups had synced and the first Lookup's copy had %s, 5 minutes after the last Lookup started",
				d.synced(), pt.lookups, d.refState())
		}
	}
	if !sleepCtx(ctx, 2*plan.timing.Renew) {
		return nil, ctx.Err()
	}
	var out []loopbackResult
	rng := rand.New(rand.NewPCG(1, uint64(pt.owners)))
	for _, churn := range plan.churn {
		before, err := d.usage(pid)
		if err != nil {
			return nil, err
		}
		procsBefore, err := readProcs(ctx, procs)
		if err != nil {
			return nil, err
		}
		answered, aerr := mm.answerBuckets(ctx)
		if _, err := d.owners.call("take"); err != nil {
			return nil, err
		}
		if _, err := d.owners.call("record 1"); err != nil {
			return nil, err
		}
		var driverProf *os.File
		if profDir != "" { // profile the window: cpu-1.prof, cpu-2.prof in order
			_ = mgr.cmd.Process.Signal(syscall.SIGUSR1)
			// and the driver's own, beside it: its scheduling and work are
			// in every round trip it times.
			driverProf, err = os.Create(filepath.Join(profDir, fmt.Sprintf("driver-cpu-%d.prof", len(out)+1)))
			if err != nil {
				return nil, err
			}
			if err := pprof.StartCPUProfile(driverProf); err != nil {
				driverProf.Close()
				return nil, fmt.Errorf("driver profile: %w", err)
			}
			if _, err := d.owners.call("profile " + filepath.Join(profDir, fmt.Sprintf("owners-cpu-%d.prof", len(out)+1))); err != nil {
				return nil, err
			}
		}
		r := loopbackResult{loopbackPoint: pt, churn: churn}
		if churn {
			cctx, stopChurn := context.WithTimeout(ctx, plan.measure)
			r.ownerEvents, r.lookupRes, err = d.churn(cctx, rng)
			stopChurn()
			if err != nil {
				return nil, err
			}
		} else if !sleepCtx(ctx, plan.measure) {
			return nil, ctx.Err()
		}
		after, err := d.usage(pid)
		if err != nil {
			return nil, fmt.Errorf("the manager exited: %s", mgr.lastLines())
		}
		procsAfter, err := readProcs(ctx, procs)
		if err != nil {
			return nil, fmt.Errorf("a process exited: %w", err)
		}
		if _, err := d.owners.call("record 0"); err != nil {
			return nil, err
		}
		if profDir != "" {
			_ = mgr.cmd.Process.Signal(syscall.SIGUSR2)
			waitForFile(ctx, filepath.Join(profDir, fmt.Sprintf("heap-%d.prof", len(out)+1)), 30*time.Second)
			pprof.StopCPUProfile()
			if err := driverProf.Close(); err != nil {
				return nil, err
			}
			if _, err := d.owners.call("profile"); err != nil {
				return nil, err
			}
		}
		r.answerP99 = "not read"
		if after, err := mm.answerBuckets(ctx); aerr == nil && err == nil {
			r.answerP99 = fmtBucket(bucketQuantile(answered, after, 0.99))
		}
		r.load = loadAverage()
		r.rss, r.peakRSS = procRSS(pid)
		secs := after.at.Sub(before.at).Seconds()
		r.window = after.at.Sub(before.at)
		r.cpu = (after.mgrCPU - before.mgrCPU).Seconds() / secs
		r.driverCPU = (after.driverCPU - before.driverCPU).Seconds() / secs
		r.bytes = float64(after.in+after.out-before.in-before.out) / secs
		r.msgs = float64(after.msgIn+after.msgO-before.msgIn-before.msgO) / secs
		r.procs = procUses(procs, procsBefore, procsAfter, secs)
		st, err := d.owners.call("take")
		if err != nil {
			return nil, err
		}
		r.renewals, r.requests = durations(st.Renewals), durations(st.Requests)
		r.warnings = after.warnings - before.warnings
		if churn {
			// Give the last changes a poll to arrive, then measure them.
			if !sleepCtx(ctx, plan.timing.Sync) {
				return nil, ctx.Err()
			}
			changes := mgr.lossesBetween(before.at, after.at)
			r.propagation, r.unreached = d.propagation(changes)
			r.replicaLag = replicaLags(changes, replicas)
		}
		out = append(out, r)
	}
	return out, nil
}

// waitForFile waits until name exists, at most limit: the Manager's heap
// profile of a window, taken before the clients stop.
func waitForFile(ctx context.Context, name string, limit time.Duration) {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if _, err := os.Stat(name); err == nil {
			return
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return
		}
	}
}
