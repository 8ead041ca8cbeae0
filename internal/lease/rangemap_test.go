package lease

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// resModel is the reference for reservations: one time per elementary
// interval [pool[i], pool[i+1]) of a pool of keys (the last runs to the end
// of the key space). Every range the test uses starts and ends on pool
// keys, so the real map is constant on each interval.
type resModel struct {
	pool  []keyspace.Key
	until []time.Time
	// pending marks the intervals set to a non-zero time that due has not
	// reported since.
	pending []bool
}

func newResModel(pool []keyspace.Key) *resModel {
	return &resModel{pool: pool, until: make([]time.Time, len(pool)), pending: make([]bool, len(pool))}
}

// in returns the intervals r covers.
func (m *resModel) in(r keyspace.Range) []int {
	var out []int
	for i, k := range m.pool {
		if r.Contains(k) {
			out = append(out, i)
		}
	}
	return out
}

func (m *resModel) interval(i int) keyspace.Range {
	if i+1 < len(m.pool) {
		return keyspace.Range{Start: m.pool[i], End: m.pool[i+1]}
	}
	return keyspace.Range{Start: m.pool[i]}
}

func (m *resModel) set(r keyspace.Range, t time.Time) {
	for _, i := range m.in(r) {
		m.until[i], m.pending[i] = t, !t.IsZero()
	}
}

func (m *resModel) extend(r keyspace.Range, t time.Time) {
	for _, i := range m.in(r) {
		if m.until[i].Before(t) {
			m.until[i], m.pending[i] = t, true
		}
	}
}

// checkDue runs m.due(now) and fails t unless it reports every pending
// interval of the model that has run out, and only intervals that have.
func (ref *resModel) checkDue(t *testing.T, op int, m *reservations, now time.Time) {
	t.Helper()
	var got keyspace.RangeSet
	m.due(now, func(r keyspace.Range) {
		for _, i := range ref.in(r) {
			if u := ref.until[i]; u.IsZero() || u.After(now) {
				t.Fatalf("op %d: due(%v) reported %v, but %v is reserved until %v", op, now, r, ref.interval(i), u)
			}
			ref.pending[i] = false
		}
		got = got.Add(r)
	})
	for i := range ref.pool {
		if ref.pending[i] && !ref.until[i].After(now) && !got.CoversRange(ref.interval(i)) {
			t.Fatalf("op %d: due(%v) did not report %v, reserved until %v", op, now, ref.interval(i), ref.until[i])
		}
	}
	if next := m.nextEnd(now); !next.IsZero() && !next.After(now) {
		t.Fatalf("op %d: after due(%v), nextEnd is %v", op, now, next)
	}
}

// checkNextEnd fails t unless m.nextEnd(by) is the earliest end of a
// pending segment when that is no later than by, and otherwise a time
// after by and no later than it (zero: none pending). A segment joined to
// a pending neighbour with the same reservation is pending too (join), so
// m may have pending segments the model does not: the earliest end is
// taken from m's segments, and must be no later than the model's.
func (ref *resModel) checkNextEnd(t *testing.T, op int, m *reservations, by time.Time) {
	t.Helper()
	var want, model time.Time
	m.segs.all(func(s resSeg) bool {
		if pending(s) && (want.IsZero() || s.until.Before(want)) {
			want = s.until
		}
		return true
	})
	for i, u := range ref.until {
		if ref.pending[i] && (model.IsZero() || u.Before(model)) {
			model = u
		}
	}
	if !model.IsZero() && (want.IsZero() || want.After(model)) {
		t.Fatalf("op %d: the earliest pending end is %v, but the model has one at %v", op, want, model)
	}
	got := m.nextEnd(by)
	switch {
	case want.IsZero() && !got.IsZero():
		t.Fatalf("op %d: nextEnd(%v) = %v with nothing pending", op, by, got)
	case !want.IsZero() && !want.After(by) && !got.Equal(want):
		t.Fatalf("op %d: nextEnd(%v) = %v, want the earliest end %v", op, by, got, want)
	case want.After(by) && (!got.After(by) || got.After(want)):
		t.Fatalf("op %d: nextEnd(%v) = %v, want a time after it and no later than the earliest end %v", op, by, got, want)
	}
}

func (m *resModel) free(r keyspace.Range, now time.Time) (keyspace.RangeSet, time.Time) {
	var out keyspace.RangeSet
	var next time.Time
	for _, i := range m.in(r) {
		if u := m.until[i]; !u.After(now) {
			out = out.Add(m.interval(i))
		} else if next.IsZero() || u.Before(next) {
			next = u
		}
	}
	return out, next
}

// checkCanonical fails t unless m is sorted segments from key 0 with
// adjacent values different, and keeps its other invariants.
func checkCanonical(t *testing.T, m *reservations) {
	t.Helper()
	starts, until := m.segments()
	if len(starts) == 0 || len(starts) != len(until) || starts[0] != 0 {
		t.Fatalf("not canonical: starts %v until %v", starts, until)
	}
	for i := 1; i < len(starts); i++ {
		if starts[i] <= starts[i-1] {
			t.Fatalf("starts not increasing at %d: %v", i, starts)
		}
		if until[i].Equal(until[i-1]) {
			t.Fatalf("segments %d and %d not merged: %v", i-1, i, until[i])
		}
	}
	if err := m.check(); err != nil {
		t.Fatal(err)
	}
}

// checkSame fails t unless m agrees with the model on every interval.
func checkSame(t *testing.T, m *reservations, ref *resModel) {
	t.Helper()
	checkCanonical(t, m)
	starts, _ := m.segments()
	for _, s := range starts {
		if !slices.Contains(ref.pool, s) {
			t.Fatalf("segment starts at %d, not a pool key", s)
		}
	}
	for i, k := range ref.pool {
		if got := m.segs.at(m.find(k)).until; !got.Equal(ref.until[i]) {
			t.Fatalf("interval %v reserved until %v, want %v", ref.interval(i), got, ref.until[i])
		}
	}
}

func TestReservationsExamples(t *testing.T) {
	t1, t2 := base.Add(time.Second), base.Add(2*time.Second)
	r := func(s, e keyspace.Key) keyspace.Range { return keyspace.Range{Start: s, End: e} }
	tests := []struct {
		name   string
		do     func(m *reservations)
		starts []keyspace.Key
		until  []time.Time
	}{
		{"new is one free segment", func(m *reservations) {}, []keyspace.Key{0}, []time.Time{{}}},
		{"set middle", func(m *reservations) { m.set(r(10, 20), t1) },
			[]keyspace.Key{0, 10, 20}, []time.Time{{}, t1, {}}},
		{"set to the end", func(m *reservations) { m.set(r(10, 0), t1) },
			[]keyspace.Key{0, 10}, []time.Time{{}, t1}},
		{"set the last key", func(m *reservations) { m.set(r(keyspace.MaxKey, 0), t1) },
			[]keyspace.Key{0, keyspace.MaxKey}, []time.Time{{}, t1}},
		{"set everything", func(m *reservations) { m.set(r(10, 20), t1); m.set(keyspace.Full, t2) },
			[]keyspace.Key{0}, []time.Time{t2}},
		{"clear merges", func(m *reservations) { m.set(r(10, 20), t1); m.set(r(10, 20), time.Time{}) },
			[]keyspace.Key{0}, []time.Time{{}}},
		{"adjacent equal merge", func(m *reservations) { m.set(r(10, 20), t1); m.set(r(20, 30), t1) },
			[]keyspace.Key{0, 10, 30}, []time.Time{{}, t1, {}}},
		{"extend keeps later", func(m *reservations) { m.set(r(10, 20), t2); m.extend(r(0, 30), t1) },
			[]keyspace.Key{0, 10, 20, 30}, []time.Time{t1, t2, t1, {}}},
		{"equal times are merged whatever their location", func(m *reservations) {
			m.set(r(10, 20), t1)
			m.set(r(20, 30), t1.In(time.FixedZone("x", 3600)))
		}, []keyspace.Key{0, 10, 30}, []time.Time{{}, t1, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newReservations()
			tc.do(m)
			checkCanonical(t, m)
			starts, until := m.segments()
			if !slices.Equal(starts, tc.starts) || !slices.EqualFunc(until, tc.until, time.Time.Equal) {
				t.Fatalf("got starts %v until %v, want %v %v", starts, until, tc.starts, tc.until)
			}
		})
	}
}

func kr(s, e keyspace.Key) keyspace.Range { return keyspace.Range{Start: s, End: e} }

func TestReservationsFree(t *testing.T) {
	m := newReservations()
	t1, t2 := base.Add(time.Second), base.Add(2*time.Second)
	m.set(keyspace.Range{Start: 10, End: 20}, t1)
	m.set(keyspace.Range{Start: 20, End: 30}, t2)
	tests := []struct {
		name string
		r    keyspace.Range
		now  time.Time
		free []keyspace.Range
		next time.Time
	}{
		{"before both", keyspace.Full, base, []keyspace.Range{kr(0, 10), kr(30, 0)}, t1},
		{"at the first end", keyspace.Full, t1, []keyspace.Range{kr(0, 20), kr(30, 0)}, t2},
		{"just before the first end", keyspace.Full, t1.Add(-1), []keyspace.Range{kr(0, 10), kr(30, 0)}, t1},
		{"after both", keyspace.Full, t2, []keyspace.Range{keyspace.Full}, time.Time{}},
		{"clipped", keyspace.Range{Start: 15, End: 25}, base, nil, t1},
		{"clipped, later only", keyspace.Range{Start: 25, End: 35}, t1, []keyspace.Range{kr(30, 35)}, t2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			free, next := m.free(tc.r, tc.now)
			if !slices.Equal(free.Ranges(), tc.free) || !next.Equal(tc.next) {
				t.Fatalf("free(%v, %v) = %v, %v; want %v, %v", tc.r, tc.now, free, next, tc.free, tc.next)
			}
		})
	}
}

// TestReservationsModel runs random set/extend/free/each/due against the
// reference model, on a few keys (small and large ones, where edge cases
// are) and on many (so that the ordered sets split and merge chunks). A
// failing seed is in the subtest name. The tiny chunks' runs, which compare
// the whole map with the model after each of 3,000 operations, are a tenth
// of the few keys' seeds (5; a fifth, 10, cost 5 s of CPU on 2 cores).
func TestReservationsModel(t *testing.T) {
	seeds := 50
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { reservationsModel(t, seed, 6, 300) })
	}
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("many/seed=%d", seed), func(t *testing.T) { reservationsModel(t, seed, 3000, 6000) })
	}
	defer tinyChunks()()
	for seed := range uint64(max(seeds/10, 1)) {
		t.Run(fmt.Sprintf("tiny-chunks/seed=%d", seed), func(t *testing.T) { reservationsModel(t, seed, 300, 3000) })
	}
}

// tinyChunks makes the ordered sets' chunks tiny, so that splits, merges
// and emptied chunks come every few operations; it returns the undo.
func tinyChunks() func() {
	old := maxChunk
	maxChunk = 8
	return func() { maxChunk = old }
}

func reservationsModel(t *testing.T, seed uint64, keys, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x7e5e))
	pool := []keyspace.Key{0, 1, 2, 10, 1 << 32, 1 << 63, keyspace.MaxKey - 1, keyspace.MaxKey}
	for range keys {
		pool = append(pool, keyspace.Key(rng.Uint64()))
	}
	slices.Sort(pool)
	pool = slices.Compact(pool)
	randRange := func() keyspace.Range {
		a := rng.IntN(len(pool))
		b := a + 1 + rng.IntN(len(pool)-a)
		if keys > 100 && rng.IntN(300) != 0 {
			b = min(a+1+rng.IntN(3), len(pool)) // mostly short ranges, so segments pile up
		}
		if b == len(pool) {
			return keyspace.Range{Start: pool[a]}
		}
		return keyspace.Range{Start: pool[a], End: pool[b]}
	}
	// Few distinct times, so that equal neighbours must merge.
	times := 4
	if keys > 100 {
		times = 400
	}
	randTime := func() time.Time {
		if rng.IntN(5) == 0 {
			return time.Time{}
		}
		return base.Add(time.Duration(rng.IntN(times)) * time.Second)
	}

	m, ref := newReservations(), newResModel(pool)
	most := 0
	for op := range ops {
		r, tt := randRange(), randTime()
		if rng.IntN(3) == 0 {
			// Exactly one segment, as most renewals are.
			p := m.find(pool[rng.IntN(len(pool))])
			r = keyspace.Range{Start: m.segs.at(p).start, End: m.endOf(p)}
		}
		switch rng.IntN(5) {
		case 0:
			m.set(r, tt)
			ref.set(r, tt)
		case 1:
			m.extend(r, tt)
			ref.extend(r, tt)
		case 2:
			free, next := m.free(r, tt)
			wfree, wnext := ref.free(r, tt)
			if !free.Equal(wfree) || !next.Equal(wnext) {
				t.Fatalf("op %d: free(%v, %v) = %v, %v; want %v, %v", op, r, tt, free, next, wfree, wnext)
			}
			ref.checkNextEnd(t, op, m, tt)
		case 3:
			var got keyspace.RangeSet
			var prev keyspace.Range
			m.each(r, func(p keyspace.Range, u time.Time) {
				if !r.Covers(p) || (got.Len() > 0 && p.Start != prev.End) {
					t.Fatalf("op %d: each(%v) gave %v after %v", op, r, p, prev)
				}
				for _, i := range ref.in(p) {
					if !ref.until[i].Equal(u) {
						t.Fatalf("op %d: each(%v) gave %v until %v, model says %v on %v", op, r, p, u, ref.until[i], ref.interval(i))
					}
				}
				got, prev = got.Add(p), p
			})
			if !got.Equal(keyspace.NewRangeSet(r)) {
				t.Fatalf("op %d: each(%v) covered %v", op, r, got)
			}
		case 4:
			// The clock only goes forward in the Core, but due must not
			// lose anything if asked about an earlier time.
			ref.checkDue(t, op, m, tt)
		}
		if keys <= 300 || op%50 == 0 || op == ops-1 {
			checkSame(t, m, ref)
		}
		most = max(most, m.segs.Len())
	}
	if keys > 100 && most < 4*maxChunk {
		t.Fatalf("at most %d segments: the chunks were not exercised", most)
	}
}

// TestOrderedModel runs random inserts, deletes, range deletes and walks on
// an ordered set of ints against a sorted slice, through enough elements
// that chunks split, merge and empty: three seeds with the chunks' size,
// three with tiny chunks.
func TestOrderedModel(t *testing.T) {
	for seed := range uint64(6) {
		if seed == 3 {
			defer tinyChunks()()
		}
		t.Run(fmt.Sprintf("seed=%d/chunk=%d", seed, maxChunk), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x0de7))
			o := newOrdered(func(a, b int) int { return a - b })
			var ref []int
			most, chunks := 0, 0
			// Mostly inserts for the first half, so the set grows to
			// thousands; mostly deletes after, so chunks shrink and merge.
			grow := 70 // percent of inserts
			for op := range 20000 {
				if op == 10000 {
					grow = 20
				}
				k := rng.IntN(20000)
				if len(ref) > 0 && rng.IntN(4) == 0 {
					k = ref[len(ref)-1] + 1 + rng.IntN(3) // after the last, as a clock's times come
				}
				switch x := rng.IntN(100); {
				case x < grow:
					o.insert(k)
					if i, found := slices.BinarySearch(ref, k); !found {
						ref = slices.Insert(ref, i, k)
					}
				case x < 90:
					i, found := slices.BinarySearch(ref, k)
					if got := o.delete(k); got != found {
						t.Fatalf("op %d: delete(%d) = %v, want %v", op, k, got, found)
					}
					if found {
						ref = slices.Delete(ref, i, i+1)
					}
				case x < 92:
					hi := k + rng.IntN(600)
					got := o.deleteRange(k, func(e int) bool { return e < hi })
					i, _ := slices.BinarySearch(ref, k)
					j, _ := slices.BinarySearch(ref, hi)
					if got != j-i {
						t.Fatalf("op %d: deleteRange(%d, <%d) removed %d, want %d", op, k, hi, got, j-i)
					}
					ref = slices.Delete(ref, i, j)
				default:
					// Walk forward and back from k.
					p, found := o.search(k)
					i, wfound := slices.BinarySearch(ref, k)
					if found != wfound {
						t.Fatalf("op %d: search(%d) found %v, want %v", op, k, found, wfound)
					}
					for j := i; j < min(i+300, len(ref)); j++ {
						if o.end(p) || *o.at(p) != ref[j] {
							t.Fatalf("op %d: walking from %d, element %d is wrong", op, k, j)
						}
						p = o.next(p)
					}
					if p, _ = o.search(k); i > 0 {
						q, ok := o.prev(p)
						if !ok || *o.at(q) != ref[i-1] {
							t.Fatalf("op %d: prev of %d is not %d", op, k, ref[i-1])
						}
					} else if _, ok := o.prev(p); ok {
						t.Fatalf("op %d: an element before the first", op)
					}
				}
				if err := o.check(); err != nil {
					t.Fatalf("op %d: %v", op, err)
				}
				if o.Len() != len(ref) {
					t.Fatalf("op %d: %d elements, want %d", op, o.Len(), len(ref))
				}
				most, chunks = max(most, o.Len()), max(chunks, len(o.chunks))
				if f, ok := o.first(); ok != (len(ref) > 0) || (ok && f != ref[0]) {
					t.Fatalf("op %d: first = %d, %v", op, f, ok)
				}
			}
			if chunks < 8 || len(o.chunks) >= chunks {
				t.Fatalf("at most %d elements in %d chunks, %d chunks at the end: splits and merges not exercised", most, chunks, len(o.chunks))
			}
		})
	}
}

// TestReservationsJoinMovesSegment: setting a whole segment to the
// reservation of the next one joins them; when that join empties the
// segment's chunk down to it and the chunk merges into the one before, the
// segment moves, and the check of the segment before it must find the
// real one, not the segment itself (it would then be joined into a
// neighbour with another reservation).
func TestReservationsJoinMovesSegment(t *testing.T) {
	defer tinyChunks()()
	t1, t2, t3, t4 := base.Add(time.Second), base.Add(2*time.Second), base.Add(3*time.Second), base.Add(4*time.Second)
	m := newReservations()
	alt := func(i int) time.Time { return []time.Time{t1, t4}[i%2] }
	seg := func(k keyspace.Key, t time.Time) resSeg { return resSeg{start: k, until: t, queued: t} }
	m.segs.chunks = [][]resSeg{
		{seg(0, t1), seg(10, t4), seg(20, t1)}, // room for more
		{seg(30, t2), seg(40, t3)},             // the segment set, and the next one
		{},                                     // full
	}
	for i := range maxChunk {
		m.segs.chunks[2] = append(m.segs.chunks[2], seg(keyspace.Key(50+10*i), alt(i)))
	}
	m.segs.n = 0
	m.segs.all(func(s resSeg) bool {
		m.segs.n++
		m.ends.insert(resEnd{s.queued, s.start})
		return true
	})
	checkCanonical(t, m)
	m.set(kr(30, 40), t3)
	checkCanonical(t, m)
	starts, until := m.segments()
	if i := slices.Index(starts, 30); i < 0 || !until[i].Equal(t3) || slices.Contains(starts, 40) || !until[i-1].Equal(t1) {
		t.Fatalf("after setting [30, 40) to the next segment's reservation: starts %v until %v; want [30, 50) reserved until %v after [20, 30) until %v",
			starts, until, t3.Sub(base), t1.Sub(base))
	}
}
