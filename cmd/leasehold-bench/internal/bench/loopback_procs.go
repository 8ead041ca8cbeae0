package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// What each process of a loopback point used in a window: the leader, each
// read replica, and the driver's processes (this one, with the Lookups,
// and the Owner process). CPU and RSS from /proc; bytes from
// /proc/PID/io (rchar + wchar: every read and write system call, which
// for a Manager with no data directory are its sockets — clients and Raft
// peers — and its log); messages, for a Manager, from its own gRPC
// counters (leasehold_grpc_server_msg_received_total and _sent_total,
// every method: Owners', Lookups' and Raft's); the Lookups a Manager
// serves from its leasehold_lookups gauge.

// benchProc is one process of a point.
type benchProc struct {
	name    string
	pid     int
	metrics *managerMetrics // nil: not a Manager
}

// procCounters is a process's counters at one moment.
type procCounters struct {
	cpu     time.Duration
	io      int64   // rchar + wchar
	msgs    float64 // gRPC messages received and sent; < 0: not read
	lookups float64 // Lookups served (leasehold_lookups); < 0: not read
	syncs   float64 // sync streams opened (started_total of Lookups.Watch and Lookups.Sync)
}

// procUse is what a process used over a window.
type procUse struct {
	name        string
	cpu         float64 // CPU seconds per second
	rss, peak   int64
	bytes, msgs float64 // per second; msgs < 0: not read
	lookups     float64 // at the window's end; < 0: not a Manager
	syncs       float64 // sync streams (Watches or Sync streams) opened in the window
}

func readProc(ctx context.Context, p benchProc) (procCounters, error) {
	c := procCounters{msgs: -1, lookups: -1}
	var err error
	if c.cpu, err = procCPU(p.pid); err != nil {
		return c, fmt.Errorf("%s: %w", p.name, err)
	}
	c.io = procIO(p.pid)
	if p.metrics != nil {
		if s, err := p.metrics.sums(ctx, "leasehold_grpc_server_msg_received_total", "leasehold_grpc_server_msg_sent_total", "leasehold_lookups", syncStarted, watchStarted); err == nil {
			c.msgs = s["leasehold_grpc_server_msg_received_total"] + s["leasehold_grpc_server_msg_sent_total"]
			c.lookups = s["leasehold_lookups"]
			c.syncs = s[syncStarted] + s[watchStarted]
		}
	}
	return c, nil
}

// The streams a Lookup opens: a Watch, or a Sync stream (--sync-streams).
const (
	syncStarted  = `leasehold_grpc_server_started_total{grpc_method="Sync",`
	watchStarted = `leasehold_grpc_server_started_total{grpc_method="Watch",`
)

// procIO is a process's rchar + wchar from /proc/PID/io (0 if unread).
func procIO(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && (k == "rchar" || k == "wchar") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

// procUses turns two readings of procs, secs apart, into their use.
func procUses(procs []benchProc, before, after []procCounters, secs float64) []procUse {
	out := make([]procUse, len(procs))
	for i, p := range procs {
		u := procUse{name: p.name, msgs: -1, lookups: after[i].lookups, syncs: after[i].syncs - before[i].syncs}
		u.cpu = (after[i].cpu - before[i].cpu).Seconds() / secs
		u.bytes = float64(after[i].io-before[i].io) / secs
		if before[i].msgs >= 0 && after[i].msgs >= 0 {
			u.msgs = (after[i].msgs - before[i].msgs) / secs
		}
		u.rss, u.peak = procRSS(p.pid)
		out[i] = u
	}
	return out
}

func (u procUse) String() string {
	s := fmt.Sprintf("%s CPU %.2f%%, RSS %.0f MB (peak %.0f MB), %.1f KB/s", u.name, 100*u.cpu, float64(u.rss)/1e6, float64(u.peak)/1e6, u.bytes/1000)
	if u.msgs >= 0 {
		s += fmt.Sprintf(", %.0f msgs/s", u.msgs)
	}
	if u.lookups >= 0 {
		s += fmt.Sprintf(", %.0f Lookups (%.0f sync streams opened in the window)", u.lookups, u.syncs)
	}
	return s
}

// sums reads the Manager's metrics and sums every series of each name; a
// name with a '{' sums the series whose lines start with it.
func (m *managerMetrics) sums(ctx context.Context, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	err := m.lines(ctx, func(line string) error {
		if strings.HasPrefix(line, "#") {
			return nil
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			if j := strings.LastIndexByte(line, ' '); j > 0 {
				rest = line[j+1:]
			}
		}
		for _, n := range names {
			if name == n || strings.Contains(n, "{") && strings.HasPrefix(line, n) {
				if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
					out[n] += v
				}
			}
		}
		return nil
	})
	return out, err
}

func readProcs(ctx context.Context, procs []benchProc) ([]procCounters, error) {
	out := make([]procCounters, len(procs))
	for i, p := range procs {
		c, err := readProc(ctx, p)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}
