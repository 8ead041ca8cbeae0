package assign

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/quick"

	"github.com/cespare/xxhash/v2"

	"github.com/leasehold/leasehold/keyspace"
)

// policies are the configurations the generic tests run against.
var policies = []struct {
	name string
	p    Policy
}{
	{"ConsistentHash", ConsistentHash{}},
	{"ConsistentHash/VNodes=3", ConsistentHash{VNodes: 3}},
	{"Fixed", Fixed{}},
	{"Fixed/Pieces=7", Fixed{Pieces: 7}},
	{"Fixed/Pieces=1", Fixed{Pieces: 1}},
}

// randMembers returns n members with distinct random IDs, some with a
// capacity other than 1.
func randMembers(rng *rand.Rand, n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("owner-%d-%x", i, rng.Uint32())}
		if rng.Intn(4) == 0 {
			ms[i].Capacity = []float64{0.5, 2, 1.3}[rng.Intn(3)]
		}
	}
	return ms
}

func shuffled(rng *rand.Rand, ms []Member) []Member {
	out := slices.Clone(ms)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func namesOf(ms []Member) map[string]bool {
	out := make(map[string]bool, len(ms))
	for _, m := range ms {
		out[m.ID] = true
	}
	return out
}

// segmentsPerOwner counts each owner's segments.
func segmentsPerOwner(a Assignment) map[string]int {
	out := map[string]int{}
	for _, s := range a {
		out[s.Owner]++
	}
	return out
}

// sharesOf returns each owner's number of keys.
func sharesOf(a Assignment) map[string]float64 {
	out := map[string]float64{}
	for _, s := range a {
		out[s.Owner] += s.Range.Size()
	}
	return out
}

func TestAssignValidAndOrderIndependent(t *testing.T) {
	const seed = 1
	rng := rand.New(rand.NewSource(seed))
	for trial := range 300 {
		n := 1 + rng.Intn(50)
		ms := randMembers(rng, n)
		for _, pc := range policies {
			a := pc.p.Assign(ms)
			if err := a.Validate(); err != nil {
				t.Fatalf("seed %d trial %d %s, %d members: %v", seed, trial, pc.name, n, err)
			}
			names := namesOf(ms)
			for i, s := range a {
				if !names[s.Owner] {
					t.Fatalf("seed %d trial %d %s: segment %d %v assigned to non-member %q", seed, trial, pc.name, i, s.Range, s.Owner)
				}
			}
			if b := pc.p.Assign(shuffled(rng, ms)); !slices.Equal(a, b) {
				t.Fatalf("seed %d trial %d %s: assignment depends on member order:\n%v\n%v", seed, trial, pc.name, a, b)
			}
		}
	}
}

func TestAssignDoesNotModifyMembers(t *testing.T) {
	ms := []Member{{ID: "c"}, {ID: "a", Capacity: -1}, {ID: ""}, {ID: "b", Capacity: 2}, {ID: "a"}}
	orig := slices.Clone(ms)
	for _, pc := range policies {
		pc.p.Assign(ms)
		if !slices.Equal(ms, orig) {
			t.Fatalf("%s modified its input: %v, was %v", pc.name, ms, orig)
		}
	}
}

func TestAssignNoMembers(t *testing.T) {
	for _, pc := range policies {
		for _, ms := range [][]Member{nil, {}, {{ID: ""}}, {{ID: "", Capacity: 3}, {ID: ""}}} {
			a := pc.p.Assign(ms)
			if a != nil {
				t.Errorf("%s.Assign(%v) = %v, want nil", pc.name, ms, a)
			}
			if err := a.Validate(); err != nil {
				t.Errorf("empty assignment: Validate() = %v", err)
			}
			if got := a.Owner(12345); got != "" {
				t.Errorf("empty assignment: Owner = %q, want \"\"", got)
			}
		}
	}
}

func TestConsistentHashThreeOwners(t *testing.T) {
	a := ConsistentHash{}.Assign([]Member{{ID: "alpha"}, {ID: "beta"}, {ID: "gamma"}})
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(a) != 3*DefaultVNodes {
		t.Fatalf("got %d segments, want %d", len(a), 3*DefaultVNodes)
	}
	for _, id := range []string{"alpha", "beta", "gamma"} {
		if n := segmentsPerOwner(a)[id]; n != DefaultVNodes {
			t.Errorf("%s has %d segments, want %d", id, n, DefaultVNodes)
		}
	}
	// The construction: segment j > 0 starts at the j'th point, and the
	// first segment runs from 0 to the second point.
	if a[0].Range.Start != 0 || a[len(a)-1].Range.End != 0 {
		t.Errorf("first %v, last %v: want to start at 0 and end at 2^64", a[0], a[len(a)-1])
	}
	for j, s := range a[1:] {
		if !slices.ContainsFunc(allPoints(s.Owner, DefaultVNodes), func(k keyspace.Key) bool { return k == s.Range.Start }) {
			t.Errorf("segment %d %v does not start at a point of its owner", j+1, s)
		}
	}
}

func allPoints(id string, n int) []keyspace.Key {
	out := make([]keyspace.Key, n)
	for i := range out {
		out[i] = VNodeKey(id, i)
	}
	return out
}

// alphaZero is xxhash64("alpha#0"), computed once (and checked against an
// independent xxh64 implementation).
const alphaZero = 0x75c176dcdcb017b0

func TestVNodeKey(t *testing.T) {
	for _, c := range []struct {
		id string
		i  int
	}{{"alpha", 0}, {"alpha", 63}, {"", 7}, {"owner-12", 1000}} {
		want := keyspace.Key(xxhash.Sum64String(c.id + "#" + strconv.Itoa(c.i)))
		if got := VNodeKey(c.id, c.i); got != want {
			t.Errorf("VNodeKey(%q, %d) = %016x, want %016x", c.id, c.i, uint64(got), uint64(want))
		}
	}
	// A literal, so that a change of hash or of the point's name breaks this
	// test rather than silently reshuffling every deployment.
	if got, want := VNodeKey("alpha", 0), keyspace.Key(alphaZero); got != want {
		t.Errorf("VNodeKey(\"alpha\", 0) = %#016x, want %#016x", uint64(got), uint64(want))
	}
}

// refPoint is a virtual node in the reference implementation.
type refPoint struct {
	key   keyspace.Key
	id    string
	index int
}

// refOwner is the consistent-hashing rule written directly from the spec: the
// owner of k is the owner of the greatest point ≤ k (first in tie order), or
// of the first point when k is below every point.
func refOwner(pts []refPoint, k keyspace.Key) string {
	best := -1
	for i, p := range pts {
		if p.key <= k && (best < 0 || p.key > pts[best].key) {
			best = i
		}
	}
	if best < 0 {
		best = 0
	}
	return pts[best].id
}

func refPoints(ms []Member, vnodes int) []refPoint {
	var pts []refPoint
	for _, m := range ms {
		c := m.Capacity
		if c <= 0 {
			c = 1
		}
		n := max(1, int(math.Round(float64(vnodes)*c)))
		for i := range n {
			pts = append(pts, refPoint{VNodeKey(m.ID, i), m.ID, i})
		}
	}
	slices.SortFunc(pts, func(a, b refPoint) int {
		switch {
		case a.key != b.key:
			return cmpKey(a.key, b.key)
		case a.id != b.id:
			return strings.Compare(a.id, b.id)
		}
		return a.index - b.index
	})
	return pts
}

func cmpKey(a, b keyspace.Key) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// probeKeys returns keys worth checking for a: every segment's first and
// last key, the keys either side of each boundary, 0, MaxKey, and random keys.
func probeKeys(rng *rand.Rand, as ...Assignment) []keyspace.Key {
	keys := []keyspace.Key{0, 1, keyspace.MaxKey, keyspace.MaxKey - 1, 1 << 63}
	for _, a := range as {
		for _, s := range a {
			keys = append(keys, s.Range.Start, s.Range.Start-1, s.Range.Start+1, s.Range.Last())
		}
	}
	for range 200 {
		keys = append(keys, keyspace.Key(rng.Uint64()))
	}
	return keys
}

func TestConsistentHashMatchesReference(t *testing.T) {
	const seed = 2
	rng := rand.New(rand.NewSource(seed))
	for trial := range 40 {
		ms := randMembers(rng, 1+rng.Intn(20))
		vnodes := []int{1, 2, 5, DefaultVNodes}[rng.Intn(4)]
		a := ConsistentHash{VNodes: vnodes}.Assign(ms)
		pts := refPoints(ms, vnodes)
		distinct := len(slices.CompactFunc(slices.Clone(pts), func(x, y refPoint) bool { return x.key == y.key }))
		if len(a) != distinct {
			t.Fatalf("seed %d trial %d: %d segments, want one per distinct point: %d", seed, trial, len(a), distinct)
		}
		for _, k := range probeKeys(rng, a) {
			if got, want := a.Owner(k), refOwner(pts, k); got != want {
				t.Fatalf("seed %d trial %d: Owner(%016x) = %q, reference says %q", seed, trial, uint64(k), got, want)
			}
		}
	}
}

// TestConsistentHashTieRule checks the rule for two virtual nodes on one
// point, which hashing makes too rare to meet, on hand-built points: the
// first in tie order (owner ID, then index) owns the range, the other makes
// no segment.
func TestConsistentHashTieRule(t *testing.T) {
	ms := []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	pts := []point{
		{key: 500, member: 2, index: 0}, // c#0
		{key: 100, member: 1, index: 1}, // b#1
		{key: 100, member: 0, index: 3}, // a#3: ties with b#1 and wins
		{key: 900, member: 1, index: 0}, // b#0
		{key: 900, member: 1, index: 2}, // b#2: ties with b#0 and loses
		{key: 0, member: 2, index: 1},   // c#1 at key 0
		{key: 0, member: 2, index: 5},   // c#5: ties with c#1 and loses
	}
	got := ring(ms, pts)
	want := Assignment{
		{keyspace.Range{Start: 0, End: 100}, "c"},
		{keyspace.Range{Start: 100, End: 500}, "a"},
		{keyspace.Range{Start: 500, End: 900}, "c"},
		{keyspace.Range{Start: 900, End: 0}, "b"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ring = %v, want %v", got, want)
	}
	// Without the point at 0, the first point's segment starts at 0.
	got = ring(ms, []point{{key: 700, member: 0}, {key: 700, member: 1}, {key: 300, member: 2}})
	want = Assignment{
		{keyspace.Range{Start: 0, End: 700}, "c"},
		{keyspace.Range{Start: 700, End: 0}, "a"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ring = %v, want %v", got, want)
	}
	// Duplicate member IDs give the points of one member.
	a := ConsistentHash{VNodes: 4}.Assign([]Member{{ID: "x"}, {ID: "x"}, {ID: "y"}})
	if n := segmentsPerOwner(a)["x"]; n != 4 || len(a) != 8 {
		t.Errorf("duplicate member: %d segments for x of %d, want 4 of 8", n, len(a))
	}
}

func TestConsistentHashAddMovesKeysOnlyToNewMember(t *testing.T) {
	const seed = 3
	rng := rand.New(rand.NewSource(seed))
	for trial := range 100 {
		ms := randMembers(rng, 1+rng.Intn(30))
		x := Member{ID: fmt.Sprintf("new-%x", rng.Uint64())}
		if rng.Intn(3) == 0 {
			x.Capacity = 2
		}
		p := ConsistentHash{VNodes: []int{1, 8, DefaultVNodes}[rng.Intn(3)]}
		before := p.Assign(ms)
		after := p.Assign(append(shuffled(rng, ms), x))
		gained := 0
		for _, k := range probeKeys(rng, before, after) {
			was, is := before.Owner(k), after.Owner(k)
			if is != was && is != x.ID {
				t.Fatalf("seed %d trial %d: adding %s moved key %016x from %s to %s", seed, trial, x.ID, uint64(k), was, is)
			}
			if is == x.ID {
				gained++
			}
		}
		if gained == 0 {
			t.Fatalf("seed %d trial %d: new member %s owns none of the probed keys", seed, trial, x.ID)
		}
	}
}

func TestConsistentHashRemoveMovesOnlyRemovedMembersKeys(t *testing.T) {
	const seed = 4
	rng := rand.New(rand.NewSource(seed))
	for trial := range 100 {
		ms := randMembers(rng, 2+rng.Intn(30))
		gone := rng.Intn(len(ms))
		rest := slices.Delete(slices.Clone(ms), gone, gone+1)
		p := ConsistentHash{VNodes: []int{1, 8, DefaultVNodes}[rng.Intn(3)]}
		before := p.Assign(ms)
		after := p.Assign(rest)
		for _, k := range probeKeys(rng, before, after) {
			was, is := before.Owner(k), after.Owner(k)
			if is == ms[gone].ID {
				t.Fatalf("seed %d trial %d: removed member %s still owns %016x", seed, trial, ms[gone].ID, uint64(k))
			}
			if is != was && was != ms[gone].ID {
				t.Fatalf("seed %d trial %d: removing %s moved key %016x from %s to %s", seed, trial, ms[gone].ID, uint64(k), was, is)
			}
		}
	}
}

func TestConsistentHashBalance(t *testing.T) {
	const seed = 5
	rng := rand.New(rand.NewSource(seed))
	const lo, hi = 0.5, 1.6
	worstLo, worstHi := math.Inf(1), 0.0
	for trial := range 50 {
		ms := make([]Member, 10)
		for i := range ms {
			ms[i] = Member{ID: fmt.Sprintf("owner-%d-%x", i, rng.Uint32())}
		}
		a := ConsistentHash{}.Assign(ms)
		shares := sharesOf(a)
		total := 0.0
		for _, s := range shares {
			total += s
		}
		if math.Abs(total-math.Exp2(64))/math.Exp2(64) > 1e-9 {
			t.Fatalf("trial %d: shares add up to %g keys, want 2^64", trial, total)
		}
		mean := total / float64(len(ms))
		for _, m := range ms {
			r := shares[m.ID] / mean
			worstLo, worstHi = min(worstLo, r), max(worstHi, r)
			if r < lo || r > hi {
				t.Errorf("seed %d trial %d: %s holds %.3f of the mean share, want within [%g, %g]", seed, trial, m.ID, r, lo, hi)
			}
		}
	}
	t.Logf("10 owners × %d virtual nodes, 50 memberships: shares between %.3f and %.3f of the mean", DefaultVNodes, worstLo, worstHi)
}

func TestConsistentHashCapacity(t *testing.T) {
	for _, c := range []struct {
		capacity float64
		vnodes   int
		want     int
	}{
		{0, 0, DefaultVNodes},
		{1, 0, DefaultVNodes},
		{2, 0, 2 * DefaultVNodes},
		{0.5, 0, DefaultVNodes / 2},
		{1.5, 10, 15},
		{0.26, 10, 3}, // round(2.6)
		{0.001, 0, 1}, // at least one
		{-3, 0, DefaultVNodes},
		{math.NaN(), 0, DefaultVNodes},
		{2, -5, 2 * DefaultVNodes}, // negative VNodes means the default
	} {
		a := ConsistentHash{VNodes: c.vnodes}.Assign([]Member{{ID: "big", Capacity: c.capacity}, {ID: "one"}})
		if err := a.Validate(); err != nil {
			t.Fatal(err)
		}
		perOwner := segmentsPerOwner(a)
		if got := perOwner["big"]; got != c.want {
			t.Errorf("VNodes %d, Capacity %g: %d segments, want %d", c.vnodes, c.capacity, got, c.want)
		}
		wantOne := c.vnodes
		if wantOne <= 0 {
			wantOne = DefaultVNodes
		}
		if got := perOwner["one"]; got != wantOne {
			t.Errorf("VNodes %d: the capacity-1 member has %d segments, want %d", c.vnodes, got, wantOne)
		}
	}
	// A capacity-2 member holds about twice the keys of a capacity-1 member
	// on average over many memberships.
	rng := rand.New(rand.NewSource(6))
	var big, small float64
	for range 50 {
		ms := []Member{{ID: fmt.Sprintf("b-%x", rng.Uint64()), Capacity: 2}, {ID: fmt.Sprintf("s-%x", rng.Uint64())}}
		sh := sharesOf(ConsistentHash{}.Assign(ms))
		big += sh[ms[0].ID]
		small += sh[ms[1].ID]
	}
	if r := big / small; r < 1.6 || r > 2.5 {
		t.Errorf("capacity 2 vs 1: share ratio %.3f, want about 2", r)
	}
}

func TestDuplicateIDs(t *testing.T) {
	// Duplicates collapse into one member with the largest capacity,
	// whatever their order.
	want := ConsistentHash{}.Assign([]Member{{ID: "a", Capacity: 2}, {ID: "b"}})
	for _, ms := range [][]Member{
		{{ID: "a"}, {ID: "a", Capacity: 2}, {ID: "b"}},
		{{ID: "a", Capacity: 2}, {ID: "b"}, {ID: "a", Capacity: math.NaN()}, {ID: "b"}},
		{{ID: "b"}, {ID: "a", Capacity: -1}, {ID: "a", Capacity: 2}, {ID: ""}},
	} {
		if got := (ConsistentHash{}).Assign(ms); !slices.Equal(got, want) {
			t.Errorf("Assign(%v) differs from the deduplicated assignment", ms)
		}
	}
}

func TestConsistentHashTenThousandMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("large membership")
	}
	rng := rand.New(rand.NewSource(7))
	ms := randMembers(rng, 10000)
	for i := range ms {
		ms[i].Capacity = 1
	}
	a := ConsistentHash{}.Assign(ms)
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	// 640,000 64-bit points collide with probability about 1e-8.
	if len(a) != 10000*DefaultVNodes {
		t.Errorf("got %d segments, want %d", len(a), 10000*DefaultVNodes)
	}
	if n := len(segmentsPerOwner(a)); n != 10000 {
		t.Errorf("%d owners hold segments, want 10000", n)
	}
}

func TestFixed(t *testing.T) {
	ms := []Member{{ID: "c"}, {ID: "a", Capacity: 5}, {ID: "b"}}
	a := Fixed{Pieces: 4}.Assign(ms)
	want := Assignment{
		{keyspace.Range{Start: 0, End: 1 << 62}, "a"},
		{keyspace.Range{Start: 1 << 62, End: 2 << 62}, "b"},
		{keyspace.Range{Start: 2 << 62, End: 3 << 62}, "c"},
		{keyspace.Range{Start: 3 << 62, End: 0}, "a"},
	}
	if !slices.Equal(a, want) {
		t.Errorf("Fixed{4}.Assign = %v, want %v", a, want)
	}
	if a := (Fixed{}).Assign(ms); len(a) != DefaultPieces {
		t.Errorf("Fixed{} gives %d pieces, want %d", len(a), DefaultPieces)
	}
	if a := (Fixed{Pieces: 1}).Assign(ms); !slices.Equal(a, Assignment{{keyspace.Full, "a"}}) {
		t.Errorf("Fixed{1}.Assign = %v, want the whole key space to a", a)
	}
	// Pieces are equal up to one key, whatever their number.
	for _, n := range []int{3, 5, 7, 16, 1000, 12345} {
		a := Fixed{Pieces: n}.Assign(ms)
		if err := a.Validate(); err != nil {
			t.Fatalf("Fixed{%d}: %v", n, err)
		}
		sizes := make([]uint64, len(a))
		for i, s := range a {
			sizes[i] = uint64(s.Range.Last()-s.Range.Start) + 1 // exact: no piece is the whole space
		}
		if d := slices.Max(sizes) - slices.Min(sizes); d > 1 {
			t.Errorf("Fixed{%d}: piece sizes differ by %d keys", n, d)
		}
		for i, s := range a {
			if want := ms[[]int{1, 2, 0}[i%3]].ID; s.Owner != want {
				t.Fatalf("Fixed{%d}: piece %d owned by %s, want %s", n, i, s.Owner, want)
			}
		}
	}
	// More members than pieces: the last members in ID order get nothing.
	if got := segmentsPerOwner(Fixed{Pieces: 2}.Assign(ms)); got["c"] != 0 || got["a"] != 1 || got["b"] != 1 {
		t.Errorf("Fixed{2} with 3 members: %v", got)
	}
}

func TestValidateRejects(t *testing.T) {
	r := func(s, e keyspace.Key) keyspace.Range { return keyspace.Range{Start: s, End: e} }
	for _, c := range []struct {
		name string
		a    Assignment
		want string // a substring of the error
	}{
		{"does not start at 0", Assignment{{r(1, 0), "a"}}, "segment 0 "},
		{"gap", Assignment{{r(0, 10), "a"}, {r(11, 0), "b"}}, "segment 1 "},
		{"overlap", Assignment{{r(0, 10), "a"}, {r(9, 0), "b"}}, "starts at 0000000000000009, want 000000000000000a"},
		{"unsorted", Assignment{{r(10, 0), "b"}, {r(0, 10), "a"}}, "segment 0 "},
		{"does not reach the end", Assignment{{r(0, 10), "a"}, {r(10, 20), "b"}}, "want the end of the key space"},
		{"empty segment", Assignment{{r(0, 10), "a"}, {r(10, 10), "b"}, {r(10, 0), "c"}}, "is empty"},
		{"no owner", Assignment{{r(0, 10), "a"}, {r(10, 0), ""}}, "no owner"},
		{"segments after the end", Assignment{{r(0, 0), "a"}, {r(0, 0), "b"}}, "1 segments follow"},
	} {
		err := c.a.Validate()
		switch {
		case err == nil:
			t.Errorf("%s: Validate(%v) = nil, want an error", c.name, c.a)
		case !errors.Is(err, ErrInvalidAssignment):
			t.Errorf("%s: %v does not wrap ErrInvalidAssignment", c.name, err)
		case !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.want)
		}
	}
	for _, a := range []Assignment{nil, {}, {{keyspace.Full, "a"}}, {{r(0, 1), "a"}, {r(1, 0), "a"}}} {
		if err := a.Validate(); err != nil {
			t.Errorf("Validate(%v) = %v, want nil", a, err)
		}
	}
}

// linearOwner is the reference for Assignment.Owner: a scan.
func linearOwner(a Assignment, k keyspace.Key) string {
	for _, s := range a {
		if s.Range.Contains(k) {
			return s.Owner
		}
	}
	return ""
}

// assignmentFromCuts builds a valid assignment whose segments start at 0
// and at each distinct non-zero cut, owned by a few owners in turn.
func assignmentFromCuts(cuts []uint64, owners uint8) Assignment {
	keys := []keyspace.Key{0}
	for _, c := range cuts {
		keys = append(keys, keyspace.Key(c))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	a := make(Assignment, len(keys))
	for i, k := range keys {
		a[i] = Segment{Range: keyspace.Range{Start: k}, Owner: "o" + strconv.Itoa(i%(1+int(owners%5)))}
		if i+1 < len(keys) {
			a[i].Range.End = keys[i+1]
		}
	}
	return a
}

func TestOwnerMatchesLinearScan(t *testing.T) {
	cfg := &quick.Config{MaxCount: 2000, Rand: rand.New(rand.NewSource(8))}
	f := func(cuts []uint64, owners uint8, k uint64, near uint16) bool {
		// quick's uint64s are spread over the whole range; add keys that
		// hug a boundary too.
		if len(cuts) > 0 && near%3 == 0 {
			cuts = append(cuts, uint64(keyspace.MaxKey), 1)
		}
		a := assignmentFromCuts(cuts, owners)
		if err := a.Validate(); err != nil {
			t.Logf("bad generated assignment: %v", err)
			return false
		}
		probes := []keyspace.Key{keyspace.Key(k), 0, keyspace.MaxKey}
		if len(cuts) > 0 {
			c := keyspace.Key(cuts[int(near)%len(cuts)])
			probes = append(probes, c, c-1, c+1)
		}
		for _, p := range probes {
			if got, want := a.Owner(p), linearOwner(a, p); got != want {
				t.Logf("%v: Owner(%016x) = %q, linear scan says %q", a, uint64(p), got, want)
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, cfg); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerOfPolicyOutputMatchesLinearScan(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for trial := range 12 {
		ms := randMembers(rng, 1+rng.Intn(20))
		for _, pc := range policies {
			a := pc.p.Assign(ms)
			for _, k := range probeKeys(rng, a) {
				if got, want := a.Owner(k), linearOwner(a, k); got != want {
					t.Fatalf("trial %d %s: Owner(%016x) = %q, linear scan says %q", trial, pc.name, uint64(k), got, want)
				}
			}
		}
	}
}

func BenchmarkConsistentHash500(b *testing.B) {
	benchmarkConsistentHash(b, 500)
}

func BenchmarkConsistentHash10000(b *testing.B) {
	benchmarkConsistentHash(b, 10000)
}

func benchmarkConsistentHash(b *testing.B, n int) {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("owner-%05d.pool.example:7000", i)}
	}
	p := ConsistentHash{}
	b.ReportAllocs()
	for b.Loop() {
		p.Assign(ms)
	}
}

func BenchmarkOwner500(b *testing.B) {
	ms := make([]Member, 500)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("owner-%05d", i)}
	}
	a := ConsistentHash{}.Assign(ms)
	keys := make([]keyspace.Key, 1024)
	for i := range keys {
		keys[i] = keyspace.KeyOf(strconv.Itoa(i))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a.Owner(keys[i%len(keys)])
	}
}

// TestSortPointsMatchesComparisonSort checks the radix sort against
// slices.SortFunc, with keys drawn from a small pool so that ties are common
// and from the whole range so that every byte matters.
func TestSortPointsMatchesComparisonSort(t *testing.T) {
	const seed = 10
	rng := rand.New(rand.NewSource(seed))
	for trial := range 200 {
		n := rng.Intn(3000)
		pool := make([]keyspace.Key, 1+rng.Intn(50))
		for i := range pool {
			switch rng.Intn(4) {
			case 0:
				pool[i] = keyspace.Key(rng.Intn(4)) // small keys share their top bytes
			case 1:
				pool[i] = keyspace.MaxKey - keyspace.Key(rng.Intn(4))
			default:
				pool[i] = keyspace.Key(rng.Uint64())
			}
		}
		pts := make([]point, n)
		for i := range pts {
			k := keyspace.Key(rng.Uint64())
			if rng.Intn(2) == 0 {
				k = pool[rng.Intn(len(pool))]
			}
			pts[i] = point{key: k, member: uint32(rng.Intn(10)), index: uint32(rng.Intn(100))}
		}
		want := slices.Clone(pts)
		slices.SortFunc(want, comparePoints)
		sortPoints(pts)
		if !slices.Equal(pts, want) {
			t.Fatalf("seed %d trial %d (%d points): radix sort differs from comparison sort", seed, trial, n)
		}
	}
}
