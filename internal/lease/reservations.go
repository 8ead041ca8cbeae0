// Reservations (docs/design.md rules 3, 9 and 10): no key is granted
// before the Manager's reservation of it ends.

package lease

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// reservations maps every key to the manager-clock time until which it is
// reserved: no new grant may cover a key before its reservation ends
// (C§2.3.1). It is kept in canonical form: sorted segments covering the key
// space, adjacent equal values merged.
//
// It also keeps the ends of the reservations in time order, so that the
// Core learns which have run out without visiting the others: due reports
// every segment whose reservation was set to a non-zero time once that time
// has come (a segment is pending until then).
//
// Both orders are ordered sets (ordered.go): a change costs O(log n) plus
// moving at most a chunk, where the flat sorted slices this replaced moved
// every segment after the change — O(n) per grant or renewal, O(n²) to
// build a table of n segments.
type reservations struct {
	segs *ordered[resSeg] // by start
	// ends holds (until, start) of every pending segment: a non-zero
	// reservation that due has not reported yet.
	ends *ordered[resEnd]
	// reported is the latest time given to due: every segment reserved
	// past it is pending (the invariant check tests).
	reported time.Time
}

// resSeg is the segment that starts at start and runs to the next one.
type resSeg struct {
	start keyspace.Key
	until time.Time // zero: not reserved
}

// resEnd is a pending segment, ordered by the end of its reservation.
type resEnd struct {
	until time.Time
	start keyspace.Key
}

func cmpSeg(a, b resSeg) int { return cmp.Compare(a.start, b.start) }

func cmpEnd(a, b resEnd) int {
	if c := a.until.Compare(b.until); c != 0 {
		return c
	}
	return cmp.Compare(a.start, b.start)
}

func newReservations() *reservations {
	m := &reservations{segs: newOrdered(cmpSeg), ends: newOrdered(cmpEnd)}
	m.segs.insert(resSeg{})
	return m
}

// find returns the position of the segment containing k.
func (m *reservations) find(k keyspace.Key) pos {
	p, found := m.segs.search(resSeg{start: k})
	if !found {
		p, _ = m.segs.prev(p) // there is always a segment at 0
	}
	return p
}

// endOf returns the end of the segment at p (0: the end of the key space).
func (m *reservations) endOf(p pos) keyspace.Key {
	if q := m.segs.next(p); !m.segs.end(q) {
		return m.segs.at(q).start
	}
	return 0
}

// pending reports whether s waits in ends.
func (m *reservations) pending(s resSeg) bool {
	if s.until.IsZero() {
		return false
	}
	_, ok := m.ends.search(resEnd{s.until, s.start})
	return ok
}

// split makes k the start of a segment; the new segment is pending if the
// one it was cut from is.
func (m *reservations) split(k keyspace.Key) {
	s := *m.segs.at(m.find(k))
	if s.start == k {
		return
	}
	m.segs.insert(resSeg{k, s.until})
	if m.pending(s) {
		m.ends.insert(resEnd{s.until, k})
	}
}

// setUntil reserves the segment that starts at k until t, pending unless t
// is zero.
func (m *reservations) setUntil(k keyspace.Key, t time.Time) {
	p, _ := m.segs.search(resSeg{start: k})
	m.setAt(p, t)
}

// setAt reserves the segment at p until t, pending unless t is zero.
func (m *reservations) setAt(p pos, t time.Time) {
	s := m.segs.at(p)
	if !s.until.IsZero() {
		m.ends.delete(resEnd{s.until, s.start})
	}
	s.until = t
	if !t.IsZero() {
		m.ends.insert(resEnd{t, s.start})
	}
}

// join merges the segment that starts at k into the one before it, which
// has an equal reservation; the merged segment is pending if either was.
func (m *reservations) join(k keyspace.Key) {
	p, _ := m.segs.search(resSeg{start: k})
	s := *m.segs.at(p)
	q, _ := m.segs.prev(p)
	prev := *m.segs.at(q)
	was := !s.until.IsZero() && m.ends.delete(resEnd{s.until, k})
	m.segs.deleteAt(p)
	if was && !prev.until.IsZero() {
		m.ends.insert(resEnd{prev.until, prev.start})
	}
}

// set reserves r until t (a zero t clears the reservation).
func (m *reservations) set(r keyspace.Range, t time.Time) {
	if p := m.find(r.Start); m.segs.at(p).start == r.Start && m.endOf(p) == r.End {
		m.setWhole(p, r, t)
		return
	}
	m.split(r.Start)
	if r.End != 0 {
		m.split(r.End)
	}
	if r.Start != keyspace.MaxKey { // else r is one key, one segment
		// Drop the segments that start inside r, with their ends.
		inside := func(s resSeg) bool { return r.End == 0 || s.start < r.End }
		lo := resSeg{start: r.Start + 1}
		for p, _ := m.segs.search(lo); !m.segs.end(p) && inside(*m.segs.at(p)); p = m.segs.next(p) {
			if s := m.segs.at(p); !s.until.IsZero() {
				m.ends.delete(resEnd{s.until, s.start})
			}
		}
		m.segs.deleteRange(lo, inside)
	}
	m.setUntil(r.Start, t)
	if r.End != 0 {
		if p, _ := m.segs.search(resSeg{start: r.End}); m.segs.at(p).until.Equal(t) {
			m.join(r.End)
		}
	}
	if r.Start != 0 {
		if m.segs.at(m.find(r.Start - 1)).until.Equal(t) {
			m.join(r.Start)
		}
	}
}

// setWhole reserves r, the whole segment at p, until t: no split, no
// segment to drop, and the neighbours are at hand.
func (m *reservations) setWhole(p pos, r keyspace.Range, t time.Time) {
	m.setAt(p, t)
	q := m.segs.next(p)
	next := !m.segs.end(q) && m.segs.at(q).until.Equal(t)
	q, ok := m.segs.prev(p)
	prev := ok && m.segs.at(q).until.Equal(t)
	// (join finds segments by key: a join may move p.)
	if next {
		m.join(r.End)
	}
	if prev {
		m.join(r.Start)
	}
}

// extend reserves r until at least t.
func (m *reservations) extend(r keyspace.Range, t time.Time) {
	p := m.find(r.Start)
	if end := m.endOf(p); end == 0 || (r.End != 0 && r.End <= end) {
		// Within one segment, as a renewal usually is; the whole segment,
		// as it is when the renewed ranges are where they were last time.
		switch s := m.segs.at(p); {
		case !s.until.Before(t):
		case s.start == r.Start && end == r.End:
			m.setWhole(p, r, t)
		default:
			m.set(r, t)
		}
		return
	}
	m.each(r, func(p keyspace.Range, u time.Time) {
		if u.Before(t) {
			m.set(p, t)
		}
	})
}

// visit calls fn for every segment overlapping r, clipped to r, in key
// order. fn must not change m.
func (m *reservations) visit(r keyspace.Range, fn func(keyspace.Range, time.Time)) {
	for p := m.find(r.Start); !m.segs.end(p); p = m.segs.next(p) {
		s := m.segs.at(p)
		q, ok := keyspace.Range{Start: s.start, End: m.endOf(p)}.Intersect(r)
		if !ok {
			break
		}
		fn(q, s.until)
	}
}

// each calls fn for every segment overlapping r, clipped to r. fn may call
// set or extend on the range it is given.
func (m *reservations) each(r keyspace.Range, fn func(keyspace.Range, time.Time)) {
	var parts []keyspace.Range
	var times []time.Time
	m.visit(r, func(p keyspace.Range, u time.Time) {
		parts = append(parts, p)
		times = append(times, u)
	})
	for i := range parts {
		fn(parts[i], times[i])
	}
}

// free returns the parts of r whose reservation has ended at now, and the
// earliest future end of a reservation within r (zero if none).
func (m *reservations) free(r keyspace.Range, now time.Time) (keyspace.RangeSet, time.Time) {
	var out keyspace.RangeSet
	var next time.Time
	m.visit(r, func(p keyspace.Range, u time.Time) {
		if !u.After(now) {
			out = out.Add(p)
		} else if next.IsZero() || u.Before(next) {
			next = u
		}
	})
	return out, next
}

// due calls fn with every pending segment whose reservation has ended at
// now, in the order of the ends, and forgets them: each reservation set to
// a non-zero time is reported once, by the first call at or after that
// time, unless it changes before then.
func (m *reservations) due(now time.Time, fn func(keyspace.Range)) {
	if now.After(m.reported) {
		m.reported = now
	}
	for {
		e, ok := m.ends.first()
		if !ok || e.until.After(now) {
			return
		}
		m.ends.deleteAt(pos{})
		p, _ := m.segs.search(resSeg{start: e.start})
		fn(keyspace.Range{Start: e.start, End: m.endOf(p)})
	}
}

// nextEnd returns the earliest end of a pending reservation (zero if none):
// when due has something to report.
func (m *reservations) nextEnd() time.Time {
	e, _ := m.ends.first()
	return e.until
}

// segments returns the segments' starts and reservations, in key order.
func (m *reservations) segments() (starts []keyspace.Key, until []time.Time) {
	m.segs.all(func(s resSeg) bool {
		starts = append(starts, s.start)
		until = append(until, s.until)
		return true
	})
	return starts, until
}

// check reports where m breaks its invariants, or nil: canonical segments
// from key 0, every pending entry naming a segment with that reservation,
// and every segment reserved past the last due pending.
func (m *reservations) check() error {
	if err := m.segs.check(); err != nil {
		return fmt.Errorf("segments: %w", err)
	}
	if err := m.ends.check(); err != nil {
		return fmt.Errorf("ends: %w", err)
	}
	if s, ok := m.segs.first(); !ok || s.start != 0 {
		return errors.New("no segment starts at key 0")
	}
	var err error
	var prev resSeg
	first := true
	m.segs.all(func(s resSeg) bool {
		switch {
		case !first && prev.until.Equal(s.until):
			err = fmt.Errorf("segments at %x and %x are both reserved until %v: not merged", uint64(prev.start), uint64(s.start), s.until)
		case s.until.After(m.reported) && !m.pending(s):
			err = fmt.Errorf("segment at %x is reserved until %v, after the last due (%v), but not pending", uint64(s.start), s.until, m.reported)
		}
		prev, first = s, false
		return err == nil
	})
	if err != nil {
		return err
	}
	m.ends.all(func(e resEnd) bool {
		p, found := m.segs.search(resSeg{start: e.start})
		switch {
		case e.until.IsZero():
			err = fmt.Errorf("pending entry for %x with no reservation", uint64(e.start))
		case !found:
			err = fmt.Errorf("pending entry for %x, where no segment starts", uint64(e.start))
		case !m.segs.at(p).until.Equal(e.until):
			err = fmt.Errorf("pending entry for %x until %v, but the segment is reserved until %v", uint64(e.start), e.until, m.segs.at(p).until)
		}
		return err == nil
	})
	return err
}
