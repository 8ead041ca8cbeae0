package rebalance

import (
	"flag"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
)

// The experiment of P§7.3: 1M keys of Zipf(0.8) popularity, built once.
var zipf = sync.OnceValue(func() *Workload { return Zipf(1_000_000, 0.8) })

const (
	rate          = 100_000         // the simulated total request rate, requests/s
	roundInterval = 5 * time.Second // simulated time between rounds
	hotReports    = 32              // hottest keys reported to each round
	within        = 12              // rounds in 60 s
)

var matrix = flag.Bool("matrix", false, "run the experiment over more skews and cluster sizes (slow; use with -v)")

func owners(caps ...float64) []assign.Member {
	ms := make([]assign.Member, len(caps))
	for i, c := range caps {
		ms[i] = assign.Member{ID: fmt.Sprintf("owner-%02d", i), Capacity: c}
	}
	return ms
}

func equalOwners(n int) []assign.Member {
	caps := make([]float64, n)
	for i := range caps {
		caps[i] = 1
	}
	return owners(caps...)
}

func weightedPolicy(t testing.TB, cfg Config) Policy {
	t.Helper()
	p, err := Weighted(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// consistent returns the consistent-hashing assignment of ms as segments
// measured on w: where every experiment starts.
func consistent(ms []assign.Member, w *Workload) []Segment {
	a := assign.ConsistentHash{}.Assign(ms)
	segs := make([]Segment, len(a))
	for i, s := range a {
		segs[i] = Segment{Range: s.Range, Owner: s.Owner}
	}
	w.Measure(segs, rate)
	return segs
}

// roundStat is what one simulated round did.
type roundStat struct {
	at        time.Duration // simulated time after the round
	imbalance float64       // of the assignment after the round, measured
	moved     float64       // true share of the load moved (orphans aside)
	keys      float64       // share of the key space moved (orphans aside)
	moves     int           // ranges moved (orphans aside)
	plan      Plan
	next      []Segment // plan.Next, measured
}

// simulate runs rounds of p from cur on workload w, each fed the measured
// loads and the hottest keys, and checks that every Plan is a valid
// assignment.
func simulate(t testing.TB, p Policy, w *Workload, ms []assign.Member, cur []Segment, rounds, hotKeys int) []roundStat {
	t.Helper()
	hot := w.Top(hotKeys, rate)
	out := make([]roundStat, 0, rounds)
	for r := 1; r <= rounds; r++ {
		plan, err := p.Plan(Input{Members: ms, Current: cur, HotKeys: hot})
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if err := plan.Assignment().Validate(); err != nil {
			t.Fatalf("round %d: Next: %v", r, err)
		}
		st := roundStat{at: time.Duration(r) * roundInterval, plan: plan}
		for _, m := range plan.Moves {
			if !m.Orphaned {
				st.moved += w.Load(m.Range)
				st.keys += m.Range.Size() / keySpace
				st.moves++
			}
		}
		cur = slices.Clone(plan.Next)
		w.Measure(cur, rate)
		st.next = cur
		st.imbalance = Imbalance(ms, cur)
		out = append(out, st)
	}
	return out
}

// converged returns the first round after which the imbalance stays at or
// below limit to the end, or 0 if it never does.
func converged(sts []roundStat, limit float64) int {
	first := 0
	for i, st := range sts {
		switch {
		case st.imbalance > limit:
			first = 0
		case first == 0:
			first = i + 1
		}
	}
	return first
}

// utils returns each member's load per unit of capacity over fair, where
// fair is the total load (less the load of the members in skip) over the
// total capacity (less theirs).
func utils(ms []assign.Member, segs []Segment, skip map[string]bool) map[string]float64 {
	loads := map[string]float64{}
	var total, capSum float64
	for _, s := range segs {
		if !skip[s.Owner] {
			loads[s.Owner] += s.Load
			total += s.Load
		}
	}
	for _, m := range normalize(ms) {
		if !skip[m.ID] {
			capSum += m.Capacity
		}
	}
	out := map[string]float64{}
	for _, m := range normalize(ms) {
		if !skip[m.ID] {
			out[m.ID] = loads[m.ID] / m.Capacity / (total / capSum)
		}
	}
	return out
}

func spread(u map[string]float64) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, x := range u {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// checkBudget fails the test if a round moved more than one round's budget.
func checkBudget(t *testing.T, name string, sts []roundStat, cfg Config) {
	t.Helper()
	cfg = cfg.withDefaults()
	for i, st := range sts {
		if st.moved > cfg.ChurnBudget+1e-9 || st.keys > cfg.KeySpaceBudget+1e-9 || st.moves > cfg.MaxMoves {
			t.Errorf("%s round %d moved %.4f of the load, %.4f of the key space, %d ranges: over the budget %g, %g, %d",
				name, i+1, st.moved, st.keys, st.moves, cfg.ChurnBudget, cfg.KeySpaceBudget, cfg.MaxMoves)
		}
		if st.plan.Moved > cfg.ChurnBudget+1e-9 || st.plan.KeySpaceMoved > cfg.KeySpaceBudget+1e-9 {
			t.Errorf("%s round %d: Plan reports Moved %.4f, KeySpaceMoved %.4f: over the budget", name, i+1, st.plan.Moved, st.plan.KeySpaceMoved)
		}
		if math.Abs(st.plan.Moved-st.moved) > 1e-9 {
			t.Errorf("%s round %d: Plan reports Moved %.6f, the workload says %.6f", name, i+1, st.plan.Moved, st.moved)
		}
	}
}

func logRounds(t *testing.T, name string, sts []roundStat) {
	t.Helper()
	for _, st := range sts {
		t.Logf("%-10s t=%-4v max/mean %.3f  moved %.4f load %.4f keys  %2d moves  %d splits %d merges  %d ranges  %d hot keys",
			name, st.at, st.imbalance, st.moved, st.keys, st.moves, st.plan.Splits, st.plan.Merges, len(st.next), len(st.plan.HotKeys))
	}
}

// TestExperimentZipf is PRS's adaptive load management experiment (P§7.3)
// with both policies side by side: Weighted must reach max/mean ≤ 1.10
// within 60 s and stay there, within its budget every round; Centrifuge's
// convergence is logged.
func TestExperimentZipf(t *testing.T) {
	w := zipf()
	ms := equalOwners(10)
	cur := consistent(ms, w)
	const rounds = 2 * within
	t.Logf("start: consistent hashing, max/mean %.3f, %d ranges", Imbalance(ms, cur), len(cur))

	wsts := simulate(t, weightedPolicy(t, Config{}), w, ms, cur, rounds, hotReports)
	csts := simulate(t, Centrifuge(), w, ms, cur, rounds, hotReports)
	logRounds(t, "weighted", wsts)
	logRounds(t, "centrifuge", csts)
	wc, cc := converged(wsts, 1.10), converged(csts, 1.10)
	t.Logf("max/mean ≤ 1.10 from round %d (%v) with Weighted, from round %d (%v) with Centrifuge (0: not within %v)",
		wc, time.Duration(wc)*roundInterval, cc, time.Duration(cc)*roundInterval, rounds*roundInterval)

	if wc == 0 || wc > within {
		t.Errorf("Weighted: max/mean ≤ 1.10 from round %d, want by round %d", wc, within)
	}
	checkBudget(t, "weighted", wsts, Config{})
	for i, st := range wsts {
		if n, bound := len(st.next), 256*len(ms); n > bound {
			t.Errorf("round %d: %d ranges, more than %d", i+1, n, bound)
		}
	}
	// Once balanced, nothing moves.
	for i, st := range wsts[wc:] {
		if len(st.plan.Moves) > 0 {
			t.Errorf("round %d after convergence moved %d ranges", wc+i+1, len(st.plan.Moves))
		}
	}
}

// TestExperimentWithoutHotKeyReports runs the Zipf experiment with no
// hot-key reports: splitting by key space alone must still converge.
func TestExperimentWithoutHotKeyReports(t *testing.T) {
	w := zipf()
	ms := equalOwners(10)
	sts := simulate(t, weightedPolicy(t, Config{}), w, ms, consistent(ms, w), within, 0)
	logRounds(t, "weighted", sts)
	if c := converged(sts, 1.10); c == 0 {
		t.Errorf("max/mean never at or below 1.10 within %d rounds", within)
	}
	checkBudget(t, "weighted", sts, Config{})
}

// TestExperimentCapacities gives owners capacities 1, 1, 2 and 4 (Porcupine's
// heterogeneous cluster): after convergence every owner's load per unit of
// capacity is within 10% of the mean.
func TestExperimentCapacities(t *testing.T) {
	w := zipf()
	ms := owners(1, 1, 2, 4)
	cur := consistent(ms, w)
	lo, hi := spread(utils(ms, cur, nil))
	t.Logf("start: load per capacity %.3f–%.3f of the mean", lo, hi)
	for _, pol := range []struct {
		name string
		p    Policy
	}{{"weighted", weightedPolicy(t, Config{})}, {"centrifuge", Centrifuge()}} {
		sts := simulate(t, pol.p, w, ms, cur, within, hotReports)
		for _, st := range sts {
			lo, hi := spread(utils(ms, st.next, nil))
			t.Logf("%-10s t=%-4v load per capacity %.3f–%.3f of the mean, moved %.4f", pol.name, st.at, lo, hi, st.moved)
		}
		if pol.name != "weighted" {
			continue
		}
		checkBudget(t, pol.name, sts, Config{})
		for id, u := range utils(ms, sts[len(sts)-1].next, nil) {
			if u < 0.90 || u > 1.10 {
				t.Errorf("%s: load per capacity %.3f of the mean, want within 10%%", id, u)
			}
		}
	}
}

// TestExperimentHotKey puts 30% of all load on one key. Weighted isolates it
// into [k, k+1), reports it, and leaves it alone on its owner. The floor: the
// owner holding the key carries at least 30% against a mean of 10%, so
// max/mean cannot go below 3.0. The other nine owners share the remaining
// 70% within 10%.
func TestExperimentHotKey(t *testing.T) {
	base := zipf()
	k := base.Top(1, 1)[0].Key
	w := base.WithHotKey(k, 0.30)
	ms := equalOwners(10)
	cur := consistent(ms, w)
	const floor = 0.30 / 0.10
	sts := simulate(t, weightedPolicy(t, Config{}), w, ms, cur, within, hotReports)
	logRounds(t, "weighted", sts)
	logRounds(t, "centrifuge", simulate(t, Centrifuge(), w, ms, cur, within, hotReports))
	checkBudget(t, "weighted", sts, Config{})

	last := sts[len(sts)-1]
	i := slices.IndexFunc(last.next, func(s Segment) bool { return s.Range.Start == k })
	if i < 0 || last.next[i].Range.End != k+1 {
		t.Fatalf("key %016x is not isolated in its own range", uint64(k))
	}
	hotOwner := last.next[i].Owner
	if len(last.plan.HotKeys) == 0 || last.plan.HotKeys[0].Key != k || math.Abs(last.plan.HotKeys[0].Load-0.30*rate) > 1e-6*rate {
		t.Errorf("Plan.HotKeys = %v, want %016x with load %g first", last.plan.HotKeys, uint64(k), 0.30*rate)
	}
	for _, s := range last.next {
		if s.Owner == hotOwner && s.Range.Start != k && s.Load > 0 {
			t.Errorf("the hot key's owner %s also holds %v with load %g", hotOwner, s.Range, s.Load)
		}
	}
	if math.Abs(last.imbalance-floor) > 1e-6 || math.Abs(last.plan.Floor-floor) > 1e-6 {
		t.Errorf("max/mean %.6f, Plan.Floor %.6f; want both at the floor %g", last.imbalance, last.plan.Floor, floor)
	}
	rest := utils(ms, last.next, map[string]bool{hotOwner: true})
	lo, hi := spread(rest)
	t.Logf("hot key on %s alone; max/mean %.3f (floor %.1f); the other owners %.3f–%.3f of their share", hotOwner, last.imbalance, floor, lo, hi)
	if lo < 0.90 || hi > 1.10 {
		t.Errorf("the other owners carry %.3f–%.3f of their share, want within 10%%", lo, hi)
	}
}

// TestExperimentMembership adds an owner to a balanced cluster, then removes
// one: the new owner is filled within the budget, and the removed owner's
// ranges are all placed at once without counting as churn.
func TestExperimentMembership(t *testing.T) {
	w := zipf()
	p := weightedPolicy(t, Config{})
	ms := equalOwners(10)
	sts := simulate(t, p, w, ms, consistent(ms, w), 3, hotReports)
	balanced := sts[len(sts)-1].next

	joined := append(slices.Clone(ms), assign.Member{ID: "owner-new"})
	sts = simulate(t, p, w, joined, balanced, 4, hotReports)
	logRounds(t, "join", sts)
	checkBudget(t, "join", sts, Config{})
	if u := utils(joined, sts[len(sts)-1].next, nil)["owner-new"]; u < 0.90 || u > 1.10 {
		t.Errorf("the new owner carries %.3f of its share, want within 10%%", u)
	}
	if c := converged(sts, 1.10); c == 0 {
		t.Errorf("max/mean above 1.10 after the join")
	}

	left := ms[1:]
	sts = simulate(t, p, w, left, balanced, 2, hotReports)
	logRounds(t, "leave", sts)
	first := sts[0].plan
	orphaned := 0
	for _, m := range first.Moves {
		if m.From == ms[0].ID {
			orphaned++
			if !m.Orphaned {
				t.Errorf("move %v from the departed owner is not marked Orphaned", m)
			}
		}
	}
	for _, s := range first.Next {
		if s.Owner == ms[0].ID {
			t.Fatalf("the departed owner still holds %v", s.Range)
		}
	}
	if orphaned == 0 {
		t.Errorf("no orphaned moves")
	}
	if first.Moved != 0 || sts[0].imbalance > 1.10 {
		t.Errorf("after the leave: Moved %g, max/mean %.3f; want 0 and ≤ 1.10", first.Moved, sts[0].imbalance)
	}
}

// TestExperimentNoisyMeasurements feeds a balanced table measurements off
// by up to ±10% per range for 50 rounds: the hysteresis keeps it still.
func TestExperimentNoisyMeasurements(t *testing.T) {
	w := zipf()
	p := weightedPolicy(t, Config{})
	ms := equalOwners(10)
	sts := simulate(t, p, w, ms, consistent(ms, w), 3, hotReports)
	cur := sts[len(sts)-1].next
	hot := w.Top(hotReports, rate)
	rng := rand.New(rand.NewSource(1))
	moves := 0
	for range 50 {
		noisy := slices.Clone(cur)
		for i := range noisy {
			noisy[i].Load *= 0.9 + 0.2*rng.Float64()
		}
		plan, err := p.Plan(Input{Members: ms, Current: noisy, HotKeys: hot})
		if err != nil {
			t.Fatal(err)
		}
		moves += len(plan.Moves)
		cur = slices.Clone(plan.Next)
		w.Measure(cur, rate)
	}
	t.Logf("%d moves in 50 noisy rounds; max/mean %.3f", moves, Imbalance(ms, cur))
	if moves != 0 {
		t.Errorf("%d moves in 50 rounds of noise on a balanced table, want 0", moves)
	}
}

// TestExperimentMatrix runs both policies over more skews and cluster sizes,
// with and without hot-key reports. It only logs: go test -run Matrix -v -matrix.
func TestExperimentMatrix(t *testing.T) {
	if !*matrix {
		t.Skip("run with -matrix")
	}
	pw := weightedPolicy(t, Config{})
	for _, alpha := range []float64{0.8, 1.0, 1.2} {
		w := zipf()
		if alpha != 0.8 {
			w = Zipf(1_000_000, alpha)
		}
		for _, n := range []int{10, 50, 100} {
			ms := equalOwners(n)
			cur := consistent(ms, w)
			for _, hot := range []int{0, hotReports} {
				for _, pol := range []struct {
					name string
					p    Policy
				}{{"weighted", pw}, {"centrifuge", Centrifuge()}} {
					sts := simulate(t, pol.p, w, ms, cur, 2*within, hot)
					var b strings.Builder
					for _, st := range sts {
						fmt.Fprintf(&b, " %.2f", st.imbalance)
					}
					// No owner can be below the hottest key: its share times n.
					floor := max(1, w.Top(1, 1)[0].Load*float64(n))
					t.Logf("alpha %.1f, %3d owners, %2d hot keys reported, %-10s start %.2f, floor %.2f:%s (%d ranges)",
						alpha, n, hot, pol.name, Imbalance(ms, cur), floor, b.String(), len(sts[len(sts)-1].next))
				}
			}
		}
	}
}
