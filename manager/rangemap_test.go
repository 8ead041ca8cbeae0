package manager

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
}

func newResModel(pool []keyspace.Key) *resModel {
	return &resModel{pool: pool, until: make([]time.Time, len(pool))}
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
		m.until[i] = t
	}
}

func (m *resModel) extend(r keyspace.Range, t time.Time) {
	for _, i := range m.in(r) {
		if m.until[i].Before(t) {
			m.until[i] = t
		}
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
// adjacent values different.
func checkCanonical(t *testing.T, m *reservations) {
	t.Helper()
	if len(m.starts) == 0 || len(m.starts) != len(m.until) || m.starts[0] != 0 {
		t.Fatalf("not canonical: starts %v until %v", m.starts, m.until)
	}
	for i := 1; i < len(m.starts); i++ {
		if m.starts[i] <= m.starts[i-1] {
			t.Fatalf("starts not increasing at %d: %v", i, m.starts)
		}
		if m.until[i].Equal(m.until[i-1]) {
			t.Fatalf("segments %d and %d not merged: %v", i-1, i, m.until[i])
		}
	}
}

// checkSame fails t unless m agrees with the model on every interval.
func checkSame(t *testing.T, m *reservations, ref *resModel) {
	t.Helper()
	checkCanonical(t, m)
	for _, s := range m.starts {
		if !slices.Contains(ref.pool, s) {
			t.Fatalf("segment starts at %d, not a pool key", s)
		}
	}
	for i, k := range ref.pool {
		if got := m.until[m.index(k)]; !got.Equal(ref.until[i]) {
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
			if !slices.Equal(m.starts, tc.starts) || !slices.EqualFunc(m.until, tc.until, time.Time.Equal) {
				t.Fatalf("got starts %v until %v, want %v %v", m.starts, m.until, tc.starts, tc.until)
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

// TestReservationsModel runs random set/extend/free/each against the
// reference model. A failing seed is in the subtest name.
func TestReservationsModel(t *testing.T) {
	seeds := 50
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x7e5e))
			pool := []keyspace.Key{0, 1, 2, 10, 1 << 32, 1 << 63, keyspace.MaxKey - 1, keyspace.MaxKey}
			for range 6 {
				pool = append(pool, keyspace.Key(rng.Uint64()))
			}
			slices.Sort(pool)
			pool = slices.Compact(pool)
			randRange := func() keyspace.Range {
				a := rng.IntN(len(pool))
				b := a + 1 + rng.IntN(len(pool)-a)
				if b == len(pool) {
					return keyspace.Range{Start: pool[a]}
				}
				return keyspace.Range{Start: pool[a], End: pool[b]}
			}
			// Few distinct times, so that equal neighbours must merge.
			randTime := func() time.Time {
				if rng.IntN(5) == 0 {
					return time.Time{}
				}
				return base.Add(time.Duration(rng.IntN(4)) * time.Second)
			}

			m, ref := newReservations(), newResModel(pool)
			for op := range 300 {
				r, tt := randRange(), randTime()
				switch rng.IntN(4) {
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
				}
				checkSame(t, m, ref)
			}
		})
	}
}
