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
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/protocol"
)

// The Owners of a loopback point run in a process of their own, apart from
// the Lookups, as an application's servers run apart from its frontends.
// In one process, every push round woke the goroutines of thousands of
// Lookups at once, and an Owner's answer waited behind them in the Go
// scheduler's run queues: the driver's round trips then measured the
// driver. The Owner process is the bench's own executable started with
// OwnerProcessArg; the driver speaks to it over its standard input and
// output, a command per line and a JSON answer per line.

// OwnerProcessArg is the first argument that makes the bench's executable
// the Owner process of a loopback point (RunOwnerProcess). A program that
// runs the loopback scenario must hand its arguments to RunOwnerProcess
// when they start with it: leasehold-bench does, and so does the test
// binary of this package.
const OwnerProcessArg = "loopback-owners"

// ownerProcConfig is the Owner process's first line: the point's Owners
// and how to reach the Manager.
type ownerProcConfig struct {
	Addr     string
	Owners   int
	Spread   time.Duration // the Owners start evenly over this long
	Timing   protocol.Timing
	CertsDir string // "": plaintext
	Seed     uint64 // of the churn's choices
}

// ownerProcStatus answers the commands that read the process's state.
type ownerProcStatus struct {
	Err      string  `json:",omitempty"`
	Holds    bool    `json:",omitempty"` // every Owner holds a lease
	Renewals []int64 `json:",omitempty"` // round trips, ns (take)
	Requests []int64 `json:",omitempty"`
	In, Out  int64   `json:",omitempty"` // bytes (meter)
	MsgIn    int64   `json:",omitempty"`
	MsgOut   int64   `json:",omitempty"`
	Warnings int64   `json:",omitempty"`
	Stopped  int     `json:",omitempty"` // Owners stopped by the churn (churn 0)
}

// RunOwnerProcess is the Owner process: it reads its ownerProcConfig from
// in, starts the Owners, and answers the driver's commands until in ends:
//
//	holds        whether every Owner holds a lease
//	record 1|0   start or stop keeping round trips
//	take         the round trips kept, forgetting them
//	meter        bytes and messages on the Owners' sockets, warnings
//	churn 1|0    start or stop the Owners' churn (0 answers how many stopped)
//	profile PATH start a CPU profile into PATH; "profile" alone stops it
//
// It returns the process's exit code.
func RunOwnerProcess(ctx context.Context, in io.Reader, out io.Writer, errOut io.Writer) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	if !sc.Scan() {
		fmt.Fprintln(errOut, "loopback-owners: no configuration on standard input")
		return 2
	}
	var cfg ownerProcConfig
	if err := json.Unmarshal(sc.Bytes(), &cfg); err != nil {
		fmt.Fprintf(errOut, "loopback-owners: configuration: %v\n", err)
		return 2
	}
	var trust *loopbackTrust
	if cfg.CertsDir != "" {
		trust = &loopbackTrust{dir: cfg.CertsDir}
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &ownerSet{ctx: ctx, addr: cfg.Addr, timing: cfg.Timing, trust: trust, meter: &wireMeter{},
		owners: make([]*ownerClient, cfg.Owners), rng: rand.New(rand.NewPCG(1, cfg.Seed))}
	defer func() {
		cancel()
		s.stopAll()
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.start(cfg.Spread); err != nil && ctx.Err() == nil {
			s.fail(err)
		}
	}()
	enc := json.NewEncoder(out)
	var (
		stopChurn func() int // nil: no churn running
		prof      *os.File
	)
	defer func() {
		if stopChurn != nil {
			stopChurn()
		}
	}()
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		var st ownerProcStatus
		switch cmd {
		case "holds":
			st.Holds = s.hold()
		case "record":
			s.meter.record(arg == "1")
		case "take":
			r, q := s.meter.takeRoundTrips()
			st.Renewals, st.Requests = nanos(r), nanos(q)
		case "meter":
			m := s.meter
			st.In, st.Out, st.MsgIn, st.MsgOut, st.Warnings = m.in.Load(), m.out.Load(), m.msgIn.Load(), m.msgOut.Load(), m.warnings.Load()
		case "churn":
			switch {
			case arg == "1" && stopChurn == nil:
				stopChurn = s.startChurn()
			case arg == "0" && stopChurn != nil:
				st.Stopped, stopChurn = stopChurn(), nil
			}
		case "profile":
			if prof != nil {
				pprof.StopCPUProfile()
				_ = prof.Close()
				prof = nil
			}
			if arg != "" {
				f, err := os.Create(arg)
				if err == nil {
					if err = pprof.StartCPUProfile(f); err != nil {
						_ = f.Close()
					} else {
						prof = f
					}
				}
				if err != nil {
					st.Err = err.Error()
				}
			}
		default:
			st.Err = fmt.Sprintf("unknown command %q", cmd)
		}
		if st.Err == "" {
			st.Err = s.failed()
		}
		if err := enc.Encode(st); err != nil {
			return 1
		}
	}
	return 0
}

func nanos(d []time.Duration) []int64 {
	out := make([]int64, len(d))
	for i, v := range d {
		out[i] = int64(v)
	}
	return out
}

func durations(n []int64) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v)
	}
	return out
}

// ownerSet is the Owners of the Owner process.
type ownerSet struct {
	ctx    context.Context
	addr   string
	timing protocol.Timing
	trust  *loopbackTrust
	meter  *wireMeter
	rng    *rand.Rand // the churn's, used by its goroutine alone

	mu     sync.Mutex
	owners []*ownerClient // nil while down
	err    string         // the first Owner that failed to start
	wg     sync.WaitGroup
}

func (s *ownerSet) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == "" {
		s.err = err.Error()
	}
}

func (s *ownerSet) failed() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// start starts the Owners, evenly over spread.
func (s *ownerSet) start(spread time.Duration) error {
	n := len(s.owners)
	begin := time.Now()
	for k := range n {
		if !sleepCtx(s.ctx, time.Until(begin.Add(spread*time.Duration(k)/time.Duration(n)))) {
			return s.ctx.Err()
		}
		c, err := s.startOwner(k)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.owners[k] = c
		s.mu.Unlock()
	}
	return nil
}

// startOwner starts Owner k, with its own certificate if the run has TLS.
func (s *ownerSet) startOwner(k int) (*ownerClient, error) {
	creds, err := s.trust.creds(certs.Owner, ownerID(k))
	if err != nil {
		return nil, err
	}
	return startOwner(s.ctx, s.addr, ownerID(k), 20000+k, s.timing, s.meter, creds)
}

// hold reports whether every Owner holds a lease.
func (s *ownerSet) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.owners {
		if o == nil || len(o.o.Held()) == 0 {
			return false
		}
	}
	return true
}

// startChurn runs churn until the function it returns is called, which
// answers how many Owners the churn stopped.
func (s *ownerSet) startChurn() func() int {
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan int, 1)
	go func() { done <- s.churn(ctx) }()
	return func() int {
		cancel()
		return <-done
	}
}

// churn stops Owners until ctx ends: every Renew×2/5 an Owner that is up
// stops, alternately leaving gracefully and crashing, and starts again (a
// new incarnation, same ID) after Renew×4/3. It returns how many it
// stopped.
func (s *ownerSet) churn(ctx context.Context) (stopped int) {
	every, down := s.timing.Renew*2/5, s.timing.Renew*4/3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return stopped
		case <-t.C:
		}
		s.mu.Lock()
		k := s.rng.IntN(len(s.owners))
		c := s.owners[k]
		s.owners[k] = nil
		s.mu.Unlock()
		if c == nil {
			continue // down already
		}
		crash := stopped%2 == 1
		stopped++
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if crash {
				c.crash()
			} else {
				c.leave(s.ctx)
			}
			if !sleepCtx(s.ctx, down) {
				return
			}
			n, err := s.startOwner(k)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.owners[k] = n
			s.mu.Unlock()
		}()
	}
}

// stopAll crashes every Owner that is up, once the goroutines that start
// them have ended (the caller cancelled s.ctx first).
func (s *ownerSet) stopAll() {
	s.wg.Wait()
	s.mu.Lock()
	owners := s.owners
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, o := range owners {
		if o != nil {
			wg.Go(o.crash)
		}
	}
	wg.Wait()
}

// ownerProc is the driver's side of the Owner process.
type ownerProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	done chan struct{}
	mu   sync.Mutex
}

// ownerProcCommand is how the driver starts the Owner process: the running
// executable with OwnerProcessArg.
func ownerProcCommand(ctx context.Context) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the bench's executable to run the Owners: %w", err)
	}
	return exec.CommandContext(ctx, self, OwnerProcessArg), nil
}

func startOwnerProc(ctx context.Context, cfg ownerProcConfig) (*ownerProc, error) {
	cmd, err := ownerProcCommand(ctx)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the Owner process: %w", err)
	}
	p := &ownerProc{cmd: cmd, in: in, out: bufio.NewScanner(out), done: make(chan struct{})}
	p.out.Buffer(make([]byte, 64*1024), 64<<20)
	go func() { _ = cmd.Wait(); close(p.done) }()
	b, _ := json.Marshal(cfg)
	if _, err := fmt.Fprintf(in, "%s\n", b); err != nil {
		p.stop()
		return nil, fmt.Errorf("configuring the Owner process: %w", err)
	}
	return p, nil
}

// call sends a command and reads its answer.
func (p *ownerProc) call(cmd string) (ownerProcStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st ownerProcStatus
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		return st, fmt.Errorf("the Owner process: %w", err)
	}
	if !p.out.Scan() {
		return st, errors.New("the Owner process exited")
	}
	if err := json.Unmarshal(p.out.Bytes(), &st); err != nil {
		return st, fmt.Errorf("the Owner process: %w", err)
	}
	if st.Err != "" {
		return st, fmt.Errorf("the Owner process: %s", st.Err)
	}
	return st, nil
}

// stop ends the Owner process: its input closes, it crashes its Owners
// and exits.
func (p *ownerProc) stop() {
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
