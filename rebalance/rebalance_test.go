package rebalance

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
)

// policies are the policies the generic tests run against.
func policies(t testing.TB) []struct {
	name string
	p    Policy
} {
	return []struct {
		name string
		p    Policy
	}{
		{"Weighted", weightedPolicy(t, Config{})},
		{"Centrifuge", Centrifuge()},
	}
}

// even returns n segments cutting the key space into equal ranges, dealt
// round-robin to ids, each with the load loads[i%len(loads)].
func even(n int, ids []string, loads ...float64) []Segment {
	a := assign.Fixed{Pieces: n}.Assign([]assign.Member{{ID: "x"}})
	out := make([]Segment, n)
	for i, s := range a {
		out[i] = Segment{Range: s.Range, Owner: ids[i%len(ids)], Load: loads[i%len(loads)]}
	}
	return out
}

func members(ids ...string) []assign.Member {
	ms := make([]assign.Member, len(ids))
	for i, id := range ids {
		ms[i] = assign.Member{ID: id}
	}
	return ms
}

func TestDefaultConfig(t *testing.T) {
	want := Config{
		Tolerance: 1.10, Target: 1.05, Interval: 5 * time.Second,
		ChurnBudget: 0.10, KeySpaceBudget: 0.10, MaxMoves: 64,
		SplitLoad: 0.05, MergeLoad: 0.0125, MaxSegmentsPerOwner: 256,
	}
	if got := DefaultConfig(); got != want {
		t.Errorf("DefaultConfig() = %+v, want %+v", got, want)
	}
	if got := (Config{Tolerance: 1.2}).withDefaults().Target; math.Abs(got-1.1) > 1e-12 {
		t.Errorf("Target for Tolerance 1.2 = %g, want 1.1", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string // "" when valid
	}{
		{Config{}, ""},
		{DefaultConfig(), ""},
		{Config{Tolerance: 1.5, Target: 1}, ""},
		{Config{Tolerance: 1}, "Tolerance"},
		{Config{Tolerance: 0.9}, "Tolerance"},
		{Config{Tolerance: 2}, "Tolerance"},
		{Config{Tolerance: math.NaN()}, "Tolerance"},
		{Config{Target: 0.99}, "Target"},
		{Config{Target: 1.2}, "Target"},
		{Config{Interval: -time.Second}, "Interval"},
		{Config{ChurnBudget: -0.1}, "ChurnBudget"},
		{Config{ChurnBudget: 1.5}, "ChurnBudget"},
		{Config{KeySpaceBudget: math.Inf(1)}, "KeySpaceBudget"},
		{Config{MaxMoves: -1}, "MaxMoves"},
		{Config{SplitLoad: -1}, "SplitLoad"},
		{Config{MergeLoad: 0.03}, "MergeLoad"}, // above SplitLoad/2
		{Config{MaxSegmentsPerOwner: -1}, "MaxSegmentsPerOwner"},
	} {
		err := c.cfg.Validate()
		_, werr := Weighted(c.cfg)
		switch {
		case c.field == "" && (err != nil || werr != nil):
			t.Errorf("%+v: Validate() = %v, Weighted: %v; want no error", c.cfg, err, werr)
		case c.field != "" && (err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field+" (")):
			t.Errorf("%+v: Validate() = %v, want an ErrInvalidConfig naming %s", c.cfg, err, c.field)
		case c.field != "" && !errors.Is(werr, ErrInvalidConfig):
			t.Errorf("%+v: Weighted: %v, want ErrInvalidConfig", c.cfg, werr)
		}
	}
}

func TestPlanRejectsInvalidInput(t *testing.T) {
	ms := members("a", "b")
	good := even(4, []string{"a", "b"}, 1)
	with := func(f func([]Segment) []Segment) []Segment { return f(slices.Clone(good)) }
	for _, c := range []struct {
		name string
		in   Input
	}{
		{"empty Current", Input{Members: ms}},
		{"gap", Input{Members: ms, Current: with(func(s []Segment) []Segment { return slices.Delete(s, 1, 2) })}},
		{"short of the end", Input{Members: ms, Current: with(func(s []Segment) []Segment { return s[:3] })}},
		{"no owner", Input{Members: ms, Current: with(func(s []Segment) []Segment { s[2].Owner = ""; return s })}},
		{"negative load", Input{Members: ms, Current: with(func(s []Segment) []Segment { s[0].Load = -1; return s })}},
		{"NaN load", Input{Members: ms, Current: with(func(s []Segment) []Segment { s[0].Load = math.NaN(); return s })}},
		{"infinite load", Input{Members: ms, Current: with(func(s []Segment) []Segment { s[0].Load = math.Inf(1); return s })}},
		{"NaN hot key", Input{Members: ms, Current: good, HotKeys: []HotKey{{Key: 5, Load: math.NaN()}}}},
	} {
		for _, p := range policies(t) {
			if _, err := p.p.Plan(c.in); !errors.Is(err, ErrInvalidInput) {
				t.Errorf("%s: %s: err = %v, want ErrInvalidInput", p.name, c.name, err)
			}
		}
	}
}

func TestPlanWithoutMembers(t *testing.T) {
	for _, p := range policies(t) {
		for _, ms := range [][]assign.Member{nil, {{ID: ""}}} {
			got, err := p.p.Plan(Input{Members: ms, Current: even(4, []string{"a"}, 1)})
			if err != nil || !reflect.DeepEqual(got, Plan{}) {
				t.Errorf("%s: members %v: Plan = %+v, %v; want the zero Plan", p.name, ms, got, err)
			}
		}
	}
}

// TestBalancedInputIsLeftAlone: within the tolerance nothing moves, and the
// plan is a fixed point (no flapping).
func TestBalancedInputIsLeftAlone(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	// Owner loads 1.08, 0.93, 1.00, 0.99 of the mean: inside ±10%.
	cur := even(32, ids, 1.08, 0.93, 1.00, 0.99)
	for _, p := range policies(t) {
		in := Input{Members: members(ids...), Current: cur}
		plan, err := p.p.Plan(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Moves) != 0 || !slices.Equal(plan.Next, cur) {
			t.Errorf("%s: balanced input: %d moves, Next changed: %v", p.name, len(plan.Moves), plan.Moves)
		}
		if want := 1.08 / 1.0; math.Abs(plan.Before-want) > 1e-9 || math.Abs(plan.After-want) > 1e-9 {
			t.Errorf("%s: Before %g, After %g, want %g", p.name, plan.Before, plan.After, want)
		}
	}
}

// TestDeterministic: the same input, with members and hot keys in any order,
// gives the same plan, and Plan does not modify its input.
func TestDeterministic(t *testing.T) {
	w := zipf()
	ms := owners(1, 1, 2, 4, 1, 1)
	cur := consistent(ms, w)
	hot := w.Top(hotReports, rate)
	rng := rand.New(rand.NewSource(1))
	for _, p := range policies(t) {
		first, err := p.p.Plan(Input{Members: ms, Current: cur, HotKeys: hot})
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Moves) == 0 {
			t.Fatalf("%s: no moves: the test needs an imbalanced input", p.name)
		}
		for range 5 {
			ms2, hot2, cur2 := slices.Clone(ms), slices.Clone(hot), slices.Clone(cur)
			rng.Shuffle(len(ms2), func(i, j int) { ms2[i], ms2[j] = ms2[j], ms2[i] })
			rng.Shuffle(len(hot2), func(i, j int) { hot2[i], hot2[j] = hot2[j], hot2[i] })
			ms2 = append(ms2, assign.Member{ID: ms2[0].ID, Capacity: 0.5}) // a duplicate with a smaller capacity
			again, err := p.p.Plan(Input{Members: ms2, Current: cur2, HotKeys: hot2})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(first, again) {
				t.Fatalf("%s: the same input in another order gave another plan", p.name)
			}
			if !slices.Equal(cur2, cur) {
				t.Fatalf("%s: Plan modified Current", p.name)
			}
		}
	}
}

// TestOrphansPlacedAtOnce: a departed owner's ranges all go to members in
// one round, whatever the budget, and do not count as churn.
func TestOrphansPlacedAtOnce(t *testing.T) {
	cur := even(12, []string{"a", "b", "c"}, 3, 1, 2, 0) // c: loads 2 and 0
	cfg := Config{ChurnBudget: 0.001, KeySpaceBudget: 0.001}
	for _, p := range []Policy{weightedPolicy(t, cfg), Centrifuge()} {
		plan, err := p.Plan(Input{Members: members("a", "b"), Current: cur})
		if err != nil {
			t.Fatal(err)
		}
		var orphaned int
		for _, m := range plan.Moves {
			if m.From == "c" {
				orphaned++
				if !m.Orphaned {
					t.Errorf("%v: not marked Orphaned", m)
				}
			}
		}
		if orphaned != 4 {
			t.Errorf("%d orphaned moves, want c's 4 ranges: %v", orphaned, plan.Moves)
		}
		for _, s := range plan.Next {
			if s.Owner == "c" {
				t.Errorf("c still holds %v", s.Range)
			}
		}
		if plan.Moved > cfg.ChurnBudget || plan.KeySpaceMoved > cfg.KeySpaceBudget {
			t.Errorf("Moved %g, KeySpaceMoved %g: orphans counted as churn", plan.Moved, plan.KeySpaceMoved)
		}
	}
}

// TestOrphanPlacement: hot orphans go hottest first to the member with the
// lowest load per capacity; cold ones to the member with the least key space
// per capacity.
func TestOrphanPlacement(t *testing.T) {
	ms := []assign.Member{{ID: "a"}, {ID: "b", Capacity: 2}}
	// a: load 4 on 2 ranges; b: load 4 on 1 range; gone: 3, 2 and three cold ranges.
	cur := []Segment{
		{Range: keyspace.Range{Start: 0, End: 1 << 60}, Owner: "a", Load: 2},
		{Range: keyspace.Range{Start: 1 << 60, End: 2 << 60}, Owner: "gone", Load: 3},
		{Range: keyspace.Range{Start: 2 << 60, End: 3 << 60}, Owner: "a", Load: 2},
		{Range: keyspace.Range{Start: 3 << 60, End: 4 << 60}, Owner: "gone", Load: 2},
		{Range: keyspace.Range{Start: 4 << 60, End: 5 << 60}, Owner: "b", Load: 4},
		{Range: keyspace.Range{Start: 5 << 60, End: 9 << 60}, Owner: "gone"},
		{Range: keyspace.Range{Start: 9 << 60, End: 13 << 60}, Owner: "gone"},
		{Range: keyspace.Range{Start: 13 << 60, End: 0}, Owner: "gone"},
	}
	// The expected owners are worked out below with the rule's own
	// arithmetic, step by step. (Centrifuge moves nothing else here: after
	// the orphans a and b are within 10% of the mean.)
	plan, err := Centrifuge().Plan(Input{Members: ms, Current: cur})
	if err != nil {
		t.Fatal(err)
	}
	got := map[keyspace.Key]string{}
	for _, m := range plan.Moves {
		got[m.Range.Start] = m.To
	}
	load := map[string]float64{"a": 4, "b": 4}
	capOf := map[string]float64{"a": 1, "b": 2}
	for _, s := range []Segment{cur[1], cur[3]} { // hottest first
		best := "a"
		if (load["b"]+s.Load)/2 < (load["a"]+s.Load)/1 {
			best = "b"
		}
		if got[s.Range.Start] != best {
			t.Errorf("hot orphan %v went to %s, want %s", s.Range, got[s.Range.Start], best)
		}
		load[best] += s.Load
	}
	ks := map[string]float64{}
	for _, s := range plan.Next {
		if !slices.ContainsFunc(cur[5:], func(c Segment) bool { return c.Range == s.Range }) {
			ks[s.Owner] += s.Range.Size()
		}
	}
	for _, s := range cur[5:] { // in key order
		best := "a"
		if (ks["b"]+s.Range.Size())/capOf["b"] < (ks["a"]+s.Range.Size())/capOf["a"] {
			best = "b"
		}
		if got[s.Range.Start] != best {
			t.Errorf("cold orphan %v went to %s, want %s", s.Range, got[s.Range.Start], best)
		}
		ks[best] += s.Range.Size()
	}
}

// TestNewMemberFilledWithinBudget: a member with no ranges receives load,
// never more per round than the budget, until it has its share.
func TestNewMemberFilledWithinBudget(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	cur := even(256, ids, 1)
	ms := members(append(ids, "e")...)
	cfg := Config{ChurnBudget: 0.05}
	p := weightedPolicy(t, cfg)
	for round := 1; ; round++ {
		plan, err := p.Plan(Input{Members: ms, Current: cur})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Moves) == 0 {
			break
		}
		if round > 10 {
			t.Fatal("still moving after 10 rounds")
		}
		for _, m := range plan.Moves {
			if m.To != "e" {
				t.Errorf("round %d: %v: only the new member should receive", round, m)
			}
		}
		if plan.Moved > cfg.ChurnBudget+1e-12 || plan.KeySpaceMoved > 0.10+1e-12 {
			t.Errorf("round %d: moved %g of the load, %g of the key space: over the budget", round, plan.Moved, plan.KeySpaceMoved)
		}
		t.Logf("round %d: %d moves, %.3f of the load, max/mean %.3f", round, len(plan.Moves), plan.Moved, plan.After)
		cur = plan.Next
	}
	// Rounds stop once every member is within Tolerance (the hysteresis).
	if u := utils(ms, cur, nil)["e"]; u < 0.90 {
		t.Errorf("the new member carries %.3f of its share, want at least 0.90 (2−Tolerance)", u)
	}
}

// TestElapsedScalesTheBudget: rounds closer together than Interval move
// proportionally less; a long pause does not allow a burst.
func TestElapsedScalesTheBudget(t *testing.T) {
	ids := []string{"a", "b"}
	cur := even(512, ids, 3, 1) // a carries 3× b's load
	p := weightedPolicy(t, Config{})
	for _, c := range []struct {
		elapsed time.Duration
		budget  float64
	}{
		{0, 0.10},
		{5 * time.Second, 0.10},
		{time.Hour, 0.10},
		{time.Second, 0.02},
		{time.Millisecond, 0},
	} {
		plan, err := p.Plan(Input{Members: members(ids...), Current: cur, Elapsed: c.elapsed})
		if err != nil {
			t.Fatal(err)
		}
		if plan.Moved > c.budget+1e-12 || plan.KeySpaceMoved > c.budget+1e-12 {
			t.Errorf("Elapsed %v: moved %g of the load, %g of the key space; want at most %g", c.elapsed, plan.Moved, plan.KeySpaceMoved, c.budget)
		}
		if c.budget > 0 && plan.Moved < c.budget*0.8 {
			t.Errorf("Elapsed %v: moved only %g of the load; the budget %g allows more", c.elapsed, plan.Moved, c.budget)
		}
	}
}

// TestMaxMoves bounds the ranges moved per round.
func TestMaxMoves(t *testing.T) {
	ids := []string{"a", "b"}
	cur := even(512, ids, 3, 1)
	plan, err := weightedPolicy(t, Config{MaxMoves: 7}).Plan(Input{Members: members(ids...), Current: cur})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) != 7 {
		t.Errorf("%d moves, want MaxMoves = 7", len(plan.Moves))
	}
}

// TestHotKeyIsolation: a reported key that alone outweighs SplitLoad, on an
// owner that stays overloaded, gets a one-key range, including at the edges
// of the key space.
func TestHotKeyIsolation(t *testing.T) {
	for _, k := range []keyspace.Key{0, 1 << 62, keyspace.MaxKey} {
		// Owner a: one range over the whole first half or the second half,
		// whichever holds k, with load 10, 6 of it on k. Owner b: load 1.
		half := keyspace.Key(1 << 63)
		cur := []Segment{
			{Range: keyspace.Range{Start: 0, End: half}, Owner: "a", Load: 10},
			{Range: keyspace.Range{Start: half, End: 0}, Owner: "b", Load: 1},
		}
		if k >= half {
			cur[0].Owner, cur[0].Load, cur[1].Owner, cur[1].Load = "b", 1, "a", 10
		}
		plan, err := weightedPolicy(t, Config{}).Plan(Input{Members: members("a", "b"), Current: cur, HotKeys: []HotKey{{Key: k, Load: 6}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := plan.Assignment().Validate(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(plan.HotKeys, []HotKey{{Key: k, Load: 6}}) {
			t.Errorf("key %016x: HotKeys = %v, want it with load 6", uint64(k), plan.HotKeys)
		}
		i := slices.IndexFunc(plan.Next, func(s Segment) bool { return s.Range.Start == k })
		if i < 0 || plan.Next[i].Range != (keyspace.Range{Start: k, End: k + 1}) || plan.Next[i].Load != 6 || plan.Next[i].Owner != "a" {
			t.Errorf("key %016x: not isolated on a with load 6: %v", uint64(k), plan.Next)
		}
		if plan.Splits != 1 || len(plan.Moves) != 0 {
			t.Errorf("key %016x: %d splits, %d moves; want the one split and no move (the whole range is too big to move)", uint64(k), plan.Splits, len(plan.Moves))
		}
	}
}

// TestPinnedOwner: an owner holding an isolated key hotter than its fair
// share gives away everything else and receives nothing; the others balance
// among themselves.
func TestPinnedOwner(t *testing.T) {
	hot := keyspace.Key(1<<62 + 12345)
	cur := []Segment{{Range: keyspace.Range{Start: hot, End: hot + 1}, Owner: "a", Load: 50}}
	for i, s := range even(64, []string{"a", "b", "c", "d"}, 1) {
		if s.Range.Contains(hot) { // cut the hot key out of this range
			cur = append(cur, Segment{Range: keyspace.Range{Start: s.Range.Start, End: hot}, Owner: s.Owner, Load: 0.5},
				Segment{Range: keyspace.Range{Start: hot + 1, End: s.Range.End}, Owner: s.Owner, Load: 0.5})
			continue
		}
		if i%4 == 1 {
			s.Load = 2 // b runs hot
		}
		cur = append(cur, s)
	}
	slices.SortFunc(cur, func(a, b Segment) int { return keyspace.Compare(a.Range, b.Range) })
	ms := members("a", "b", "c", "d")
	p := weightedPolicy(t, Config{ChurnBudget: 1, KeySpaceBudget: 1, MaxMoves: 1000})
	plan, err := p.Plan(Input{Members: ms, Current: cur})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plan.Moves {
		if m.To == "a" {
			t.Errorf("%v: the pinned owner received", m)
		}
	}
	for _, s := range plan.Next {
		if s.Owner == "a" && s.Range.Start != hot && s.Load > 0 {
			t.Errorf("the pinned owner kept %v", s)
		}
	}
	lo, hi := spread(utils(ms, plan.Next, map[string]bool{"a": true}))
	if lo < 0.95-1e-9 || hi > 1.05+1e-9 {
		t.Errorf("b, c, d carry %.3f–%.3f of their share, want within Target", lo, hi)
	}
	var total float64
	for _, s := range cur {
		total += s.Load
	}
	if want := 50 / (total / 4); math.Abs(plan.After-want) > 1e-9 || math.Abs(plan.Floor-want) > 1e-9 {
		t.Errorf("After %g, Floor %g; want both %g", plan.After, plan.Floor, want)
	}
	again, _ := p.Plan(Input{Members: ms, Current: plan.Next})
	if len(again.Moves) != 0 {
		t.Errorf("the next round moves again: %v", again.Moves)
	}
}

// TestSegmentBound: splits stop at MaxSegmentsPerOwner × members ranges.
func TestSegmentBound(t *testing.T) {
	ids := []string{"a", "b"}
	cur := even(8, ids, 30, 1) // a's ranges are each far above SplitLoad
	p := weightedPolicy(t, Config{MaxSegmentsPerOwner: 5, MaxMoves: 1})
	for range 5 {
		plan, err := p.Plan(Input{Members: members(ids...), Current: cur})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Next) > 10 {
			t.Fatalf("%d ranges, want at most 5 × 2", len(plan.Next))
		}
		cur = plan.Next
	}
}

// TestMerge: adjacent cold ranges of one owner merge; hot ones and ranges
// of different owners do not. (TestPlanInvariants checks that a range moved
// in a round is not merged in it.)
func TestMerge(t *testing.T) {
	r := func(s, e uint64) keyspace.Range {
		return keyspace.Range{Start: keyspace.Key(s << 56), End: keyspace.Key(e << 56)}
	}
	cur := []Segment{
		{r(0, 1), "a", 0.01}, {r(1, 2), "a", 0.01}, {r(2, 3), "a", 0.01}, // a run of cold ranges: one
		{r(3, 4), "b", 0.01},                     // another owner
		{r(4, 5), "b", 15}, {r(5, 6), "b", 0.01}, // hot next to cold
		{r(6, 7), "a", 10}, {r(7, 0), "a", 5}, // two hot ones
	}
	// a carries 15.03, b 15.02: balanced, so the round only merges, at
	// MergeLoad × 15.025 ≈ 0.19.
	plan, err := weightedPolicy(t, Config{}).Plan(Input{Members: members("a", "b"), Current: cur})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]Segment{{r(0, 3), "a", 0.01 + 0.01 + 0.01}}, cur[3:]...)
	if plan.Merges != 2 || !reflect.DeepEqual(plan.Next, want) || len(plan.Moves) != 0 {
		t.Errorf("Merges %d, Next %v, Moves %v; want 2, %v and none", plan.Merges, plan.Next, plan.Moves, want)
	}
}

// TestCentrifugeRule: each owner more than 10% above the mean gives its most
// typical range to the least loaded owner, one range per round; others give
// nothing.
func TestCentrifugeRule(t *testing.T) {
	r := func(s, e uint64) keyspace.Range {
		return keyspace.Range{Start: keyspace.Key(s << 56), End: keyspace.Key(e << 56)}
	}
	cur := []Segment{
		{r(0, 1), "a", 1}, {r(1, 2), "a", 5}, {r(2, 3), "a", 3}, {r(3, 4), "a", 4}, // a: 13, typical 3.25 → the 3
		{r(4, 5), "b", 5}, {r(5, 6), "b", 5}, // b: 10
		{r(6, 7), "c", 4},                    // c: 4, least loaded
		{r(7, 8), "d", 6}, {r(8, 0), "d", 3}, // d: 9
	}
	// Mean 9: a at 1.44, b at 1.11 give; d at 1.0 does not.
	plan, err := Centrifuge().Plan(Input{Members: members("a", "b", "c", "d"), Current: cur})
	if err != nil {
		t.Fatal(err)
	}
	want := []Move{
		{Range: r(2, 3), From: "a", To: "c", Load: 3},
		{Range: r(4, 5), From: "b", To: "c", Load: 5}, // c at 7 is still the least loaded
	}
	if !reflect.DeepEqual(plan.Moves, want) {
		t.Errorf("Moves = %v, want %v", plan.Moves, want)
	}
}

func TestImbalance(t *testing.T) {
	ms := []assign.Member{{ID: "a"}, {ID: "b", Capacity: 3}}
	for _, c := range []struct {
		segs []Segment
		want float64
	}{
		{nil, 1},
		{[]Segment{{Owner: "a", Load: 1}, {Owner: "b", Load: 3}}, 1},
		{[]Segment{{Owner: "a", Load: 2}, {Owner: "b", Load: 2}}, 2},          // a: 2 per capacity, mean 1
		{[]Segment{{Owner: "a", Load: 1}, {Owner: "gone", Load: 3}}, 4.0 / 4}, // a: 1 per capacity, mean 1
	} {
		if got := Imbalance(ms, c.segs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Imbalance(%v) = %g, want %g", c.segs, got, c.want)
		}
	}
	if got := Imbalance(nil, []Segment{{Owner: "a", Load: 1}}); got != 0 {
		t.Errorf("Imbalance without members = %g, want 0", got)
	}
}

// TestPlanInvariants checks every plan of many random inputs, for both
// policies: Next is a valid assignment of members; every key whose owner
// changed is in exactly one Move, which names a range of Current with its
// load or a part of one with part of its load (Centrifuge placing a new
// member on the ring); the churn fits the budget; orphans are all placed.
func TestPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for i := range 300 {
		in := randomInput(rng)
		for _, p := range policies(t) {
			plan, err := p.p.Plan(in)
			if err != nil {
				t.Fatalf("case %d: %s: %v", i, p.name, err)
			}
			if err := checkPlan(in, plan, p.name == "Weighted"); err != nil {
				t.Fatalf("case %d: %s: %v\ninput: %+v", i, p.name, err, in)
			}
		}
	}
}

func randomInput(rng *rand.Rand) Input {
	n := 1 + rng.Intn(6)
	var in Input
	for i := range n {
		m := assign.Member{ID: fmt.Sprintf("m%d", i)}
		if rng.Intn(3) == 0 {
			m.Capacity = []float64{0.5, 2, 4}[rng.Intn(3)]
		}
		in.Members = append(in.Members, m)
	}
	owners := []string{"gone"}
	for _, m := range in.Members {
		owners = append(owners, m.ID)
	}
	cuts := map[keyspace.Key]bool{}
	for range rng.Intn(40) {
		cuts[keyspace.Key(rng.Uint64())] = true
	}
	if rng.Intn(4) == 0 { // tiny ranges at the ends
		cuts[1], cuts[keyspace.MaxKey] = true, true
	}
	keys := []keyspace.Key{0}
	for k := range cuts {
		if k != 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for j, k := range keys {
		s := Segment{Range: keyspace.Range{Start: k}, Owner: owners[rng.Intn(len(owners))]}
		if j+1 < len(keys) {
			s.Range.End = keys[j+1]
		}
		if rng.Intn(5) > 0 {
			s.Load = rng.ExpFloat64() * 10
		}
		if rng.Intn(8) == 0 {
			hk := s.Range.Start + keyspace.Key(rng.Int63n(int64(min(s.Range.Size(), 1<<62))))
			in.HotKeys = append(in.HotKeys, HotKey{Key: hk, Load: s.Load * rng.Float64() * 1.2})
		}
		in.Current = append(in.Current, s)
	}
	if rng.Intn(3) == 0 {
		in.Elapsed = time.Duration(rng.Int63n(int64(10 * time.Second)))
	}
	return in
}

func checkPlan(in Input, plan Plan, budgeted bool) error {
	if err := plan.Assignment().Validate(); err != nil {
		return err
	}
	isMember := map[string]bool{}
	for _, m := range in.Members {
		isMember[m.ID] = true
	}
	var total float64
	for _, s := range in.Current {
		total += s.Load
	}
	byRange := map[keyspace.Range]Move{}
	for _, m := range plan.Moves {
		byRange[m.Range] = m
	}
	var moved, keys float64
	j := 0 // the Current segment holding the start of Next[i]
	for _, s := range plan.Next {
		if !isMember[s.Owner] {
			return fmt.Errorf("%v held by %q, not a member", s.Range, s.Owner)
		}
		for !in.Current[j].Range.Contains(s.Range.Start) {
			j++
		}
		// Every Current segment under s has one owner.
		from := in.Current[j].Owner
		for k := j; k < len(in.Current) && in.Current[k].Range.Overlaps(s.Range); k++ {
			if in.Current[k].Owner != from {
				return fmt.Errorf("%v merges ranges of %q and %q", s.Range, from, in.Current[k].Owner)
			}
		}
		m, ok := byRange[s.Range]
		switch {
		case from == s.Owner && ok:
			return fmt.Errorf("move %v, but the owner did not change", m)
		case from == s.Owner:
			continue
		case !ok:
			return fmt.Errorf("%v went from %q to %q without a move", s.Range, from, s.Owner)
		case m.From != from || m.To != s.Owner || m.Orphaned == isMember[from]:
			return fmt.Errorf("move %v, want from %q to %q, orphaned %v", m, from, s.Owner, !isMember[from])
		case in.Current[j].Range == s.Range && in.Current[j].Load != m.Load:
			return fmt.Errorf("move %v of the whole range %v has not its load %g", m, in.Current[j].Range, in.Current[j].Load)
		case in.Current[j].Range != s.Range && (s.Range.Last() > in.Current[j].Range.Last() || m.Load > in.Current[j].Load+1e-9):
			return fmt.Errorf("move %v is not part of the range %v with at most its load %g", m, in.Current[j].Range, in.Current[j].Load)
		}
		delete(byRange, s.Range)
		if !m.Orphaned {
			moved += m.Load / total
			keys += m.Range.Size() / keySpace
		}
	}
	if len(byRange) > 0 {
		return fmt.Errorf("moves of no range of Next: %v", byRange)
	}
	if total > 0 && (math.Abs(moved-plan.Moved) > 1e-9 || math.Abs(keys-plan.KeySpaceMoved) > 1e-9) {
		return fmt.Errorf("Moved %g, KeySpaceMoved %g; the moves add up to %g, %g", plan.Moved, plan.KeySpaceMoved, moved, keys)
	}
	if budgeted {
		b := DefaultConfig().budgetFor(in.Elapsed)
		if plan.Moved > b.load+1e-9 || plan.KeySpaceMoved > b.keys+1e-9 {
			return fmt.Errorf("moved %g of the load, %g of the key space; budget %g, %g", plan.Moved, plan.KeySpaceMoved, b.load, b.keys)
		}
	}
	return nil
}

func BenchmarkWeightedPlan(b *testing.B) {
	// 100 owners × 64 ranges of consistent hashing under Zipf(0.8).
	w := zipf()
	ms := equalOwners(100)
	in := Input{Members: ms, Current: consistent(ms, w), HotKeys: w.Top(hotReports, rate)}
	p := weightedPolicy(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Plan(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWeightedPlanBalanced(b *testing.B) {
	// The steady state: 100 balanced owners, nothing to do but check.
	w := zipf()
	ms := equalOwners(100)
	p := weightedPolicy(b, Config{})
	cur := consistent(ms, w)
	for range 3 {
		plan, err := p.Plan(Input{Members: ms, Current: cur, HotKeys: w.Top(hotReports, rate)})
		if err != nil {
			b.Fatal(err)
		}
		cur = plan.Next
		w.Measure(cur, rate)
	}
	in := Input{Members: ms, Current: cur, HotKeys: w.Top(hotReports, rate)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Plan(in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCentrifugeJoinPlacesOnRing: a member that holds nothing has joined;
// Centrifuge places it on the hash ring at once, as its virtual nodes would
// be, keeping the load of every key where it is.
func TestCentrifugeJoinPlacesOnRing(t *testing.T) {
	before := assign.ConsistentHash{}.Assign(members("a", "b"))
	cur := make([]Segment, len(before))
	for i, s := range before {
		cur[i] = Segment{Range: s.Range, Owner: s.Owner, Load: s.Range.Size() / keySpace * 100}
	}
	ms := members("a", "b", "c")
	plan, err := Centrifuge().Plan(Input{Members: ms, Current: cur})
	if err != nil {
		t.Fatal(err)
	}
	ring := assign.ConsistentHash{}.Assign(ms)
	var total float64
	for _, s := range plan.Next {
		total += s.Load
		for _, k := range []keyspace.Key{s.Range.Start, s.Range.Last()} {
			if want := ring.Owner(k); s.Owner != want {
				t.Fatalf("key %016x went to %s, the ring says %s", uint64(k), s.Owner, want)
			}
		}
	}
	if math.Abs(total-100) > 1e-6 {
		t.Errorf("the load adds up to %g after placing, want 100", total)
	}
	if plan.KeySpaceMoved < 0.2 || plan.KeySpaceMoved > 0.5 {
		t.Errorf("KeySpaceMoved %g: the new member should take about a third of the key space", plan.KeySpaceMoved)
	}
}
