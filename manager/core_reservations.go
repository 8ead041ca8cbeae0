package manager

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// reservations maps every key to the manager-clock time until which it is
// reserved: no new grant may cover a key before its reservation ends
// (C§2.3.1). It is kept in canonical form: sorted segments covering the key
// space, adjacent equal values merged.
type reservations struct {
	starts []keyspace.Key
	until  []time.Time
}

func newReservations() *reservations {
	return &reservations{starts: []keyspace.Key{0}, until: []time.Time{{}}}
}

// index returns the segment containing k.
func (m *reservations) index(k keyspace.Key) int {
	lo, hi := 0, len(m.starts)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.starts[mid] <= k {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}

func (m *reservations) end(i int) keyspace.Key {
	if i+1 < len(m.starts) {
		return m.starts[i+1]
	}
	return 0
}

// split makes k the start of a segment (k > 0) and returns its index.
func (m *reservations) split(k keyspace.Key) int {
	i := m.index(k)
	if m.starts[i] == k {
		return i
	}
	m.starts = append(m.starts, 0)
	m.until = append(m.until, time.Time{})
	copy(m.starts[i+2:], m.starts[i+1:])
	copy(m.until[i+2:], m.until[i+1:])
	m.starts[i+1] = k
	m.until[i+1] = m.until[i]
	return i + 1
}

// set reserves r until t (a zero t clears the reservation).
func (m *reservations) set(r keyspace.Range, t time.Time) {
	i := m.split(r.Start)
	j := len(m.starts)
	if r.End != 0 {
		j = m.split(r.End)
		i = m.index(r.Start)
	}
	if j > i+1 { // r spans several segments: make them one
		m.starts = append(m.starts[:i+1], m.starts[j:]...)
		m.until = append(m.until[:i+1], m.until[j:]...)
	}
	m.until[i] = t
	m.merge(i)
}

// extend reserves r until at least t.
func (m *reservations) extend(r keyspace.Range, t time.Time) {
	m.each(r, func(p keyspace.Range, u time.Time) {
		if u.Before(t) {
			m.set(p, t)
		}
	})
}

func (m *reservations) merge(i int) {
	if i+1 < len(m.starts) && m.until[i+1].Equal(m.until[i]) {
		m.starts = append(m.starts[:i+1], m.starts[i+2:]...)
		m.until = append(m.until[:i+1], m.until[i+2:]...)
	}
	if i > 0 && m.until[i-1].Equal(m.until[i]) {
		m.starts = append(m.starts[:i], m.starts[i+1:]...)
		m.until = append(m.until[:i], m.until[i+1:]...)
	}
}

// each calls fn for every segment overlapping r, clipped to r. fn may call
// set or extend on the range it is given.
func (m *reservations) each(r keyspace.Range, fn func(keyspace.Range, time.Time)) {
	var parts []keyspace.Range
	var times []time.Time
	for i := m.index(r.Start); i < len(m.starts); i++ {
		seg := keyspace.Range{Start: m.starts[i], End: m.end(i)}
		p, ok := seg.Intersect(r)
		if !ok {
			break
		}
		parts = append(parts, p)
		times = append(times, m.until[i])
	}
	for i := range parts {
		fn(parts[i], times[i])
	}
}

// free returns the parts of r whose reservation has ended at now, and the
// earliest future end of a reservation within r (zero if none).
func (m *reservations) free(r keyspace.Range, now time.Time) (keyspace.RangeSet, time.Time) {
	var out keyspace.RangeSet
	var next time.Time
	m.each(r, func(p keyspace.Range, u time.Time) {
		if !u.After(now) {
			out = out.Add(p)
		} else if next.IsZero() || u.Before(next) {
			next = u
		}
	})
	return out, next
}
