package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/sim"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

func init() {
	scenarios["propagation"] = scenario{
		about: "how long a lease-table change takes to reach every Lookup, with push, under Owner churn",
		run:   runPropagation,
	}
}

type propagationPlan struct {
	owners, lookups int
	warm, measure   time.Duration
	restartEvery    time.Duration // an Owner restarts this often
}

func propagationPlanFor(size Size) propagationPlan {
	p := propagationPlan{owners: 100, lookups: 1000, warm: 3 * time.Minute, measure: 10 * time.Minute,
		restartEvery: 20 * time.Second}
	if size == Smoke {
		p.owners, p.lookups, p.measure = 8, 20, 2*time.Minute
	}
	return p
}

// change is a table LSN committed at seen, and how many Lookups have it.
type change struct {
	lsn  keyspace.LSN
	seen time.Duration
	got  int
}

// propagationRun measures one run at a message loss rate: each change's
// delay until every Lookup had it, and when (minutes into the window).
func propagationRun(ctx context.Context, o Options, p propagationPlan, loss float64, progress func(float64)) (delays, at []float64) {
	end := p.warm + p.measure
	var (
		pending []change       // committed changes not yet at every Lookup, in order
		copies  []keyspace.LSN // each Lookup's LSN
	)
	cfg := sim.Config{
		Seed: o.seed(), Owners: p.owners, Lookups: p.lookups, Timing: protocol.Production(),
		FaultTime: end, SettleTime: time.Nanosecond, MinDelay: time.Millisecond, ClockSkew: true,
		NoChecks: true, StartSpread: time.Minute, DropRate: loss,
		SnapshotEntries: productionSnapshotEntries,
	}
	cfg.Script = func(c *sim.Control) {
		copies = make([]keyspace.LSN, c.Lookups())
		c.Every(10*time.Second, func() {
			if ctx.Err() != nil {
				c.Stop()
			}
			progress(float64(c.Now()) / float64(end))
		})
		for i := 0; p.warm+time.Duration(i)*p.restartEvery < end; i++ {
			c.At(p.warm+time.Duration(i)*p.restartEvery, func() { c.RestartOwner(i%p.owners, 10*time.Second) })
		}
		c.OnLookupLSN(func(i int, lsn keyspace.LSN) {
			old := copies[i]
			copies[i] = lsn
			for k := range pending {
				if old < pending[k].lsn && pending[k].lsn <= lsn {
					pending[k].got++
				}
			}
			for len(pending) > 0 && pending[0].got == len(copies) {
				delays = append(delays, (c.Now() - pending[0].seen).Seconds())
				at = append(at, (c.Now() - p.warm).Minutes())
				pending = pending[1:]
			}
		})
		c.OnTableLSN(func(lsn keyspace.LSN) {
			if c.Now() < p.warm {
				return // every Lookup is still starting
			}
			got := 0
			for _, l := range copies {
				if l >= lsn {
					got++
				}
			}
			pending = append(pending, change{lsn: lsn, seen: c.Now(), got: got})
		})
	}
	sim.Run(cfg)
	return delays, at
}

func runPropagation(ctx context.Context, o Options) (*Report, error) {
	p := propagationPlanFor(o.Size)
	fig := Figure{
		Name: "propagation", Title: "Time for a lease-table change to reach every Lookup",
		XLabel: "minutes into the measured window", YLabel: "seconds until every Lookup had the change",
		Points: true, LegendTop: true,
		Paper: "Centrifuge §2.2 and PRS §4.2: Lookups poll the Manager for the change log (every 30 s in Centrifuge's deployment); " +
			"leasehold pushes each change as it commits and keeps the poll as the safety net",
		Setup: "no figure in either paper; the goal here is p99 under 1 s with push",
		Ours: fmt.Sprintf("simulation, production timings (30 s poll), one network delay 1–4 ms: %d Owners, %d full Lookups, "+
			"one Owner restarted every %s (each restart frees and regrants its ranges); %s measured after %s; a change counts "+
			"from the moment the Manager applies it until the last Lookup has applied it; a run with no message lost and one "+
			"losing 1%% of all messages", p.owners, p.lookups, p.restartEvery, p.measure, p.warm),
	}
	table := [][]string{{"messages lost", "changes", "p50", "p99", "worst", "goal p99 < 1 s"}}
	var measured []string
	for k, loss := range []float64{0, 0.01} {
		name := fmt.Sprintf("%g%% of messages lost", 100*loss)
		delays, at := propagationRun(ctx, o, p, loss, func(f float64) { o.progress((float64(k)+f)/2, name) })
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(delays) == 0 {
			return nil, fmt.Errorf("bench: propagation: no change reached every Lookup (%s)", name)
		}
		s := sortedCopy(delays)
		p50, p99, worst := percentile(s, 50), percentile(s, 99), s[len(s)-1]
		met := "met"
		if p99 >= 1 {
			met = "not met"
		}
		fig.Series = append(fig.Series, Series{Name: name, X: at, Y: delays})
		table = append(table, []string{fmt.Sprintf("%g%%", 100*loss), fmt.Sprint(len(delays)),
			fmt.Sprintf("%.3f s", p50), fmt.Sprintf("%.3f s", p99), fmt.Sprintf("%.3f s", worst), met})
		measured = append(measured, fmt.Sprintf("%s: %d changes, p50 %.3f s, p99 %.3f s, worst %.3f s until every Lookup had each (goal p99 < 1 s: %s)",
			name, len(delays), p50, p99, worst, met))
	}
	fig.Measured = joinSentences(measured)
	return &Report{Figures: []Figure{fig}, Table: table,
		Notes: []string{"A change here is a round of the Manager that changed the table (counted at its newest LSN); one Owner restart makes two, one freeing its ranges and one granting them again. Only Owners restart here; no Lookup is ever down. A Lookup that misses a push learns of the gap from the next push, or else from its next poll."}}, nil
}
