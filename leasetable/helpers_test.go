package leasetable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// t0 is the fixed start of every test clock.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// r is shorthand for a range in tests.
func r(start, end keyspace.Key) keyspace.Range { return keyspace.Range{Start: start, End: end} }

// own is shorthand for an owned entry.
func own(owner string, lgn keyspace.LGN) Entry {
	return Entry{Owner: owner, Addr: owner + ":7000", LGN: lgn}
}

// migrated is shorthand for a migrated grant; from may be 0.
func migrated(owner string, lgn, from keyspace.LGN) Entry {
	e := own(owner, lgn)
	e.Migrated, e.MigratedFrom = true, from
	return e
}

// seeds returns the seeds a randomized test runs with. A failing seed is in
// the subtest's name, so `go test -run 'TestX/seed=17'` replays it.
func seeds(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func forSeeds(t *testing.T, n int, f func(t *testing.T, rng *rand.Rand)) {
	t.Helper()
	if testing.Short() {
		n = min(n, 5)
	}
	for _, seed := range seeds(n) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			f(t, rand.New(rand.NewPCG(seed, 0x1ea5e401d)))
		})
	}
}

// pool is a set of "interesting" keys, sorted, starting at 0. Random ranges
// start and end on pool keys only, so the table's content is constant on each
// elementary interval [pool[i], pool[i+1]) and a model needs one Entry per
// pool key.
type pool []keyspace.Key

func newPool(rng *rand.Rand, extra int) pool {
	p := pool{0, 1, 2, 3, 10, 11, 100, 1 << 32, 1 << 63, keyspace.MaxKey - 1, keyspace.MaxKey}
	for range extra {
		p = append(p, keyspace.Key(rng.Uint64()))
	}
	slices.Sort(p)
	return slices.Compact(p)
}

// randRange returns a valid range with both ends on pool keys (End may be 0,
// the end of the key space). Short ranges are likelier, as in real tables.
func (p pool) randRange(rng *rand.Rand) keyspace.Range {
	a := rng.IntN(len(p))
	var b int
	if rng.IntN(3) == 0 {
		b = a + 1 + rng.IntN(len(p)-a) // anywhere after a, or the end
	} else {
		b = a + 1 + rng.IntN(min(3, len(p)-a))
	}
	if b >= len(p) {
		return r(p[a], 0)
	}
	return r(p[a], p[b])
}

// indexes returns the pool indexes whose elementary interval lies in rg.
func (p pool) indexes(rg keyspace.Range) []int {
	var out []int
	for i, k := range p {
		if rg.Contains(k) {
			out = append(out, i)
		}
	}
	return out
}

// model is the reference lease table: one Entry per pool key.
type model struct {
	p    pool
	ents []Entry
}

func newModel(p pool) *model { return &model{p: p, ents: make([]Entry, len(p))} }

func (m *model) set(rg keyspace.Range, e Entry) {
	for _, i := range m.p.indexes(rg) {
		m.ents[i] = e
	}
}

func (m *model) clone() *model { return &model{p: m.p, ents: slices.Clone(m.ents)} }

// segments returns the model's content in canonical form.
func (m *model) segments() []Segment {
	var out []Segment
	for i, e := range m.ents {
		if n := len(out); n > 0 && out[n-1].Entry == e {
			continue
		}
		if n := len(out); n > 0 {
			out[n-1].Range.End = m.p[i]
		}
		out = append(out, Segment{Range: r(m.p[i], 0), Entry: e})
	}
	return out
}

// checkPartition fails t unless segs is in canonical form.
func checkPartition(t *testing.T, what string, segs []Segment) {
	t.Helper()
	if err := validateSegments(segs); err != nil {
		t.Fatalf("%s: %v\n%v", what, err, segs)
	}
	for i := 1; i < len(segs); i++ {
		if segs[i].Entry == segs[i-1].Entry {
			t.Fatalf("%s: segments %d and %d not merged: %v, %v", what, i-1, i, segs[i-1], segs[i])
		}
	}
}

// checkCoalesced fails t unless rs is sorted, valid, and has no two
// overlapping or adjacent ranges.
func checkCoalesced(t *testing.T, what string, rs []keyspace.Range) {
	t.Helper()
	for i, x := range rs {
		if !x.Valid() {
			t.Fatalf("%s: range %d %v invalid in %v", what, i, x, rs)
		}
		if i > 0 && (rs[i-1].End == 0 || rs[i-1].End >= x.Start) {
			t.Fatalf("%s: ranges %v and %v not coalesced in %v", what, rs[i-1], x, rs)
		}
	}
}

// inRanges reports whether k lies in one of rs.
func inRanges(rs []keyspace.Range, k keyspace.Key) bool {
	for _, x := range rs {
		if x.Contains(k) {
			return true
		}
	}
	return false
}

// viewAt returns a view holding segs at LSN lsn, applied as a snapshot.
func viewAt(t *testing.T, lsn keyspace.LSN, segs []Segment) *View {
	t.Helper()
	v := NewView()
	if _, err := v.Apply(Update{To: lsn, Snapshot: true, Segments: segs}); err != nil {
		t.Fatalf("viewAt: %v", err)
	}
	return v
}

// mustCheck fails t if v's internal invariants are broken.
func mustCheck(t testing.TB, v *View) {
	t.Helper()
	if err := v.check(); err != nil {
		t.Fatal(err)
	}
}
