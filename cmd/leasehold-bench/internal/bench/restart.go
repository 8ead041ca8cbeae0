package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/sim"
	"github.com/leasehold/leasehold/protocol"
)

func init() {
	scenarios["restart"] = scenario{
		about: "Centrifuge Figure 14: restart all 200 Owners, then all 2,000 Lookups, over 32 minutes; Manager CPU and network over time",
		run:   runRestart,
	}
}

type restartPlan struct {
	owners, lookups int
	warm, over      time.Duration // quiet start; the restarts are spread over over
	tail            time.Duration
	down            time.Duration // how long a restarting node is down
	bucket          time.Duration
}

func restartPlanFor(size Size) restartPlan {
	p := restartPlan{owners: 200, lookups: 2000, warm: 5 * time.Minute, over: 32 * time.Minute,
		tail: 5 * time.Minute, down: 10 * time.Second, bucket: 30 * time.Second}
	if size == Smoke {
		p.owners, p.lookups, p.over = 8, 20, 4*time.Minute
	}
	return p
}

// restartRun is one of the two experiments: restart every Owner, or every
// Lookup, one at a time, evenly over p.over.
func restartRun(ctx context.Context, o Options, p restartPlan, owners bool, progress func(float64)) *meter {
	m := newMeter(p.bucket)
	end := p.warm + p.over + p.tail
	cfg := sim.Config{
		Seed: o.seed(), Owners: p.owners, Lookups: p.lookups, Timing: protocol.Production(),
		FaultTime: end, SettleTime: time.Nanosecond, MinDelay: time.Millisecond, ClockSkew: true,
		NoChecks: true, Probe: m, StartSpread: time.Minute,
		SnapshotEntries: productionSnapshotEntries,
	}
	cfg.Script = func(c *sim.Control) {
		c.Every(10*time.Second, func() {
			if ctx.Err() != nil {
				c.Stop()
			}
			progress(float64(c.Now()) / float64(end))
		})
		n := p.lookups
		if owners {
			n = p.owners
		}
		for i := range n {
			c.At(p.warm+time.Duration(i)*p.over/time.Duration(n), func() {
				if owners {
					c.RestartOwner(i, p.down)
				} else {
					c.RestartLookup(i, p.down)
				}
			})
		}
	}
	sim.Run(cfg)
	return m
}

func runRestart(ctx context.Context, o Options) (*Report, error) {
	p := restartPlanFor(o.Size)
	end := p.warm + p.over + p.tail
	cpu := Figure{
		Name: "restart-cpu", Title: "Manager CPU while every Owner, then every Lookup, restarts (Centrifuge Figure 14)",
		LegendTop: true, XLabel: "minutes since the restarts began", YLabel: fmt.Sprintf("Manager CPU (%% of one core, %s buckets)", p.bucket),
		Paper: "Centrifuge Figure 14: CPU and network load on the Manager leader under rapid restarts; " +
			"\"the leader CPU averaged only light utilization, and network usage only went up to 5 MB/sec\"",
		Setup: "Centrifuge §5.2: 200 Owners and 2,016 Lookups on 40 2.26 GHz Core2 Duo servers; all Owners restarted over 32 minutes, " +
			"then in a second experiment all Lookups over the same interval",
	}
	net := cpu
	net.Name, net.Title = "restart-network", "Manager network while every Owner, then every Lookup, restarts (Centrifuge Figure 14)"
	net.YLabel = fmt.Sprintf("Manager network, sent + received (KB/s, %s buckets)", p.bucket)
	ours := fmt.Sprintf("simulation, production timings: %d Owners, %d Lookups; two runs: after %s of quiet, restart every Owner "+
		"(resp. every Lookup) one at a time evenly over %s, each down for %s, then %s of quiet; x = 0 at the first restart",
		p.owners, p.lookups, p.warm, p.over, p.down, p.tail)
	cpu.Ours, net.Ours = ours, ours
	table := [][]string{{"experiment", "CPU before", "CPU during (mean)", "CPU peak bucket", "net before", "net during (mean)", "net peak bucket"}}
	var measured []string
	for k, owners := range []bool{true, false} {
		name := "Lookups restarting"
		if owners {
			name = "Owners restarting"
		}
		m := restartRun(ctx, o, p, owners, func(f float64) { o.progress((float64(k)+f)/2, name) })
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mins, c, n := m.series(end)
		for i := range mins {
			mins[i] -= p.warm.Minutes()
		}
		// Skip the first buckets: every node joins at once at time 0.
		skip := int(2 * time.Minute / p.bucket)
		cpu.Series = append(cpu.Series, Series{Name: name, X: mins[skip:], Y: c[skip:]})
		net.Series = append(net.Series, Series{Name: name, X: mins[skip:], Y: n[skip:]})
		cb, nb, _ := m.window(2*time.Minute, p.warm)
		cd, nd, _ := m.window(p.warm, p.warm+p.over)
		lo, hi := int(p.warm/p.bucket), int((p.warm+p.over)/p.bucket)
		cpk, npk := 0.0, 0.0
		for i := lo; i < hi; i++ {
			cpk, npk = max(cpk, c[i]), max(npk, n[i])
		}
		table = append(table, []string{name,
			fmt.Sprintf("%.3f%%", 100*cb), fmt.Sprintf("%.3f%%", 100*cd), fmt.Sprintf("%.3f%%", cpk),
			fmt.Sprintf("%.1f KB/s", nb/1000), fmt.Sprintf("%.1f KB/s", nd/1000), fmt.Sprintf("%.1f KB/s", npk)})
		measured = append(measured, fmt.Sprintf("%s: CPU %.3f%% of one core on average (peak 30 s bucket %.3f%%), network %.1f KB/s on average (peak %.1f KB/s)",
			name, 100*cd, cpk, nd/1000, npk))
	}
	cpu.Measured = joinSentences(measured)
	net.Measured = cpu.Measured
	return &Report{Figures: []Figure{cpu, net}, Table: table,
		Notes: []string{"CPU is real time inside the leader replica's calls (replica.Replica: Core, Raft log and state machine) per virtual second on this machine; network is the simulation's wire-size estimate (protobuf-like, no TCP/TLS/gRPC framing)."}}, nil
}
