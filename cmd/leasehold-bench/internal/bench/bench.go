// Package bench runs the evaluation experiments of the Centrifuge and PRS
// papers on the deterministic simulation (internal/sim) under production
// timings and virtual time, and writes what they measure: a CSV file per
// series, a PNG plot per figure and a summary that puts each figure beside
// the paper's.
//
// cmd/leasehold-bench is its command line (its internal/benchcli).
//
// # Usage
//
//	r, err := bench.Run(ctx, "rack", bench.Options{Size: bench.Full})
//	…
//	err = r.Write("bench-out", os.Stdout)
//
// The Manager's CPU is the real time spent inside the calls to its leader
// replica, a replica.Replica of one voter (a stopwatch around StepLease,
// StepSync, Tick and the replica.Drive that follows each, Raft's
// log and the state machine included) per virtual second: a fraction of
// one core of the machine the benchmark runs on. Its network load is the
// bytes of the messages it sends and receives per virtual second, by the
// simulation's estimate of the encoded size (close to the protobuf
// encoding; no TCP, TLS or gRPC framing).
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// productionSnapshotEntries is replica.ReplicaConfig's default
// SnapshotEntries: the simulated Manager snapshots its State as often as a
// production one (the simulation's own default, 100, is for exercising log
// compaction under faults, and would make the snapshots most of the CPU
// measured).
const productionSnapshotEntries = 10000

// Size selects the scale of a scenario.
type Size int

const (
	// Full is the paper's setup (and beyond, for scale): minutes of real
	// time.
	Full Size = iota
	// Smoke is a tiny run of the same code, for tests: seconds.
	Smoke
)

// Options configure a run.
type Options struct {
	Size Size
	Seed uint64 // 0: 1
	// Beyond adds to scale the points past the papers' 2,500 nodes that
	// take too long for the default run: 2,500 Owners with 4 and with 10
	// Lookups each (about 45 minutes on a 2-core machine); to loopback,
	// 2,000 Owners with 8,000 Lookups.
	Beyond bool
	// Owners and Lookups, when both are set, make scale run that one point
	// (thin Lookups past 200 Owners, as in the sweep) instead of the
	// sweep, with churn and without unless Churn says "on" or "off".
	Owners, Lookups int
	Churn           string
	// Measure is the length of each measured window of loopback (0: 2
	// minutes; 3 s at Smoke size).
	Measure time.Duration
	// Manager is the leasehold binary loopback runs as the Manager; empty:
	// it builds ./cmd/leasehold of the module in the working directory.
	Manager string
	// ManagerProfile, if set, makes loopback run the Manager built with a
	// CPU profiler (profiledmanager, below; with Manager set, that binary
	// must be such a build) and write a profile of
	// each measured window to ManagerProfile/OWNERS-LOOKUPS/cpu-N.prof
	// (N = 1 without churn, 2 with, in the order the windows ran), and one
	// of the load driver's own process beside it, driver-cpu-N.prof.
	ManagerProfile string
	// TLS makes loopback run with mutual TLS between every client and the
	// Manager: a throwaway CA, the Manager's replica certificate and one
	// certificate per Owner and per Lookup (the trust boundary as deployed).
	TLS bool
	// LookupsPerConn makes loopback's thin Lookups share gRPC connections,
	// this many to one (0 or 1: each its own): every Lookup keeps its own
	// stream, as an application's frontend that runs many Lookups in one
	// process would over one connection. The full Lookups keep their own.
	LookupsPerConn int
	// SyncStreams makes loopback's thin Lookups open Sync streams, as
	// Lookups did before Watch and Poll, rather than Watches: the Manager's
	// cost of the two side by side. The full Lookups use Watches either way.
	SyncStreams bool
	// LookupEvery is how often loopback starts a Lookup (0: every 100 ms).
	LookupEvery time.Duration
	// ReadReplicas makes loopback start this many read replicas beside the
	// leader (loopback_replica.go) and point every Lookup at them only:
	// the leader serves the Owners, the read replicas the Lookups.
	ReadReplicas int
	// Progress, if set, is told how far the run is, in [0, 1], with a short
	// description of the current step. Called from the goroutine of Run.
	Progress func(done float64, step string)
}

func (o Options) seed() uint64 {
	if o.Seed == 0 {
		return 1
	}
	return o.Seed
}

func (o Options) progress(done float64, step string) {
	if o.Progress != nil {
		o.Progress(min(max(done, 0), 1), step)
	}
}

// Series is one line of a figure.
type Series struct {
	Name string // legend entry
	X, Y []float64
}

// Figure is one plot, beside the paper's.
type Figure struct {
	Name           string // file name stem: <Name>.png, <Name>-<series>.csv
	Title          string
	XLabel, YLabel string // with units
	Series         []Series
	Points         bool // mark the points (a sweep) rather than only a line
	LegendTop      bool // legend at the top right (else bottom right)
	Paper          string
	Setup          string // the paper's setup
	Ours           string // our setup
	Measured       string // what we measured, in a sentence or two
}

// Report is what a scenario measured.
type Report struct {
	Scenario string
	Figures  []Figure
	// Table is the summary table: a header row, then one row per
	// measurement.
	Table [][]string
	Notes []string
	Took  time.Duration // real time
}

// scenario runs one experiment.
type scenario struct {
	about string
	run   func(ctx context.Context, o Options) (*Report, error)
}

var scenarios = map[string]scenario{}

// Scenarios lists the scenario names with a line about each.
func Scenarios() [][2]string {
	var out [][2]string
	for n, s := range scenarios {
		out = append(out, [2]string{n, s.about})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// ErrUnknownScenario is returned by Run for a name Scenarios does not list.
var ErrUnknownScenario = fmt.Errorf("bench: unknown scenario")

// Run runs the named scenario. Cancelling ctx stops it between simulation
// runs and returns ctx.Err().
func Run(ctx context.Context, name string, o Options) (*Report, error) {
	s, ok := scenarios[name]
	if !ok {
		var names []string
		for _, n := range Scenarios() {
			names = append(names, n[0])
		}
		return nil, fmt.Errorf("%w %q (have %s)", ErrUnknownScenario, name, strings.Join(names, ", "))
	}
	start := time.Now()
	r, err := s.run(ctx, o)
	if err != nil {
		return nil, err
	}
	r.Scenario = name
	r.Took = time.Since(start)
	o.progress(1, "done")
	return r, nil
}

// Summary writes the report as text: each figure beside the paper's, then
// the table.
func (r *Report) Summary(w io.Writer) {
	fmt.Fprintf(w, "%s (%s real time)\n", r.Scenario, r.Took.Round(100*time.Millisecond))
	for _, f := range r.Figures {
		fmt.Fprintf(w, "\n%s — %s\n", f.Name, f.Title)
		fmt.Fprintf(w, "  paper:    %s\n", f.Paper)
		fmt.Fprintf(w, "  setup:    %s\n", f.Setup)
		fmt.Fprintf(w, "  ours:     %s\n", f.Ours)
		fmt.Fprintf(w, "  measured: %s\n", f.Measured)
	}
	if len(r.Table) > 0 {
		fmt.Fprintln(w)
		writeTable(w, r.Table)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func writeTable(w io.Writer, rows [][]string) {
	widths := []int{}
	for _, row := range rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for k, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(c))))
			}
		}
		fmt.Fprintln(w, b.String())
		if k == 0 {
			var sep []string
			for _, wd := range widths[:len(row)] {
				sep = append(sep, strings.Repeat("-", wd))
			}
			fmt.Fprintln(w, strings.Join(sep, "  "))
		}
	}
}

// slug makes a file-name-safe name.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// percentile of sorted values, p in [0, 100].
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

func sortedCopy(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}
