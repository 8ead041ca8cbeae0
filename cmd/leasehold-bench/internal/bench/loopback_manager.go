package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// The Manager of a loopback point: the leasehold binary built once, run as
// a process of its own (a group of one), its log read for the losses it
// records, and its CPU and memory read from /proc.

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
	return launchManager(ctx, bin, profDir, args)
}

// launchManager starts leasehold with args (a manager command) and returns
// once it says where it listens.
func launchManager(ctx context.Context, bin, profDir string, args []string) (*managerProc, error) {
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

// replicaLags returns, for each change the leader applied, how long after
// it the last of the read replicas applied it: each Manager logs a loss
// notification when it applies a change that carries one, naming the LSN
// it has then (at or past the change's). A change some replica has not
// logged is left out.
func replicaLags(changes []lossLine, replicas []*managerProc) []time.Duration {
	if len(replicas) == 0 {
		return nil
	}
	var out []time.Duration
	for _, ch := range changes {
		var last time.Time
		for _, rr := range replicas {
			rr.mu.Lock()
			i := slices.IndexFunc(rr.losses, func(l lossLine) bool { return l.lsn >= ch.lsn })
			at := time.Time{}
			if i >= 0 {
				at = rr.losses[i].at
			}
			rr.mu.Unlock()
			if at.IsZero() {
				last = time.Time{}
				break
			}
			if at.After(last) {
				last = at
			}
		}
		if !last.IsZero() {
			out = append(out, max(last.Sub(ch.at), 0))
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
