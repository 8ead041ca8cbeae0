package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/leasehold/leasehold/internal/bench"
)

func init() { register(newBenchCommand) }

type benchOptions struct {
	out    string
	seed   uint64
	smoke  bool
	beyond bool
	// scale's single point
	owners, lookups int
	churn           string
}

func newBenchCommand(e *env) *cobra.Command {
	var o benchOptions
	var list []string
	for _, s := range bench.Scenarios() {
		list = append(list, fmt.Sprintf("  %-8s %s", s[0], s[1]))
	}
	cmd := &cobra.Command{
		Use:   "bench SCENARIO",
		Short: "Run an experiment of the papers on the simulation and write CSV, PNG plots and a summary",
		Long: `bench runs one of the evaluation experiments of the Centrifuge and PRS papers on the
deterministic simulation, with production timings in virtual time (an hour of the
system takes minutes), and writes a CSV file per series, a PNG plot per figure and a
summary (also printed) to --out. Scenarios:

` + strings.Join(list, "\n") + `

The Manager's CPU is real time spent in its core per virtual second, on this machine;
its network load is the simulation's estimate of the bytes it sends and receives.`,
		Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, args []string) error { return o.run(ctx, e, args[0]) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "bench-out", "the folder to write CSV, PNG and summary files to")
	f.Uint64Var(&o.seed, "seed", 1, "the simulation seed")
	f.BoolVar(&o.smoke, "smoke", false, "a tiny run of the scenario (seconds), to try the command")
	f.BoolVar(&o.beyond, "beyond", false, "scale: also the points past the papers' 2,500 nodes (2,500 Owners with 4 and 10 Lookups each; about 45 min)")
	f.IntVar(&o.owners, "owners", 0, "scale: run only the point with this many Owners (with --lookups)")
	f.IntVar(&o.lookups, "lookups", 0, "scale: run only the point with this many Lookups (with --owners)")
	f.StringVar(&o.churn, "churn", "both", "scale: the points with churn (on), without (off), or both")
	return cmd
}

func (o *benchOptions) run(ctx context.Context, e *env, name string) error {
	known := false
	for _, s := range bench.Scenarios() {
		known = known || s[0] == name
	}
	if !known {
		return usagef("unknown scenario %q", name)
	}
	if o.beyond && name != "scale" {
		return usagef("--beyond is for the scale scenario only")
	}
	if name != "scale" && (o.owners != 0 || o.lookups != 0 || o.churn != "both") {
		return usagef("--owners, --lookups and --churn are for the scale scenario only")
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
	opts := bench.Options{Seed: o.seed, Beyond: o.beyond, Owners: o.owners, Lookups: o.lookups, Churn: o.churn}
	if o.smoke {
		opts.Size = bench.Smoke
	}
	if bar := newProgressBar(e.stdout, e.stderr); bar != nil {
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
	files, err := r.Write(o.out, e.stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nwrote %d files to %s\n", len(files), o.out)
	return nil
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
