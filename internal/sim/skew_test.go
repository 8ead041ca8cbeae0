package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

// The skew experiment of P§7.3 through the whole protocol: Owners report
// the load of their ranges on their lease requests, the Manager plans a
// round every 5 s, and ranges move by planned moves, their state handed
// over. Requests (100,000/s) fall evenly on 1M keys while the Owners join
// and the first leases are granted (a new Manager grants once its
// ManagerLease, 65 s in production, has passed). Then the skew appears:
// Zipf(0.8) popularity over the same keys. Three minutes later the hot set
// shifts: Zipf(0.8) again, over a different ranking of 1M keys, against an
// assignment balanced for the first. Three minutes later one key takes
// 15% of the load.

var (
	uniform = sync.OnceValue(func() *rebalance.Workload { return rebalance.Zipf(1_000_000, 0) })
	zipf    = sync.OnceValue(func() *rebalance.Workload { return rebalance.Zipf(1_000_000, 0.8) })
	shifted = sync.OnceValue(func() *rebalance.Workload {
		keys := make([]keyspace.Key, 1_000_000)
		weights := make([]float64, len(keys))
		for i := range keys {
			keys[i] = keyspace.KeyOf("item-" + strconv.Itoa(i))
			weights[i] = math.Pow(float64(i+1), -0.8)
		}
		return rebalance.NewWorkload(keys, weights)
	})
)

// phase is a stretch of the run under one workload, and the max/mean
// load Weighted must reach within 60 s and keep with 10 equal Owners.
type phase struct {
	name  string
	at    time.Duration
	w     func() *rebalance.Workload
	limit float64
}

var phases = []phase{
	{"skew appears", 2 * time.Minute, zipf, 1.10},
	{"hot set shifts", 5 * time.Minute, shifted, 1.10},
	// No assignment does better than 1.5 here: the key's Owner carries
	// 15% where the mean is 10%. Weighted must get within 1% of that.
	{"a key takes 15%", 8 * time.Minute, hotKey, 1.5 * 1.01},
}

// hotKey is shifted with one key (of middling rank) carrying 15% of the
// load: more than a member's fair share of a tenth, so it gets a range of
// its own and its Owner holds nothing else.
var hotKey = sync.OnceValue(func() *rebalance.Workload {
	return shifted().WithHotKey(keyspace.KeyOf("item-5000"), 0.15)
})

// skewEnd is when the run ends: three minutes after the last phase began.
const skewEnd = 11 * time.Minute

// skewed is the experiment's run: Owners of the given capacities, no
// faults, production timings.
func skewed(policy rebalance.Policy, caps ...float64) Config {
	return Config{
		Seed: 1, Owners: len(caps), Lookups: 2, Timing: protocol.Production(),
		FaultTime: skewEnd, MinDelay: time.Millisecond, ClockSkew: true,
		Migration: true, Workload: uniform(), Rate: 100_000, Rebalance: policy, Capacities: caps,
	}
}

// skewRun is what a skewed run measured, every second from the first
// phase on.
type skewRun struct {
	res       Result
	at        []time.Duration
	imbalance []float64
	perCap    [][]float64 // each Owner's load per unit of capacity over the mean
	rounds    []churn     // each change of the desired assignment
}

// churn is one round's moves: the shares of the key space and of the load
// whose Owner changed.
type churn struct {
	at         time.Duration
	keys, load float64
}

func runSkewed(cfg Config) skewRun {
	var out skewRun
	var last assign.Assignment
	sample := func(c *Control) {
		loads, imb := c.Load()
		var total, caps float64
		for i, l := range loads {
			total += l
			caps += c.Capacity(i)
		}
		per := make([]float64, len(loads))
		for i, l := range loads {
			per[i] = l / c.Capacity(i) / (total / caps)
		}
		out.at = append(out.at, c.Now())
		out.imbalance = append(out.imbalance, imb)
		out.perCap = append(out.perCap, per)
		d := c.Desired()
		if last != nil && d != nil && !slices.Equal(last, d) {
			keys, load := moved(last, d, cfg.Workload)
			out.rounds = append(out.rounds, churn{c.Now(), keys, load})
		}
		if d != nil {
			last = d
		}
	}
	cfg.Script = func(c *Control) {
		for _, p := range phases {
			c.At(p.at, func() { c.SetWorkload(p.w()) })
		}
		c.At(phases[0].at, func() {
			sample(c)
			c.Every(time.Second, func() { sample(c) })
		})
	}
	out.res = Run(cfg)
	return out
}

// moved returns the shares of the key space and of w's load whose owner
// differs between a and b (both cover the key space, sorted).
func moved(a, b assign.Assignment, w *rebalance.Workload) (keys, load float64) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if p, ok := a[i].Range.Intersect(b[j].Range); ok && a[i].Owner != b[j].Owner {
			keys += p.Size() / math.Exp2(64)
			load += w.Load(p)
		}
		if a[i].Range.Last() < b[j].Range.Last() {
			i++
		} else {
			j++
		}
	}
	return keys, load
}

// window returns the samples' indexes in [from, to).
func (r skewRun) window(from, to time.Duration) (lo, hi int) {
	lo, hi = len(r.at), len(r.at)
	for i, at := range r.at {
		if at >= from && lo == len(r.at) {
			lo = i
		}
		if at >= to {
			return lo, i
		}
	}
	return lo, hi
}

// settled is how long after from the imbalance went to limit or below and
// stayed there until to, and whether it did.
func (r skewRun) settled(limit float64, from, to time.Duration) (time.Duration, bool) {
	lo, hi := r.window(from, to)
	at, ok := time.Duration(0), false
	for i := lo; i < hi; i++ {
		switch v := r.imbalance[i]; {
		case v > limit:
			ok = false
		case !ok:
			at, ok = r.at[i]-from, true
		}
	}
	return at, ok
}

// worstChurn is the largest round's churn.
func (r skewRun) worstChurn() (keys, load float64) {
	for _, c := range r.rounds {
		keys, load = max(keys, c.keys), max(load, c.load)
	}
	return keys, load
}

// phaseEnd is when phase i ends.
func phaseEnd(i int) time.Duration {
	if i+1 < len(phases) {
		return phases[i+1].at
	}
	return skewEnd
}

func (r skewRun) summary() string {
	var b strings.Builder
	for i, p := range phases {
		lo, hi := r.window(p.at, phaseEnd(i))
		settle := "not within the phase"
		if at, ok := r.settled(p.limit, p.at, phaseEnd(i)); ok {
			settle = at.String()
		}
		peak := 0.0
		for _, v := range r.imbalance[lo:hi] {
			peak = max(peak, v)
		}
		fmt.Fprintf(&b, "%s: max/mean %.3f (peak %.3f) → %.3f after 60 s → %.3f after %s, ≤ %.3g for good after %s; ",
			p.name, r.imbalance[lo], peak, r.imbalance[min(lo+60, hi-1)], r.imbalance[hi-1], phaseEnd(i)-p.at, p.limit, settle)
	}
	keys, load := r.worstChurn()
	fmt.Fprintf(&b, "%d rounds moved ranges, the largest %.2f%% of the key space and %.2f%% of the load; %d handovers, %d migrated grants, %d losses",
		len(r.rounds), 100*keys, 100*load, r.res.Stats.Handovers, r.res.Stats.MigratedGrants, r.res.Stats.LossEvents)
	return b.String()
}

// TestSkewBalancedWithinAMinute runs 10 equal Owners with the Weighted
// policy and, with -sim.long, side by side, Centrifuge's ±10% rule: after
// the skew appears, and again after the hot set shifts, Weighted must bring
// max/mean to 1.10 or below within 60 s and keep it there (with a key
// hotter than a fair share, to within 1% of the best possible), each round
// within the churn budget, every range moving by a planned move with
// nothing lost. Centrifuge's run is the baseline the log compares Weighted
// with, and its protocol checks are those of Weighted's run, so go test
// ./... leaves it out (about 1.3 s of CPU).
func TestSkewBalancedWithinAMinute(t *testing.T) {
	t.Parallel()
	weighted, err := rebalance.Weighted(rebalance.Config{})
	if err != nil {
		t.Fatal(err)
	}
	budget := rebalance.DefaultConfig()
	policies, names := []rebalance.Policy{weighted}, []string{"weighted"}
	if *longFlag {
		policies, names = append(policies, rebalance.Centrifuge()), append(names, "centrifuge")
	}
	runs := make([]skewRun, len(policies))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Go(func() { runs[i] = runSkewed(skewed(p, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)) })
	}
	wg.Wait()
	for i, name := range names {
		r := runs[i]
		if r.res.Violation != nil {
			t.Fatalf("%s: %v", name, r.res.Violation)
		}
		t.Logf("%s: %s", name, r.summary())
	}
	w := runs[0]
	for i, p := range phases {
		if at, ok := w.settled(p.limit, p.at, phaseEnd(i)); !ok || at > time.Minute {
			t.Errorf("weighted, %s: max/mean not at or below %.3g for good within 60 s", p.name, p.limit)
		}
	}
	keys, load := w.worstChurn()
	if keys > budget.KeySpaceBudget+1e-9 {
		t.Errorf("weighted: a round moved %.2f%% of the key space, over the budget of %.0f%%", 100*keys, 100*budget.KeySpaceBudget)
	}
	// The budget is on the load as the Owners measured it, and a split
	// range's load is an estimate until the next report.
	if load > 1.2*budget.ChurnBudget {
		t.Errorf("weighted: a round moved %.2f%% of the load, over the budget of %.0f%%", 100*load, 100*budget.ChurnBudget)
	}
	if w.res.Stats.LossEvents != 0 || w.res.Stats.MigratedGrants == 0 {
		t.Errorf("weighted: %d losses, %d migrated grants: every move should be planned, with the state", w.res.Stats.LossEvents, w.res.Stats.MigratedGrants)
	}
}

// TestSkewCapacities gives four Owners capacities 1, 1, 2 and 4: once
// balanced, each carries load in proportion to its capacity, within 10%.
// It runs with -sim.long, as CI does (about 2 s of CPU): by default the
// weighted policy's plans by capacity are rebalance's own tests' (its
// Example: an Owner of three times the capacity given three times the
// load), and TestSkewBalancedWithinAMinute runs the policy in the
// simulation.
func TestSkewCapacities(t *testing.T) {
	longOnly(t, "the weighted policy's capacities in the simulation")
	t.Parallel()
	weighted, err := rebalance.Weighted(rebalance.Config{})
	if err != nil {
		t.Fatal(err)
	}
	caps := []float64{1, 1, 2, 4}
	r := runSkewed(skewed(weighted, caps...))
	if r.res.Violation != nil {
		t.Fatal(r.res.Violation)
	}
	t.Logf("capacities %v: %s", caps, r.summary())
	for i, p := range phases {
		_, hi := r.window(p.at, phaseEnd(i))
		end := r.perCap[hi-1]
		t.Logf("%s: load per unit of capacity over the mean after %s: %.3f", p.name, phaseEnd(i)-p.at, end)
		for j, v := range end {
			if v < 0.90 || v > 1.10 {
				t.Errorf("%s: owner %d (capacity %g) carries %.3f of the mean load per unit of capacity, want within 10%%", p.name, j, caps[j], v)
			}
		}
	}
}
