package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/sim"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

func init() {
	scenarios["rack"] = scenario{
		about: "PRS Figure 9: a rack of 50 of 250 Owners powered off and back; CDF of frontend operation latency",
		run:   runRack,
	}
}

// The frontend of P§7.2 retries a failed operation every 30 s for up to
// 5 min; ours retries every second, so that the CDF resolves seconds.
const (
	retryEvery = time.Second
	giveUp     = 5 * time.Minute
)

// rackPlan is the timeline of the rack experiment.
type rackPlan struct {
	owners, lookups, rack int
	ops                   int           // operations per measured window
	window                time.Duration // operations are issued uniformly over it
	normal, off, on       time.Duration // start of the normal window; power off; power on
	end                   time.Duration
}

func rackPlanFor(size Size) rackPlan {
	p := rackPlan{owners: 250, lookups: 1000, rack: 50, ops: 20000, window: time.Minute,
		normal: 3 * time.Minute, off: 5 * time.Minute, on: 10 * time.Minute}
	if size == Smoke {
		p.owners, p.lookups, p.rack, p.ops = 10, 20, 2, 500
	}
	p.end = p.on + p.window + giveUp + time.Minute
	return p
}

// op is one frontend operation: a key, issued through a random Lookup.
type op struct {
	issued  time.Duration
	latency time.Duration // -1: gave up
	rack    bool          // served by an Owner of the rack
}

func runRack(ctx context.Context, o Options) (*Report, error) {
	p := rackPlanFor(o.Size)
	rng := rand.New(rand.NewPCG(o.seed(), 0xfa11))
	windows := []struct {
		name  string
		start time.Duration
		ops   []*op
	}{
		{name: "normal operation", start: p.normal},
		{name: "after the rack powers off", start: p.off},
		{name: "after the rack comes back", start: p.on},
	}
	cfg := sim.Config{
		Seed: o.seed(), Owners: p.owners, Lookups: p.lookups, Timing: protocol.Production(),
		FaultTime: p.end, SettleTime: time.Nanosecond, MinDelay: time.Millisecond, ClockSkew: true,
		NoChecks: true, StartSpread: time.Minute,
		SnapshotEntries: productionSnapshotEntries,
	}
	cfg.Script = func(c *sim.Control) {
		c.Every(10*time.Second, func() {
			if ctx.Err() != nil {
				c.Stop()
			}
			o.progress(float64(c.Now())/float64(p.end), "rack")
		})
		// The rack: the first p.rack Owners, off together and back together.
		c.At(p.off, func() {
			for i := range p.rack {
				c.CrashOwner(i)
			}
		})
		c.At(p.on, func() {
			for i := range p.rack {
				c.StartOwner(i)
			}
		})
		for w := range windows {
			for range p.ops {
				x := &op{issued: windows[w].start + time.Duration(rng.Int64N(int64(p.window))), latency: -1}
				windows[w].ops = append(windows[w].ops, x)
				look := rng.IntN(p.lookups)
				key := keyspace.Key(rng.Uint64())
				var attempt func()
				attempt = func() {
					if own, ok := c.Route(look, key); ok && c.Holds(own, key) {
						x.latency = c.Now() - x.issued
						x.rack = own < p.rack
						return
					}
					if c.Now()+retryEvery <= x.issued+giveUp {
						c.At(c.Now()+retryEvery, attempt)
					}
				}
				c.At(x.issued, attempt)
			}
		}
	}
	sim.Run(cfg)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	fig := Figure{
		Name: "rack-latency", Title: "CDF of frontend operation latency around a rack reset (PRS Figure 9)",
		XLabel: "operation latency (s)", YLabel: "fraction of operations completed",
		Paper: "PRS Figure 9: CDF of the latency for frontends to complete operations, normal operation vs. immediately after a rack " +
			"of servers resets: \"about 1 out of 5 of the keys has a latency of access that stretches out over tens of seconds\"; " +
			"availability restored in less than a minute",
		Setup: "PRS §7.2: 250 middle-tier servers, 1,000 frontends; 50 servers (a rack) powered down and back up several minutes later; " +
			"measurement starts when the rack is back and the old leases have expired; frontends retry every 30 s for up to 5 min",
		Ours: fmt.Sprintf("simulation, production timings: %d Owners, %d Lookups; Owners 0–%d (the rack) crash at %s and start again at %s "+
			"(their leases expired and their ranges reassigned meanwhile); %d operations per window, each on a random key through a random Lookup, "+
			"issued uniformly over %s from the window's start; an attempt succeeds when the Lookup's copy names an Owner whose CheckLeaseNow "+
			"is true at that instant; retry every %s (not 30 s) for up to %s; latency counts only unavailability (the simulation has no "+
			"frontend→Owner round trip, so an operation that succeeds at once has latency 0)",
			p.owners, p.lookups, p.rack-1, p.off, p.on, p.ops, p.window, retryEvery, giveUp),
	}
	table := [][]string{{"window", "operations", "served by the rack", "retried", "p50", "p90", "p99", "max", "> 10 s", "failed (> 5 min)"}}
	var measured []string
	for _, w := range windows {
		var lat []float64
		failed := 0
		for _, x := range w.ops {
			if x.latency < 0 {
				failed++
				continue
			}
			lat = append(lat, x.latency.Seconds())
		}
		s := sortedCopy(lat)
		n := float64(len(w.ops))
		retried, over10 := 0, 0
		for _, v := range s {
			if v > 0 {
				retried++
			}
			if v > 10 {
				over10++
			}
		}
		// The CDF: for each distinct latency, the share of all operations
		// (failed ones included in the denominator) done by then.
		xs, ys := []float64{0}, []float64{0}
		for i, v := range s {
			if i+1 < len(s) && s[i+1] == v {
				continue
			}
			xs, ys = append(xs, v), append(ys, float64(i+1)/n)
		}
		fig.Series = append(fig.Series, Series{Name: w.name, X: xs, Y: ys})
		sec := func(v float64) string { return fmt.Sprintf("%.0f s", v) }
		maxv := 0.0
		if len(s) > 0 {
			maxv = s[len(s)-1]
		}
		byRack := 0
		for _, x := range w.ops {
			if x.rack {
				byRack++
			}
		}
		table = append(table, []string{w.name, fmt.Sprint(len(w.ops)), fmt.Sprintf("%.1f%%", 100*float64(byRack)/n),
			fmt.Sprintf("%.1f%%", 100*float64(retried)/n),
			sec(percentile(s, 50)), sec(percentile(s, 90)), sec(percentile(s, 99)), sec(maxv),
			fmt.Sprintf("%.1f%%", 100*float64(over10)/n), fmt.Sprint(failed)})
		measured = append(measured, fmt.Sprintf("%s: %.1f%% of operations waited (%.1f%% over 10 s), slowest %s",
			w.name, 100*float64(retried)/n, 100*float64(over10)/n, sec(maxv)))
	}
	// Draw every CDF out to the slowest operation, so that a line that
	// reaches 1 at once is still seen.
	xmax := 1.0
	for _, s := range fig.Series {
		xmax = max(xmax, s.X[len(s.X)-1])
	}
	for i := range fig.Series {
		s := &fig.Series[i]
		if s.X[len(s.X)-1] < xmax {
			s.X, s.Y = append(s.X, xmax), append(s.Y, s.Y[len(s.Y)-1])
		}
	}
	fig.Measured = joinSentences(measured)
	return &Report{Figures: []Figure{fig}, Table: table,
		Notes: []string{fmt.Sprintf("the rack is %.0f%% of the Owners", 100*float64(p.rack)/float64(p.owners))}}, nil
}

func joinSentences(s []string) string { return strings.Join(s, "; ") }
