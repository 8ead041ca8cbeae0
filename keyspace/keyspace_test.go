package keyspace

import (
	"math"
	"math/rand"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestKeyOfStable(t *testing.T) {
	// Literals computed once (and checked against an independent xxh64
	// implementation): a change of hash function or seed must break this test,
	// because it would move every key of every deployment.
	for _, c := range []struct {
		name string
		want Key
	}{
		{"alice", 0x73a3ea485f2e6049},
		{"", 0xef46db3751d8e999},
		{"alpha#0", 0x75c176dcdcb017b0},
	} {
		if got := KeyOf(c.name); got != c.want {
			t.Errorf("KeyOf(%q) = %#016x, want %#016x", c.name, uint64(got), uint64(c.want))
		}
		if got, direct := KeyOf(c.name), Key(xxhash.Sum64String(c.name)); got != direct {
			t.Errorf("KeyOf(%q) = %#016x, but xxhash64 gives %#016x", c.name, uint64(got), uint64(direct))
		}
	}
	if KeyOf("alice") == KeyOf("bob") {
		t.Error("KeyOf(alice) == KeyOf(bob)")
	}
}

func TestRangeValidAndLast(t *testing.T) {
	for _, c := range []struct {
		r     Range
		valid bool
		last  Key
	}{
		{Full, true, MaxKey},
		{Range{0, 1}, true, 0},
		{Range{5, 6}, true, 5},
		{Range{5, 0}, true, MaxKey},
		{Range{MaxKey, 0}, true, MaxKey},
		{Range{0, MaxKey}, true, MaxKey - 1},
		{Range{MaxKey - 1, MaxKey}, true, MaxKey - 1},
		{Range{5, 5}, false, 0},
		{Range{6, 5}, false, 0},
		{Range{MaxKey, MaxKey}, false, 0},
		{Range{MaxKey, 1}, false, 0},
	} {
		if got := c.r.Valid(); got != c.valid {
			t.Errorf("%v.Valid() = %v, want %v", c.r, got, c.valid)
		}
		if c.valid {
			if got := c.r.Last(); got != c.last {
				t.Errorf("%v.Last() = %016x, want %016x", c.r, uint64(got), uint64(c.last))
			}
		}
	}
}

func TestRangeContains(t *testing.T) {
	for _, c := range []struct {
		r   Range
		in  []Key
		out []Key
	}{
		{Full, []Key{0, 1, 1 << 63, MaxKey - 1, MaxKey}, nil},
		{Range{0, 1}, []Key{0}, []Key{1, MaxKey}},
		{Range{10, 20}, []Key{10, 15, 19}, []Key{0, 9, 20, MaxKey}},
		{Range{10, 0}, []Key{10, 1 << 63, MaxKey}, []Key{0, 9}},
		{Range{MaxKey, 0}, []Key{MaxKey}, []Key{0, MaxKey - 1}},
		{Range{0, MaxKey}, []Key{0, MaxKey - 1}, []Key{MaxKey}},
		{Range{5, 5}, nil, []Key{4, 5, 6}},
		{Range{6, 5}, nil, []Key{4, 5, 6, 7, MaxKey}},
	} {
		for _, k := range c.in {
			if !c.r.Contains(k) {
				t.Errorf("%v.Contains(%016x) = false, want true", c.r, uint64(k))
			}
		}
		for _, k := range c.out {
			if c.r.Contains(k) {
				t.Errorf("%v.Contains(%016x) = true, want false", c.r, uint64(k))
			}
		}
	}
}

func TestRangeSize(t *testing.T) {
	for _, c := range []struct {
		r    Range
		want float64
	}{
		{Full, math.Exp2(64)},
		{Range{0, 1}, 1},
		{Range{10, 20}, 10},
		{Range{MaxKey, 0}, 1},
		{Range{MaxKey - 9, 0}, 10},
		{Range{1 << 63, 0}, math.Exp2(63)},
		{Range{0, 1 << 63}, math.Exp2(63)},
		{Range{1, 0}, float64(uint64(math.MaxUint64))}, // 2^64-1, as near as a float gets
		{Range{0, MaxKey}, float64(uint64(math.MaxUint64))},
	} {
		if got := c.r.Size(); got != c.want {
			t.Errorf("%v.Size() = %g, want %g", c.r, got, c.want)
		}
	}
}

func TestRangeOverlapsCoversIntersect(t *testing.T) {
	r := func(s, e Key) Range { return Range{s, e} }
	for _, c := range []struct {
		a, b     Range
		overlaps bool
		aCoversB bool
		bCoversA bool
		inter    Range // when overlaps
	}{
		{r(0, 10), r(10, 20), false, false, false, Range{}},
		{r(0, 11), r(10, 20), true, false, false, r(10, 11)},
		{r(10, 20), r(12, 15), true, true, false, r(12, 15)},
		{r(10, 20), r(10, 20), true, true, true, r(10, 20)},
		{Full, r(5, 6), true, true, false, r(5, 6)},
		{Full, Full, true, true, true, Full},
		{Full, r(MaxKey, 0), true, true, false, r(MaxKey, 0)},
		{r(5, 0), r(MaxKey, 0), true, true, false, r(MaxKey, 0)},
		{r(5, 0), r(0, 6), true, false, false, r(5, 6)},
		{r(5, 0), r(0, 5), false, false, false, Range{}},
		{r(5, 0), r(7, 0), true, true, false, r(7, 0)},
		{r(0, MaxKey), r(MaxKey, 0), false, false, false, Range{}},
		{r(0, MaxKey), r(MaxKey-1, 0), true, false, false, r(MaxKey-1, MaxKey)},
		{r(1<<63, 0), r(0, 1<<63), false, false, false, Range{}},
		{r(0, 1), r(0, 1), true, true, true, r(0, 1)},
		{r(0, 1), r(1, 2), false, false, false, Range{}},
	} {
		for _, swap := range []bool{false, true} {
			a, b, aCoversB, bCoversA := c.a, c.b, c.aCoversB, c.bCoversA
			if swap {
				a, b, aCoversB, bCoversA = b, a, bCoversA, aCoversB
			}
			if got := a.Overlaps(b); got != c.overlaps {
				t.Errorf("%v.Overlaps(%v) = %v, want %v", a, b, got, c.overlaps)
			}
			if got := a.Covers(b); got != aCoversB {
				t.Errorf("%v.Covers(%v) = %v, want %v", a, b, got, aCoversB)
			}
			if got := b.Covers(a); got != bCoversA {
				t.Errorf("%v.Covers(%v) = %v, want %v", b, a, got, bCoversA)
			}
			got, ok := a.Intersect(b)
			if ok != c.overlaps || (ok && got != c.inter) || (!ok && got != Range{}) {
				t.Errorf("%v.Intersect(%v) = %v, %v; want %v, %v", a, b, got, ok, c.inter, c.overlaps)
			}
		}
	}
}

func TestRangeCompare(t *testing.T) {
	ordered := []Range{
		{0, 1}, {0, 5}, {0, MaxKey}, Full, {1, 2}, {1, 0}, {MaxKey - 1, MaxKey}, {MaxKey - 1, 0}, {MaxKey, 0},
	}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := Compare(a, b); got != want {
				t.Errorf("Compare(%v, %v) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestRangeString(t *testing.T) {
	for _, c := range []struct {
		r    Range
		want string
	}{
		{Full, "[0000000000000000, end)"},
		{Range{0x10, 0x20}, "[0000000000000010, 0000000000000020)"},
		{Range{MaxKey, 0}, "[ffffffffffffffff, end)"},
	} {
		if got := c.r.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

// TestRangeAgainstKeyModel checks Overlaps, Covers and Intersect of random
// valid ranges against the definition "the set of keys it contains",
// evaluated over every key at which either range's membership can change.
func TestRangeAgainstKeyModel(t *testing.T) {
	const seed = 1
	rng := rand.New(rand.NewSource(seed))
	for trial := range 20000 {
		a, b := randValidRange(rng), randValidRange(rng)
		pool := interestingKeys(rng, []Range{a, b})
		overlaps, aCoversB := false, true
		for _, k := range pool {
			if a.Contains(k) && b.Contains(k) {
				overlaps = true
			}
			if b.Contains(k) && !a.Contains(k) {
				aCoversB = false
			}
		}
		if got := a.Overlaps(b); got != overlaps {
			t.Fatalf("seed %d trial %d: %v.Overlaps(%v) = %v, keys say %v", seed, trial, a, b, got, overlaps)
		}
		if got := a.Covers(b); got != aCoversB {
			t.Fatalf("seed %d trial %d: %v.Covers(%v) = %v, keys say %v", seed, trial, a, b, got, aCoversB)
		}
		x, ok := a.Intersect(b)
		if ok != overlaps {
			t.Fatalf("seed %d trial %d: %v.Intersect(%v) ok = %v, keys say %v", seed, trial, a, b, ok, overlaps)
		}
		if !ok {
			continue
		}
		if !x.Valid() {
			t.Fatalf("seed %d trial %d: %v.Intersect(%v) = %v, not valid", seed, trial, a, b, x)
		}
		for _, k := range append(pool, x.Start, x.Start-1, x.Last(), x.Last()+1) {
			if want := a.Contains(k) && b.Contains(k); x.Contains(k) != want {
				t.Fatalf("seed %d trial %d: %v ∩ %v = %v, which contains %016x: %v, want %v",
					seed, trial, a, b, x, uint64(k), x.Contains(k), want)
			}
		}
	}
}

// anchors are keys ranges are often built from, so that random ranges often
// share an end, touch or overlap, and reach the edges of the key space.
var anchors = []Key{0, 1, 2, 10, 11, 20, 1<<63 - 1, 1 << 63, MaxKey - 1, MaxKey}

func randKey(rng *rand.Rand) Key {
	if rng.Intn(3) > 0 {
		return anchors[rng.Intn(len(anchors))]
	}
	return Key(rng.Uint64())
}

// randRange returns a random range, usually valid; about one in ten ends at
// 2^64 (End 0) and one in forty is Full.
func randRange(rng *rand.Rand) Range {
	switch rng.Intn(40) {
	case 0:
		return Full
	case 1, 2, 3, 4:
		return Range{randKey(rng), 0}
	case 5:
		return Range{MaxKey, 0}
	case 6: // possibly invalid: empty or reversed
		k := randKey(rng)
		return Range{k, k - Key(rng.Intn(2))}
	}
	a, b := randKey(rng), randKey(rng)
	if a > b {
		a, b = b, a
	}
	if a == b {
		if b == MaxKey {
			return Range{a, 0}
		}
		b++
	}
	return Range{a, b}
}

func randValidRange(rng *rand.Rand) Range {
	for {
		if r := randRange(rng); r.Valid() {
			return r
		}
	}
}

// interestingKeys returns the keys at which the membership of any of rs can
// change — every Start and Last and the keys just outside them — plus the
// edges of the key space, the anchors and a few random keys. Two unions of
// ranges from rs hold the same keys if and only if they agree on these.
func interestingKeys(rng *rand.Rand, rs []Range) []Key {
	keys := append([]Key{0, 1, MaxKey - 1, MaxKey, Key(rng.Uint64()), Key(rng.Uint64())}, anchors...)
	for _, r := range rs {
		keys = append(keys, r.Start, r.Start-1, r.Start+1, r.End, r.End-1)
	}
	return keys
}
