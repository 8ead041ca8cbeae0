package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/sim"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

func init() {
	scenarios["skew"] = scenario{
		about: "PRS Figure 10: Zipf(0.8) load; Owners above threshold and max/mean load over an hour, Weighted vs. Centrifuge's rule",
		run:   runSkew,
	}
}

type skewPlan struct {
	owners, keys int
	alpha, rate  float64
	// The workload starts at start: after a new Manager's reservation
	// (ManagerLease) every range is granted, and the Owners have held
	// their ranges for a renewal.
	start, length time.Duration
	sample        time.Duration
}

func skewPlanFor(size Size) skewPlan {
	p := skewPlan{owners: 50, keys: 1_000_000, alpha: 0.8, rate: 100_000,
		start: 90 * time.Second, length: time.Hour, sample: 10 * time.Second}
	if size == Smoke {
		p.owners, p.keys, p.length = 8, 20_000, 5*time.Minute
	}
	return p
}

// skewSample is the load at one moment.
type skewSample struct {
	at            time.Duration // since the workload started
	imbalance     float64       // max/mean
	over10, over2 int           // Owners above 1.1× and 2× the mean
}

// skewResult is one policy's run.
type skewResult struct {
	name    string
	samples []skewSample
	stats   sim.Stats
}

// settled is when max/mean went to 1.10 or below for the rest of the run.
func (r skewResult) settled() (time.Duration, bool) {
	at, ok := time.Duration(0), false
	for _, s := range r.samples {
		switch {
		case s.imbalance > 1.10:
			ok = false
		case !ok:
			at, ok = s.at, true
		}
	}
	return at, ok
}

// at returns the sample at or just before t.
func (r skewResult) at(t time.Duration) skewSample {
	out := r.samples[0]
	for _, s := range r.samples {
		if s.at <= t {
			out = s
		}
	}
	return out
}

func skewRun(ctx context.Context, o Options, p skewPlan, name string, policy rebalance.Policy, w *rebalance.Workload, progress func(float64)) skewResult {
	res := skewResult{name: name}
	end := p.start + p.length
	cfg := sim.Config{
		Seed: o.seed(), Owners: p.owners, Lookups: 2, Timing: protocol.Production(),
		FaultTime: end, SettleTime: time.Nanosecond, MinDelay: time.Millisecond, ClockSkew: true,
		NoChecks: true, Migration: true, Rate: p.rate, Rebalance: policy,
		SnapshotEntries: productionSnapshotEntries,
	}
	cfg.Script = func(c *sim.Control) {
		c.Every(10*time.Second, func() {
			if ctx.Err() != nil {
				c.Stop()
			}
			progress(float64(c.Now()) / float64(end))
		})
		c.At(p.start, func() {
			c.SetWorkload(w)
			sample := func() {
				loads, imb := c.Load()
				var total float64
				for _, l := range loads {
					total += l
				}
				s := skewSample{at: c.Now() - p.start, imbalance: imb}
				for _, l := range loads {
					if l > 1.1*total/float64(len(loads)) {
						s.over10++
					}
					if l > 2*total/float64(len(loads)) {
						s.over2++
					}
				}
				res.samples = append(res.samples, s)
			}
			sample()
			c.Every(p.sample, sample)
		})
	}
	res.stats = sim.Run(cfg).Stats
	return res
}

func runSkew(ctx context.Context, o Options) (*Report, error) {
	p := skewPlanFor(o.Size)
	w := rebalance.Zipf(p.keys, p.alpha)
	weighted, err := rebalance.Weighted(rebalance.Config{})
	if err != nil {
		return nil, err
	}
	var results []skewResult
	for i, pol := range []struct {
		name string
		p    rebalance.Policy
	}{{"Weighted", weighted}, {"Centrifuge rule", rebalance.Centrifuge()}} {
		r := skewRun(ctx, o, p, pol.name, pol.p, w, func(f float64) { o.progress((float64(i)+f)/2, pol.name) })
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		results = append(results, r)
	}

	over := Figure{
		Name: "skew-over", Title: "Owners above 1.1× the mean load under Zipf(0.8) (PRS Figure 10)", LegendTop: true,
		XLabel: "minutes since the workload started", YLabel: "Owners above 1.1× the mean load",
		Paper: "PRS Figure 10: servers above the threshold for adaptive load management over an hour; " +
			"average load 20%, several servers above 40% at the start, \"significantly fewer by the end of the hour\"",
		Setup: "PRS §7.3: frontends send operations to keys of Zipf(0.8) popularity; the PRS moves virtual nodes off " +
			"servers above the threshold (Centrifuge's rule, C§2.1.2)",
	}
	ratio := over
	ratio.Name, ratio.Title = "skew-imbalance", "Max/mean load under Zipf(0.8) (PRS Figure 10)"
	ratio.YLabel = "most loaded Owner over the mean"
	ours := fmt.Sprintf("simulation, production timings: %d Owners, %d keys of Zipf(%g) popularity, %.0f requests/s "+
		"starting %s after the Manager started (every range granted); the Owners count requests per held range and "+
		"report on every renewal; planned moves hand the state over; the same run with the Weighted policy and "+
		"with Centrifuge's ±10%% rule", p.owners, p.keys, p.alpha, p.rate, p.start)
	over.Ours, ratio.Ours = ours, ours
	table := [][]string{{"policy", "max/mean at start", "after 1 min", "after 5 min", "at the end",
		"≤ 1.10 for good after", "Owners > 1.1× (start → end)", "Owners > 2× (start → end)", "rounds", "handovers", "losses"}}
	var measured []string
	for _, r := range results {
		var x, yo, yr []float64
		for _, s := range r.samples {
			x = append(x, s.at.Minutes())
			yo = append(yo, float64(s.over10))
			yr = append(yr, s.imbalance)
		}
		over.Series = append(over.Series, Series{Name: r.name, X: x, Y: yo})
		ratio.Series = append(ratio.Series, Series{Name: r.name, X: x, Y: yr})
		settle := "never"
		if at, ok := r.settled(); ok {
			settle = at.Round(time.Second).String()
		}
		first, last := r.samples[0], r.samples[len(r.samples)-1]
		table = append(table, []string{r.name,
			fmt.Sprintf("%.3f", first.imbalance), fmt.Sprintf("%.3f", r.at(time.Minute).imbalance),
			fmt.Sprintf("%.3f", r.at(5*time.Minute).imbalance), fmt.Sprintf("%.3f", last.imbalance), settle,
			fmt.Sprintf("%d → %d", first.over10, last.over10), fmt.Sprintf("%d → %d", first.over2, last.over2),
			fmt.Sprint(r.stats.Plans), fmt.Sprint(r.stats.Handovers), fmt.Sprint(r.stats.LossEvents)})
		measured = append(measured, fmt.Sprintf("%s: max/mean %.3f at the start, %.3f after a minute, %.3f after %s; at or below 1.10 for good after %s",
			r.name, first.imbalance, r.at(time.Minute).imbalance, last.imbalance, p.length, settle))
	}
	over.Measured = joinSentences(measured)
	ratio.Measured = over.Measured
	return &Report{Figures: []Figure{over, ratio}, Table: table,
		Notes: []string{"Load is each Owner's share of the workload by the committed lease table, sampled every " + p.sample.String() +
			"; losses counts unmigrated changes of owned ranges (none is expected: every move is planned)."}}, nil
}
