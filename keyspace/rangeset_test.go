package keyspace

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"
)

// model is the naive reference for a RangeSet: a predicate on keys.
type model func(Key) bool

// modelOf is the set of keys in any of rs (invalid ranges hold no key).
func modelOf(rs []Range) model {
	return func(k Key) bool {
		for _, r := range rs {
			if r.Valid() && r.Contains(k) {
				return true
			}
		}
		return false
	}
}

// checkCanonical fails unless s is in canonical form: valid ranges, sorted,
// disjoint and not adjacent (so that Equal can compare slices).
func checkCanonical(t *testing.T, what string, s RangeSet) {
	t.Helper()
	rs := s.Ranges()
	for i, r := range rs {
		if !r.Valid() {
			t.Fatalf("%s = %v: range %d %v is not valid", what, s, i, r)
		}
		if i+1 == len(rs) {
			break
		}
		if r.End == 0 {
			t.Fatalf("%s = %v: range %d %v reaches 2^64 but is not last", what, s, i, r)
		}
		if r.End >= rs[i+1].Start {
			t.Fatalf("%s = %v: ranges %d and %d overlap or touch", what, s, i, i+1)
		}
	}
	if s.Len() != len(rs) || s.Empty() != (len(rs) == 0) {
		t.Fatalf("%s = %v: Len %d, Empty %v for %d ranges", what, s, s.Len(), s.Empty(), len(rs))
	}
}

// checkKeys fails unless s and m agree on every key of pool and at every
// boundary of s itself (where a wrong result would differ from the model).
func checkKeys(t *testing.T, what string, s RangeSet, m model, pool []Key) {
	t.Helper()
	checkCanonical(t, what, s)
	keys := slices.Clone(pool)
	for _, r := range s.Ranges() {
		keys = append(keys, r.Start, r.Start-1, r.Last(), r.Last()+1)
	}
	for _, k := range keys {
		if got, want := s.Contains(k), m(k); got != want {
			t.Fatalf("%s = %v: Contains(%016x) = %v, model says %v", what, s, uint64(k), got, want)
		}
		// Contains is a binary search; check it against a scan too.
		if scan := slices.ContainsFunc(s.Ranges(), func(r Range) bool { return r.Contains(k) }); scan != s.Contains(k) {
			t.Fatalf("%s = %v: Contains(%016x) = %v, but a scan of its ranges says %v", what, s, uint64(k), s.Contains(k), scan)
		}
	}
}

func randRanges(rng *rand.Rand) []Range {
	rs := make([]Range, rng.Intn(7))
	for i := range rs {
		rs[i] = randRange(rng)
	}
	return rs
}

// TestRangeSetAgainstKeyModel is the reference check: random sets of random
// ranges (touching, overlapping, ending at 2^64, Full, invalid), every
// operation compared key by key with the naive model over every key where
// an input's or the result's membership can change.
func TestRangeSetAgainstKeyModel(t *testing.T) {
	const seed = 1
	rng := rand.New(rand.NewSource(seed))
	for trial := range 5000 {
		ra, rb := randRanges(rng), randRanges(rng)
		ma, mb := modelOf(ra), modelOf(rb)
		pool := interestingKeys(rng, append(slices.Clone(ra), rb...))
		name := func(op string) string {
			return fmt.Sprintf("seed %d trial %d: %s with A=%v B=%v", seed, trial, op, ra, rb)
		}

		a, b := NewRangeSet(ra...), NewRangeSet(rb...)
		aRanges, bRanges := slices.Clone(a.Ranges()), slices.Clone(b.Ranges())
		checkKeys(t, name("A"), a, ma, pool)
		checkKeys(t, name("B"), b, mb, pool)

		// Add, one range at a time and in another order.
		s := b
		for _, r := range ra {
			s = s.Add(r)
		}
		union := func(k Key) bool { return ma(k) || mb(k) }
		checkKeys(t, name("B.Add(A...)"), s, union, pool)
		shuffled := slices.Clone(ra)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if p := NewRangeSet(shuffled...); !p.Equal(a) {
			t.Fatalf("%s: NewRangeSet depends on order: %v vs %v", name("NewRangeSet"), p, a)
		}

		u := a.Union(b)
		checkKeys(t, name("A ∪ B"), u, union, pool)
		if !u.Equal(s) || !u.Equal(b.Union(a)) {
			t.Fatalf("%s: A∪B = %v, B.Add(A...) = %v, B∪A = %v", name("Union"), u, s, b.Union(a))
		}

		i := a.Intersect(b)
		checkKeys(t, name("A ∩ B"), i, func(k Key) bool { return ma(k) && mb(k) }, pool)
		if !i.Equal(b.Intersect(a)) {
			t.Fatalf("%s: A∩B = %v, B∩A = %v", name("Intersect"), i, b.Intersect(a))
		}

		d := a.Subtract(b)
		checkKeys(t, name("A \\ B"), d, func(k Key) bool { return ma(k) && !mb(k) }, pool)

		c := a.Complement()
		checkKeys(t, name("¬A"), c, func(k Key) bool { return !ma(k) }, pool)
		if cc := c.Complement(); !cc.Equal(a) {
			t.Fatalf("%s: ¬¬A = %v, want %v", name("Complement"), cc, a)
		}

		overlaps, equal := false, true
		for _, k := range pool {
			overlaps = overlaps || (ma(k) && mb(k))
			equal = equal && ma(k) == mb(k)
		}
		if got := a.Overlaps(b); got != overlaps {
			t.Fatalf("%s: A.Overlaps(B) = %v, model says %v", name("Overlaps"), got, overlaps)
		}
		if got := b.Overlaps(a); got != overlaps {
			t.Fatalf("%s: B.Overlaps(A) = %v, model says %v", name("Overlaps"), got, overlaps)
		}
		if got := a.Equal(b); got != equal {
			t.Fatalf("%s: A.Equal(B) = %v, model says %v", name("Equal"), got, equal)
		}

		// Identities that tie the operations together.
		if !d.Union(i).Equal(a) {
			t.Fatalf("%s: (A\\B) ∪ (A∩B) = %v, want A = %v", name("identity"), d.Union(i), a)
		}
		if d.Overlaps(b) || !i.Equal(a.Subtract(a.Subtract(b))) {
			t.Fatalf("%s: A\\B overlaps B, or A∩B != A\\(A\\B)", name("identity"))
		}
		if !a.Union(c).Equal(NewRangeSet(Full)) || a.Overlaps(c) {
			t.Fatalf("%s: A ∪ ¬A = %v, A overlaps ¬A: %v", name("identity"), a.Union(c), a.Overlaps(c))
		}
		if sum := a.Size() + c.Size(); math.Abs(sum-math.Exp2(64)) > 1e-12*math.Exp2(64) {
			t.Fatalf("%s: |A| + |¬A| = %g, want 2^64", name("Size"), sum)
		}
		if got, want := u.Size(), a.Size()+b.Size()-i.Size(); math.Abs(got-want) > 1e-12*math.Exp2(64) {
			t.Fatalf("%s: |A∪B| = %g, |A|+|B|-|A∩B| = %g", name("Size"), got, want)
		}

		// No operation modified its operands.
		if !slices.Equal(a.Ranges(), aRanges) || !slices.Equal(b.Ranges(), bRanges) {
			t.Fatalf("%s: an operation modified its operands: A %v -> %v, B %v -> %v", name("immutability"), aRanges, a.Ranges(), bRanges, b.Ranges())
		}
	}
}

func TestRangeSetCanonicalForm(t *testing.T) {
	r := func(s, e Key) Range { return Range{s, e} }
	for _, c := range []struct {
		in   []Range
		want []Range
	}{
		{nil, nil},
		{[]Range{r(5, 5), r(7, 6)}, nil}, // invalid ranges hold no key
		{[]Range{r(10, 20), r(20, 30)}, []Range{r(10, 30)}},
		{[]Range{r(20, 30), r(10, 20)}, []Range{r(10, 30)}},
		{[]Range{r(10, 20), r(21, 30)}, []Range{r(10, 20), r(21, 30)}},
		{[]Range{r(30, 40), r(10, 20), r(15, 35)}, []Range{r(10, 40)}},
		{[]Range{r(0, 5), r(5, 0)}, []Range{Full}},
		{[]Range{r(5, 0), r(0, 5)}, []Range{Full}},
		{[]Range{r(0, 5), r(6, 0)}, []Range{r(0, 5), r(6, 0)}},
		{[]Range{r(MaxKey, 0), r(0, MaxKey)}, []Range{Full}},
		{[]Range{r(MaxKey, 0), r(0, 1)}, []Range{r(0, 1), r(MaxKey, 0)}},
		{[]Range{r(1, 2), r(3, 4), r(5, 6), r(2, 5)}, []Range{r(1, 6)}},
		{[]Range{r(1, 2), r(3, 4), Full}, []Range{Full}},
		{[]Range{r(100, 0), r(50, 0), r(200, 300)}, []Range{r(50, 0)}},
		{[]Range{r(1, 2), r(MaxKey-1, MaxKey), r(MaxKey, 0)}, []Range{r(1, 2), r(MaxKey-1, 0)}},
	} {
		s := NewRangeSet(c.in...)
		if !slices.Equal(s.Ranges(), c.want) {
			t.Errorf("NewRangeSet(%v) = %v, want %v", c.in, s, c.want)
		}
		if !s.Equal(NewRangeSet(c.want...)) {
			t.Errorf("NewRangeSet(%v) is not Equal to NewRangeSet(%v)", c.in, c.want)
		}
	}
}

func TestRangeSetComplementEdges(t *testing.T) {
	r := func(s, e Key) Range { return Range{s, e} }
	for _, c := range []struct {
		in   []Range
		want []Range
	}{
		{nil, []Range{Full}},
		{[]Range{Full}, nil},
		{[]Range{r(0, 1)}, []Range{r(1, 0)}},
		{[]Range{r(MaxKey, 0)}, []Range{r(0, MaxKey)}},
		{[]Range{r(0, 1), r(MaxKey, 0)}, []Range{r(1, MaxKey)}},
		{[]Range{r(10, 20), r(30, 0)}, []Range{r(0, 10), r(20, 30)}},
		{[]Range{r(0, 10), r(20, 30)}, []Range{r(10, 20), r(30, 0)}},
	} {
		if got := NewRangeSet(c.in...).Complement(); !slices.Equal(got.Ranges(), c.want) {
			t.Errorf("Complement of %v = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestRangeSetSize(t *testing.T) {
	for _, c := range []struct {
		in   []Range
		want float64
	}{
		{nil, 0},
		{[]Range{Full}, math.Exp2(64)},
		{[]Range{{MaxKey, 0}, {0, 1}}, 2},
		{[]Range{{10, 20}, {15, 25}}, 15},
		{[]Range{{0, 1 << 62}, {3 << 62, 0}}, math.Exp2(63)},
	} {
		if got := NewRangeSet(c.in...).Size(); got != c.want {
			t.Errorf("Size of %v = %g, want %g", c.in, got, c.want)
		}
	}
}

func TestRangeSetResultsDoNotAlias(t *testing.T) {
	a := NewRangeSet(Range{10, 20}, Range{30, 40})
	b := NewRangeSet(Range{0, 0})
	want := slices.Clone(a.Ranges())
	for name, res := range map[string]RangeSet{
		"Add":          a.Add(Range{50, 60}),
		"Add(invalid)": a.Add(Range{5, 5}),
		"Union":        a.Union(RangeSet{}),
		"Intersect":    a.Intersect(b),
		"Subtract":     a.Subtract(RangeSet{}),
	} {
		rs := res.Ranges()
		if len(rs) == 0 {
			t.Fatalf("%s: empty result", name)
		}
		if &rs[0] == &a.Ranges()[0] {
			t.Errorf("%s: result shares the receiver's storage", name)
		}
		// Growing the result must not write into the receiver.
		res.Add(Range{11, 12})
		_ = append(rs[:1], Range{1000, 2000})
		if !slices.Equal(a.Ranges(), want) {
			t.Fatalf("%s: receiver changed to %v, was %v", name, a, want)
		}
	}
}

func TestRangeSetString(t *testing.T) {
	if got, want := (RangeSet{}).String(), "{}"; got != want {
		t.Errorf("empty: %q, want %q", got, want)
	}
	s := NewRangeSet(Range{MaxKey, 0}, Range{1, 2})
	if got, want := s.String(), "{[0000000000000001, 0000000000000002) [ffffffffffffffff, end)}"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestRangeSetZeroValue(t *testing.T) {
	var s RangeSet
	if !s.Empty() || s.Len() != 0 || s.Size() != 0 || s.Contains(0) || s.Contains(MaxKey) {
		t.Errorf("zero RangeSet is not empty: %v", s)
	}
	if !s.Equal(NewRangeSet()) || !s.Equal(NewRangeSet(Range{3, 3})) {
		t.Error("zero RangeSet is not Equal to the empty set")
	}
	if s.Overlaps(NewRangeSet(Full)) || NewRangeSet(Full).Overlaps(s) {
		t.Error("empty set overlaps Full")
	}
}

func TestRangeSetRangeQueries(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for range 5000 {
		var rs []Range
		for range rng.Intn(5) {
			rs = append(rs, randomSmallRange(rng))
		}
		s := NewRangeSet(rs...)
		r := randomSmallRange(rng)
		one := NewRangeSet(r)
		if got, want := s.OverlapsRange(r), s.Overlaps(one); got != want {
			t.Fatalf("%v.OverlapsRange(%v) = %v, want %v", s, r, got, want)
		}
		if got, want := s.CoversRange(r), s.Intersect(one).Equal(one); got != want {
			t.Fatalf("%v.CoversRange(%v) = %v, want %v", s, r, got, want)
		}
	}
}

// randomSmallRange draws ranges over a few boundaries so that overlaps,
// adjacency and the end of the key space are common.
func randomSmallRange(rng *rand.Rand) Range {
	bounds := []Key{0, 1, 10, 20, 30, 1 << 63, MaxKey - 1, MaxKey}
	a, b := bounds[rng.Intn(len(bounds))], bounds[rng.Intn(len(bounds))]
	if a > b {
		a, b = b, a
	}
	if a == b || rng.Intn(5) == 0 {
		return Range{Start: a, End: 0}
	}
	return Range{Start: a, End: b}
}
