// Package benchcli is the leasehold-bench command: it runs one evaluation
// experiment of the Centrifuge and PRS papers (cmd/leasehold-bench/internal/bench) and writes
// its CSV, PNG and summary files. cmd/leasehold-bench only calls Execute.
//
// It lives apart from the leasehold command (cmd/internal/cli) because the
// experiments need the simulation and a plotting stack, which the binary
// that runs the Manager in production should not carry.
//
// Exit codes and errors follow the leasehold command's: 0 success or a
// clean stop on SIGINT/SIGTERM, 1 a runtime failure, 2 bad usage; every
// error is one line on stderr starting with "leasehold-bench: ".
package benchcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/leasehold/leasehold/cmd/leasehold-bench/internal/bench"
)

// Exit codes of Execute.
const (
	ExitOK      = 0
	ExitFailure = 1 // a runtime failure
	ExitUsage   = 2 // bad flags or arguments
)

// Execute runs the leasehold-bench command line args (without the program
// name) under ctx, writing to stdout and stderr, and returns the exit code.
// Cancelling ctx (main does on SIGINT and SIGTERM) stops the experiment,
// with exit code 0 and no files written.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == bench.OwnerProcessArg {
		// The Owner process of a loopback point, which the driver starts
		// from this executable (not a scenario: it is not listed).
		return bench.RunOwnerProcess(ctx, os.Stdin, stdout, stderr)
	}
	root := newCommand(stdout, stderr)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitUsage // errors cobra raises itself are all about usage
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	msg := oneLine(err.Error())
	if code == ExitUsage {
		msg += " (see 'leasehold-bench --help')"
	}
	fmt.Fprintf(stderr, "leasehold-bench: %s\n", msg)
	return code
}

type options struct {
	out    string
	seed   uint64
	smoke  bool
	beyond bool
	// scale's single point
	owners, lookups int
	churn           string
	cpuProfile      string
	measure         time.Duration
	managerBin      string
	managerProfile  string
	tls             bool
	lookupsPerConn  int
	syncStreams     bool
	lookupEvery     time.Duration
	readReplicas    int
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	var o options
	var list []string
	for _, s := range bench.Scenarios() {
		list = append(list, fmt.Sprintf("  %-12s %s", s[0], s[1]))
	}
	cmd := &cobra.Command{
		Use:   "leasehold-bench SCENARIO",
		Short: "Run an experiment of the papers on the simulation and write CSV, PNG plots and a summary",
		Long: `leasehold-bench runs one of the evaluation experiments of the Centrifuge and PRS
papers on the deterministic simulation, with production timings in virtual time (an
hour of the system takes minutes), and writes a CSV file per series, a PNG plot per
figure and a summary (also printed) to --out. Scenarios:

` + strings.Join(list, "\n") + `

The Manager's CPU is real time spent in its core per virtual second, on this machine;
its network load is the simulation's estimate of the bytes it sends and receives.

Exit codes: 0 success, 1 runtime failure, 2 bad usage.`,
		Example: `  go run ./cmd/leasehold-bench scale --out bench-out
  go run ./cmd/leasehold-bench rack --smoke`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				var names []string
				for _, s := range bench.Scenarios() {
					names = append(names, s[0])
				}
				return usagef("give one SCENARIO (%s), got %d arguments", strings.Join(names, ", "), len(args))
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			err := o.run(cmd.Context(), stdout, stderr, args[0])
			var ee *exitError
			if err == nil || errors.As(err, &ee) {
				return err
			}
			return &exitError{code: ExitFailure, err: err}
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "bench-out", "the folder to write CSV, PNG and summary files to")
	f.Uint64Var(&o.seed, "seed", 1, "the simulation seed")
	f.BoolVar(&o.smoke, "smoke", false, "a tiny run of the scenario (seconds), to try the command")
	f.BoolVar(&o.beyond, "beyond", false, "scale: also the points past the papers' 2,500 nodes (2,500 Owners with 4 and 10 Lookups each; about 45 min); loopback: also 2,000 Owners with 8,000 Lookups")
	f.IntVar(&o.owners, "owners", 0, "scale: run only the point with this many Owners (with --lookups)")
	f.IntVar(&o.lookups, "lookups", 0, "scale: run only the point with this many Lookups (with --owners)")
	f.StringVar(&o.churn, "churn", "both", "scale: the points with churn (on), without (off), or both")
	f.DurationVar(&o.measure, "measure", 0, "loopback: the length of each measured window (default 2m)")
	f.StringVar(&o.managerBin, "manager-bin", "", "loopback: the leasehold binary to run as the Manager (default: build ./cmd/leasehold)")
	f.StringVar(&o.managerProfile, "manager-profile", "", "loopback: build the Manager with a CPU profiler and write a profile of each measured window under this folder (OWNERS-LOOKUPS/cpu-1.prof without churn, cpu-2.prof with, heap-N.prof at each window's end; the load driver's own in driver-cpu-N.prof); with --manager-bin, that binary must be a build of ./cmd/leasehold-bench/internal/bench/profiledmanager")
	f.BoolVar(&o.tls, "tls", false, "loopback: mutual TLS between every client and the Manager, with a throwaway CA and a certificate per Owner and per Lookup")
	f.BoolVar(&o.syncStreams, "sync-streams", false, "loopback: the thin Lookups open Sync streams, as Lookups did before Watch and Poll, rather than Watches")
	f.IntVar(&o.lookupsPerConn, "lookups-per-conn", 1, "loopback: how many thin Lookups share one gRPC connection, each with its own stream (1: a connection each)")
	f.DurationVar(&o.lookupEvery, "lookup-every", 0, "loopback: start a Lookup this often (default 100ms)")
	f.IntVar(&o.readReplicas, "read-replicas", 0, "loopback: start this many read replicas beside the leader and point every Lookup at them only (the leader serves the Owners)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (go tool pprof) to this file; written also when the run is stopped with SIGINT")
	return cmd
}

func (o *options) run(ctx context.Context, stdout, stderr io.Writer, name string) error {
	known := false
	for _, s := range bench.Scenarios() {
		known = known || s[0] == name
	}
	if !known {
		return usagef("unknown scenario %q", name)
	}
	if o.beyond && name != "scale" && name != "loopback" {
		return usagef("--beyond is for the scale and loopback scenarios only")
	}
	if name != "scale" && name != "loopback" && (o.owners != 0 || o.lookups != 0 || o.churn != "both") {
		return usagef("--owners, --lookups and --churn are for the scale and loopback scenarios only")
	}
	if name != "loopback" && (o.measure != 0 || o.managerBin != "" || o.managerProfile != "" || o.tls) {
		return usagef("--measure, --manager-bin, --manager-profile and --tls are for the loopback scenario only")
	}
	if name != "loopback" && (o.lookupsPerConn != 1 || o.lookupEvery != 0 || o.readReplicas != 0 || o.syncStreams) {
		return usagef("--lookups-per-conn, --lookup-every, --read-replicas and --sync-streams are for the loopback scenario only")
	}
	if o.readReplicas < 0 || o.readReplicas > bench.MaxReadReplicas {
		return usagef("--read-replicas must be between 0 and %d (the loopback point's replica IDs run 2 to %d), not %d", bench.MaxReadReplicas, bench.MaxReadReplicas+1, o.readReplicas)
	}
	if o.lookupsPerConn < 1 || o.lookupsPerConn > 5000 {
		return usagef("--lookups-per-conn must be between 1 and 5000 (a Manager allows 10,000 streams on a connection by default), not %d", o.lookupsPerConn)
	}
	if o.lookupEvery < 0 {
		return usagef("--lookup-every must not be negative")
	}
	if o.measure < 0 {
		return usagef("--measure must not be negative")
	}
	switch {
	case o.owners < 0 || o.lookups < 0:
		return usagef("--owners and --lookups must not be negative")
	case (o.owners == 0) != (o.lookups == 0):
		return usagef("--owners and --lookups go together: give both or neither")
	case o.churn != "both" && o.churn != "on" && o.churn != "off":
		return usagef("--churn is on, off or both, not %q", o.churn)
	case o.owners > 0 && o.beyond:
		return usagef("--beyond runs the sweep; --owners and --lookups run one point: give one or the other")
	}
	opts := bench.Options{Seed: o.seed, Beyond: o.beyond, Owners: o.owners, Lookups: o.lookups, Churn: o.churn,
		Measure: o.measure, Manager: o.managerBin, ManagerProfile: o.managerProfile, TLS: o.tls,
		LookupsPerConn: o.lookupsPerConn, SyncStreams: o.syncStreams, LookupEvery: o.lookupEvery, ReadReplicas: o.readReplicas}
	if o.smoke {
		opts.Size = bench.Smoke
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if bar := newProgressBar(stdout, stderr); bar != nil {
		opts.Progress = bar.update
		defer bar.finish()
	}
	r, err := bench.Run(ctx, name, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil // a clean stop on SIGINT
		}
		return err
	}
	files, err := r.Write(o.out, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %d files to %s\n", len(files), o.out)
	return nil
}

// exitError carries the exit code for an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usagef is bad usage, exit code 2, with a formatted message.
func usagef(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// oneLine folds a multi-line message (cobra's "Did you mean this?"
// suggestions) into one line.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// progressBar draws on stderr, only when stdout is a terminal.
type progressBar struct {
	w     io.Writer
	start time.Time
	last  time.Time
}

func newProgressBar(stdout, stderr io.Writer) *progressBar {
	f, ok := stdout.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &progressBar{w: stderr, start: time.Now()}
}

func (b *progressBar) update(done float64, step string) {
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && done < 1 {
		return
	}
	b.last = now
	const width = 30
	n := int(done * width)
	fmt.Fprintf(b.w, "\r\033[K[%s%s] %3.0f%% %s %s", strings.Repeat("#", n), strings.Repeat(".", width-n),
		100*done, now.Sub(b.start).Round(time.Second), step)
}

func (b *progressBar) finish() { fmt.Fprint(b.w, "\r\033[K") }
