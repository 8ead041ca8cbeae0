package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
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
	unreached              int             // such changes some Lookup had not applied by the end
	ownerEvents, lookupRes int
	warnings               int64  // clients' warnings in the window (loopback_clients.go)
	load                   string // /proc/loadavg at the window's end
	answerP99              string // the Manager's own answer p99, a bucket of its histogram (loopback_metrics.go)
}

func runLoopback(ctx context.Context, o Options) (*Report, error) {
	plan := loopbackPlanFor(o)
	bin := o.Manager
	if o.ManagerProfile != "" && bin != "" {
		return nil, errors.New("a Manager profile needs the profiling build of the manager: give no Manager binary")
	}
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

// buildLeasehold builds pkg (./cmd/leasehold, or the same with a profiler)
// of the module the working directory is in, into dir.
func buildLeasehold(ctx context.Context, dir, pkg string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", errors.New("cannot find the leasehold module to build the manager from: run in the source tree, or give --manager-bin")
	}
	bin := filepath.Join(dir, "leasehold")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", pkg, err, strings.TrimSpace(string(b)))
	}
	return bin, nil
}

// managerProc is the Manager process under test.
type managerProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}

	mu     sync.Mutex
	losses []lossLine // its "loss notification" log lines
	tail   []string   // its last lines of stderr, for errors
}

// lossLine is a table change that carried a loss notification, as the
// Manager logged it: the LSN after the change and when it was applied (the
// log line's time, on the machine's clock, which the driver shares).
type lossLine struct {
	at  time.Time
	lsn keyspace.LSN
}

func startManager(ctx context.Context, bin, profDir, profile string, trust *loopbackTrust, metricsAddr string) (*managerProc, error) {
	args := append(append([]string{"manager", "--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr}, trust.managerArgs()...),
		"--timings", profile, "--log-format", "json", "--log-level", "info")
	cmd := exec.Command(bin, args...)
	if profDir != "" {
		cmd.Env = append(os.Environ(), "LEASEHOLD_PROFILE_DIR="+profDir)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &managerProc{cmd: cmd, done: make(chan struct{})}
	go m.readLog(stderr)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// "leasehold manager listening on ADDR (timings …)"
			if f := strings.Fields(sc.Text()); len(f) >= 5 && f[2] == "listening" {
				select {
				case addr <- f[4]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(m.done) }()
	select {
	case m.addr = <-addr:
		return m, nil
	case <-m.done:
		return nil, fmt.Errorf("the manager exited: %s", m.lastLines())
	case <-time.After(30 * time.Second):
		m.stop()
		return nil, errors.New("the manager did not say where it listens within 30 s")
	case <-ctx.Done():
		m.stop()
		return nil, ctx.Err()
	}
}

func (m *managerProc) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			LSN  uint64    `json:"lsn"`
		}
		m.mu.Lock()
		if len(m.tail) == 10 {
			m.tail = m.tail[1:]
		}
		m.tail = append(m.tail, line)
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "loss notification" {
			m.losses = append(m.losses, lossLine{at: rec.Time, lsn: keyspace.LSN(rec.LSN)})
		}
		m.mu.Unlock()
	}
}

func (m *managerProc) lastLines() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.tail, " | ")
}

func (m *managerProc) lossesBetween(from, to time.Time) []lossLine {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []lossLine
	for _, l := range m.losses {
		if !l.at.Before(from) && l.at.Before(to) {
			out = append(out, l)
		}
	}
	return out
}

func (m *managerProc) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// procCPU is a process's user + system CPU time, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	const hz = 100 // USER_HZ, 100 on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
}

// procRSS is a process's resident set and its peak, from /proc/PID/status.
func procRSS(pid int) (rss, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// loadDriver runs the Lookups of one point, and its Owners in a process
// of their own (loopback_owners.go).
type loadDriver struct {
	ctx     context.Context
	addr    string
	timing  protocol.Timing
	meter   *wireMeter
	trust   *loopbackTrust // nil: plaintext
	owners  *ownerProc
	nOwners int

	mu      sync.Mutex
	lookups []*lookupClient
	gone    []*lookupClient // stopped Lookups, kept for their arrivals
	wg      sync.WaitGroup
}

// startLookups starts the Lookups, evenly over spread, the full ones
// first.
func (d *loadDriver) startLookups(n int, spread time.Duration) error {
	d.lookups = make([]*lookupClient, n)
	start := time.Now()
	for j := range n {
		if !sleepCtx(d.ctx, time.Until(start.Add(spread*time.Duration(j)/time.Duration(n)))) {
			return d.ctx.Err()
		}
		c, err := d.startLookup(j, j < loopbackFull)
		if err != nil {
			return err
		}
		d.mu.Lock()
		d.lookups[j] = c
		d.mu.Unlock()
	}
	return nil
}

// startLookup starts the Lookup of slot j, with the slot's certificate if
// the run has TLS.
func (d *loadDriver) startLookup(j int, full bool) (*lookupClient, error) {
	creds, err := d.trust.creds(certs.Lookup, lookupName(j))
	if err != nil {
		return nil, err
	}
	return startLookup(d.ctx, d.addr, full, d.timing, d.meter, creds)
}

// ownersHold reports whether every Owner holds a lease.
func (d *loadDriver) ownersHold() (bool, error) {
	st, err := d.owners.call("holds")
	return st.Holds, err
}

func ownerID(k int) string { return fmt.Sprintf("owner-%05d", k) }

// settled reports whether every Owner holds a lease, every Lookup has
// synced, and the first full Lookup's copy has every range owned, by as
// many Owners as there are.
func (d *loadDriver) settled() (bool, error) {
	if hold, err := d.ownersHold(); !hold || err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lookups {
		if l == nil {
			return false, nil
		}
		if s, _ := l.arr.state(); s.IsZero() {
			return false, nil
		}
	}
	ref := d.lookups[0].full
	if ref == nil {
		return false, nil
	}
	names := map[string]bool{}
	for _, s := range ref.Segments() {
		if s.Entry.Owner == "" {
			return false, nil
		}
		names[s.Entry.Owner] = true
	}
	return len(names) == d.nOwners, nil
}

// synced counts the Lookups that have applied an update.
func (d *loadDriver) synced() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.lookups {
		if l != nil {
			if s, _ := l.arr.state(); !s.IsZero() {
				n++
			}
		}
	}
	return n
}

// refState describes the first Lookup's copy: its free segments and the
// Owners it names.
func (d *loadDriver) refState() string {
	d.mu.Lock()
	ref := d.lookups[0]
	d.mu.Unlock()
	if ref == nil || ref.full == nil {
		return "no copy"
	}
	free, names := 0, map[string]bool{}
	for _, s := range ref.full.Segments() {
		if s.Entry.Owner == "" {
			free++
		}
		names[s.Entry.Owner] = true
	}
	return fmt.Sprintf("%d free segments and %d Owners", free, len(names))
}

// churn restarts Lookups until ctx ends, while the Owner process churns
// its Owners (ownerSet.churn): every Renew/10 a Lookup stops and a new one
// starts after Renew/3 (a full one in the place of a full one). It returns
// how many of each stopped.
func (d *loadDriver) churn(ctx context.Context, rng *rand.Rand) (owners, lookups int, err error) {
	if _, err := d.owners.call("churn 1"); err != nil {
		return 0, 0, err
	}
	lookupEvery, lookupDown := d.timing.Renew/10, d.timing.Renew/3
	lt := time.NewTicker(lookupEvery)
	defer lt.Stop()
	for {
		select {
		case <-ctx.Done():
			st, err := d.owners.call("churn 0")
			return st.Stopped, lookups, err
		case <-lt.C:
			d.mu.Lock()
			j := rng.IntN(len(d.lookups))
			c := d.lookups[j]
			d.lookups[j] = nil
			if c != nil {
				d.gone = append(d.gone, c)
			}
			d.mu.Unlock()
			if c == nil {
				continue
			}
			lookups++
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				c.close()
				if !sleepCtx(d.ctx, lookupDown) {
					return
				}
				n, err := d.startLookup(j, c.full != nil)
				if err != nil {
					return
				}
				d.mu.Lock()
				d.lookups[j] = n
				d.mu.Unlock()
			}()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// propagation measures, for each change the Manager applied with a loss
// notification, the time from its apply (the Manager's log) to the moment
// the last Lookup applied it (the driver's clock). A Lookup counts for a
// change if it had synced before the change and either applied it or was
// still running at the end; one stopped before it applied the change is
// left out (it cannot be said when it would have).
func (d *loadDriver) propagation(changes []lossLine) (lags []time.Duration, unreached int) {
	d.mu.Lock()
	all := slices.Clone(d.gone)
	for _, l := range d.lookups {
		if l != nil {
			all = append(all, l)
		}
	}
	d.mu.Unlock()
	for _, ch := range changes {
		var last time.Time
		missed := false
		for _, l := range all {
			synced, stopped := l.arr.state()
			if synced.IsZero() || !synced.Before(ch.at) {
				continue
			}
			at, ok := l.arr.reached(ch.lsn)
			switch {
			case ok && (stopped.IsZero() || at.Before(stopped)):
				if at.After(last) {
					last = at
				}
			case stopped.IsZero():
				missed = true
			}
		}
		if missed {
			unreached++
			continue
		}
		if !last.IsZero() {
			lags = append(lags, max(last.Sub(ch.at), 0))
		}
	}
	return lags, unreached
}

func (d *loadDriver) stopAll() {
	d.mu.Lock()
	lookups := slices.Clone(d.lookups)
	d.mu.Unlock()
	var wg sync.WaitGroup
	if d.owners != nil {
		wg.Go(d.owners.stop)
	}
	for _, l := range lookups {
		if l != nil {
			wg.Add(1)
			go func() { defer wg.Done(); l.close() }()
		}
	}
	wg.Wait()
}

// usage is a snapshot of the counters a window is measured between.
type usage struct {
	at                   time.Time
	mgrCPU, driverCPU    time.Duration
	in, out, msgIn, msgO int64
	warnings             int64
}

// usage reads the counters: the Manager's CPU (pid), the driver's (its
// own process and the Owner process), and the bytes, messages and warnings
// of both.
func (d *loadDriver) usage(pid int) (usage, error) {
	c, err := procCPU(pid)
	if err != nil {
		return usage{}, err
	}
	self, err := procCPU(os.Getpid())
	if err != nil {
		return usage{}, err
	}
	owners, err := procCPU(d.owners.cmd.Process.Pid)
	if err != nil {
		return usage{}, fmt.Errorf("the Owner process: %w", err)
	}
	st, err := d.owners.call("meter")
	if err != nil {
		return usage{}, err
	}
	return usage{at: time.Now(), mgrCPU: c, driverCPU: self + owners,
		in: d.meter.in.Load() + st.In, out: d.meter.out.Load() + st.Out,
		msgIn: d.meter.msgIn.Load() + st.MsgIn, msgO: d.meter.msgOut.Load() + st.MsgOut,
		warnings: d.meter.warnings.Load() + st.Warnings}, nil
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
	dctx, cancel := context.WithCancel(ctx)
	d := &loadDriver{ctx: dctx, addr: mgr.addr, timing: plan.timing, meter: &wireMeter{}, trust: trust}
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
		if _, err := d.owners.call("record 0"); err != nil {
			return nil, err
		}
		if profDir != "" {
			_ = mgr.cmd.Process.Signal(syscall.SIGUSR2)
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
			r.propagation, r.unreached = d.propagation(mgr.lossesBetween(before.at, after.at))
		}
		out = append(out, r)
	}
	return out, nil
}

func durPct(v []time.Duration, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(p/100*float64(len(s)-1))]
}

func fmtDur(v []time.Duration, p float64) string {
	if len(v) == 0 {
		return "—"
	}
	return durPct(v, p).Round(100 * time.Microsecond).String()
}

func loopbackReport(plan loopbackPlan, results []loopbackResult) *Report {
	setup := "PRS §7: one Manager on a 2003 2.4 GHz dual Xeon, up to 2,000 frontends + 500 middle-tier (2,500 nodes)"
	wire := "plaintext gRPC"
	if plan.tls {
		wire = "mutual TLS (a throwaway CA; the Manager's replica certificate, one certificate per Owner and per Lookup)"
	}
	ours := fmt.Sprintf("one `leasehold manager` process (group of one, %s timings, memory only, %s) on 127.0.0.1; a load driver of two processes, one with N real Owners (owner library), the other with M Lookups "+
		"(%d real lookup libraries with a full copy, the rest thin), as servers and frontends run apart, each client with its own TCP connection and gRPC stream; Owners start over %s, then, once each holds leases, Lookups one every %s; "+
		"then a warm-up until every range is owned and every Lookup synced plus two renewals; then a %s window without churn and a %s window with churn "+
		"(an Owner stops every %s, alternately leaving gracefully and crashing, back after %s; a Lookup restarts every %s, back after %s)",
		plan.profile, wire, loopbackFull, plan.spread, plan.perLookup, plan.measure, plan.measure,
		(plan.timing.Renew * 2 / 5).Round(time.Millisecond), (plan.timing.Renew * 4 / 3).Round(time.Millisecond),
		(plan.timing.Renew / 10).Round(time.Millisecond), (plan.timing.Renew / 3).Round(time.Millisecond))
	cpu := Figure{Name: "loopback-cpu", Title: "Manager process CPU vs. number of nodes, real sockets (PRS Figure 7)",
		XLabel: "nodes (Owners + Lookups)", YLabel: "Manager CPU (% of one core, user + system)", Points: true, LegendTop: true,
		Paper: "PRS Figure 7: Manager CPU load as frontends and middle-tier servers increase; \"quite small\"",
		Setup: setup, Ours: ours}
	net := Figure{Name: "loopback-network", Title: "Manager network vs. number of nodes, real sockets (PRS Figure 8)",
		XLabel: "nodes (Owners + Lookups)", YLabel: "Manager traffic, sent + received (KB/s of TCP payload)", Points: true, LegendTop: true,
		Paper: "PRS Figure 8: Manager network load as frontends and middle-tier servers increase", Setup: setup, Ours: ours}
	lat := Figure{Name: "loopback-latency", Title: "Renewal round trip and change propagation, p99, real sockets",
		XLabel: "nodes (Owners + Lookups)", YLabel: "p99 (ms)", Points: true, LegendTop: true,
		Paper: "neither paper reports either; our goals: renewal p99 < 100 ms, propagation p99 < 1 s at 1,000 Owners + 4,000 Lookups",
		Setup: "—", Ours: ours}
	table := [][]string{{"owners", "lookups", "churn", "window", "manager CPU", "manager RSS (peak)", "msgs/s", "KB/s",
		"renewals", "renewal p50", "renewal p99", "lease requests", "request p99", "manager answer p99", "changes", "propagation p50", "propagation p99", "propagation max", "not reached",
		"owner stops", "lookup restarts", "client warnings", "driver CPU", "load average"}}
	for _, churn := range []bool{false, true} {
		var x, yc, yn, yr, yp []float64
		for _, r := range results {
			if r.churn != churn {
				continue
			}
			x = append(x, float64(r.owners+r.lookups))
			yc = append(yc, 100*r.cpu)
			yn = append(yn, r.bytes/1000)
			yr = append(yr, durPct(r.renewals, 99).Seconds()*1000)
			yp = append(yp, durPct(r.propagation, 99).Seconds()*1000)
		}
		if len(x) == 0 {
			continue
		}
		name := churnName(churn)
		cpu.Series = append(cpu.Series, Series{Name: name, X: x, Y: yc})
		net.Series = append(net.Series, Series{Name: name, X: x, Y: yn})
		lat.Series = append(lat.Series, Series{Name: "renewal p99, " + name, X: x, Y: yr})
		if churn {
			lat.Series = append(lat.Series, Series{Name: "propagation p99, " + name, X: x, Y: yp})
		}
	}
	for _, r := range results {
		table = append(table, []string{fmt.Sprint(r.owners), fmt.Sprint(r.lookups), fmt.Sprint(r.churn),
			r.window.Round(time.Second).String(),
			fmt.Sprintf("%.2f%%", 100*r.cpu), fmt.Sprintf("%.0f MB (%.0f MB)", float64(r.rss)/1e6, float64(r.peakRSS)/1e6),
			fmt.Sprintf("%.0f", r.msgs), fmt.Sprintf("%.1f", r.bytes/1000),
			fmt.Sprint(len(r.renewals)), fmtDur(r.renewals, 50), fmtDur(r.renewals, 99),
			fmt.Sprint(len(r.requests)), fmtDur(r.requests, 99), r.answerP99,
			fmt.Sprint(len(r.propagation)), fmtDur(r.propagation, 50), fmtDur(r.propagation, 99), fmtDur(r.propagation, 100),
			fmt.Sprint(r.unreached), fmt.Sprint(r.ownerEvents), fmt.Sprint(r.lookupRes), fmt.Sprint(r.warnings),
			fmt.Sprintf("%.1f%%", 100*r.driverCPU), r.load})
	}
	// The largest point, for the one-line measurements.
	var big loopbackPoint
	for _, r := range results {
		if r.owners+r.lookups > big.owners+big.lookups {
			big = r.loopbackPoint
		}
	}
	at := fmt.Sprintf("at %d Owners + %d Lookups", big.owners, big.lookups)
	for _, r := range results {
		if r.loopbackPoint != big {
			continue
		}
		sep := func(s string) string {
			if s == "" {
				return at + ": "
			}
			return s + "; "
		}
		cpu.Measured = sep(cpu.Measured) + fmt.Sprintf("%.2f%% of one core %s", 100*r.cpu, churnName(r.churn))
		net.Measured = sep(net.Measured) + fmt.Sprintf("%.1f KB/s, %.0f messages/s %s", r.bytes/1000, r.msgs, churnName(r.churn))
		lat.Measured = sep(lat.Measured) + fmt.Sprintf("renewal p99 %s %s", fmtDur(r.renewals, 99), churnName(r.churn))
		if r.churn {
			lat.Measured += fmt.Sprintf(", propagation p99 %s over %d changes (%d not reached)", fmtDur(r.propagation, 99), len(r.propagation), r.unreached)
		}
	}
	return &Report{
		Figures: []Figure{cpu, net, lat},
		Table:   table,
		Notes: []string{
			"Manager CPU is the process's user + system time from /proc/PID/stat over the window (CPU time, not wall time), as a share of one core; RSS from /proc/PID/status at the window's end.",
			"Bytes and messages are counted on the driver's side of every connection (TCP payload: protobuf, gRPC and HTTP/2 framing, and the TLS records and handshakes when the run has TLS; no IP/TCP headers), both directions; the Manager talks to nobody else.",
			"A round trip is an Owner's LeaseRequest to the LeaseResponse acknowledging it, timed in the driver (the client side), for every request answered in the window; 'renewal' columns are the steady renewals (held_as_acked, not leaving or draining), 'request' every lease request (joins, drains and goodbyes too, whose answers wait for the Manager's membership round, up to 1 s).",
			"Propagation: for each change with a loss notification that the Manager applied in the window, from the time of its log line (applied, on the machine's clock, millisecond precision) to the moment the last Lookup that had synced before it applied an update reaching its LSN (driver's clock); Lookups stopped before they had it are left out; 'not reached' counts changes some running Lookup still lacked a poll after the window.",
			fmt.Sprintf("Thin Lookups speak the sync protocol on the real gRPC stream as the lookup library does without heartbeats (same requests, a poll every Sync, same gap repair; every update received is decoded) but keep only their LSN; %d per point are the real lookup library.", loopbackFull),
			"Manager answer p99: the Manager's own histogram leasehold_renewal_answer_seconds (every lease request it accepted, from its arrival to its answer handed to the Owner's stream), read from its metrics listener before and after the window; the bound of the bucket that holds the 99th percentile (buckets 10, 25, 50, 100, 250, 500 ms …). The driver's round trips add the sockets, both processes' scheduling and the driver's own work.",
			"Client warnings are the log records at warn level of the Owners and Lookups in the window: a stream to the Manager that broke (and was reopened), or an Owner that left before all its ranges moved.",
			"The driver's two processes run on the same 2 cores as the Manager (their CPU together is the 'driver CPU' column): latencies include their scheduling.",
		},
	}
}
