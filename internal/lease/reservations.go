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
// A pending segment waits in ends at the time it was queued, which is no
// later than its reservation's end: a renewal that moves the end later,
// which every answer to an Owner does for each of its ranges, changes the
// segment alone and leaves its place in ends, and when that place comes
// (due, or nextEnd looking that far) the segment is queued again at its
// end. So a renewed segment moves in ends about once per ManagerLease, not
// once per renewal: a delete in the middle of ends and an insert for every
// renewed range were most of the cost of answering a renewal (docs/results.md,
// "The etcd comparison's CPU").
//
// Both orders are ordered sets (ordered.go): a change costs O(log n) plus
// moving at most a chunk, where the flat sorted slices this replaced moved
// every segment after the change — O(n) per grant or renewal, O(n²) to
// build a table of n segments.
type reservations struct {
	segs *ordered[resSeg] // by start
	// ends holds (queued, start) of every pending segment: a non-zero
	// reservation that due has not reported yet.
	ends *ordered[resEnd]
	// reported is the latest time given to due: every segment reserved
	// past it is pending (the invariant check tests).
	reported time.Time
	// moved is requeue's scratch list, kept between calls.
	moved []pos
}

// resSeg is the segment that starts at start and runs to the next one.
type resSeg struct {
	start keyspace.Key
	until time.Time // zero: not reserved
	// queued is the segment's time in ends, no later than until; zero:
	// not pending.
	queued time.Time
}

// resEnd is a pending segment, ordered by the time it was queued at (its
// reservation's end, or an earlier one since moved later).
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
func pending(s resSeg) bool { return !s.queued.IsZero() }

// split makes k the start of a segment; the new segment is pending if the
// one it was cut from is, queued at the same time.
func (m *reservations) split(k keyspace.Key) {
	s := *m.segs.at(m.find(k))
	if s.start == k {
		return
	}
	m.segs.insert(resSeg{start: k, until: s.until, queued: s.queued})
	if pending(s) {
		m.ends.insert(resEnd{s.queued, k})
	}
}

// setUntil reserves the segment that starts at k until t, pending unless t
// is zero.
func (m *reservations) setUntil(k keyspace.Key, t time.Time) {
	p, _ := m.segs.search(resSeg{start: k})
	m.setAt(p, t)
}

// setAt reserves the segment at p until t, pending unless t is zero. A
// segment already queued no later than t keeps its place in ends (the
// type's comment): only a segment not pending, or one whose reservation
// now ends before its place, is queued anew.
func (m *reservations) setAt(p pos, t time.Time) {
	s := m.segs.at(p)
	switch {
	case t.IsZero():
		if pending(*s) {
			m.ends.delete(resEnd{s.queued, s.start})
		}
		s.queued = time.Time{}
	case !pending(*s):
		m.ends.insert(resEnd{t, s.start})
		s.queued = t
	case t.Before(s.queued):
		m.ends.delete(resEnd{s.queued, s.start})
		m.ends.insert(resEnd{t, s.start})
		s.queued = t
	}
	s.until = t
}

// join merges the segment that starts at k into the one before it, which
// has an equal reservation; the merged segment is pending if either was.
func (m *reservations) join(k keyspace.Key) {
	p, _ := m.segs.search(resSeg{start: k})
	s := *m.segs.at(p)
	q, _ := m.segs.prev(p)
	prev := *m.segs.at(q)
	if pending(s) {
		m.ends.delete(resEnd{s.queued, k})
	}
	m.segs.deleteAt(p)
	if pending(s) && !prev.until.IsZero() && !pending(prev) {
		// (deleteAt may have moved prev.)
		q, _ = m.segs.search(resSeg{start: prev.start})
		m.segs.at(q).queued = prev.until
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
			if s := m.segs.at(p); pending(*s) {
				m.ends.delete(resEnd{s.queued, s.start})
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
// time, unless it changes before then. A segment queued at a time that has
// come but reserved past now is queued again at its end, not reported.
func (m *reservations) due(now time.Time, fn func(keyspace.Range)) {
	if now.After(m.reported) {
		m.reported = now
	}
	for {
		m.requeue(now)
		e, ok := m.ends.first()
		if !ok || e.until.After(now) {
			return
		}
		m.ends.deleteAt(pos{})
		p, _ := m.segs.search(resSeg{start: e.start})
		m.segs.at(p).queued = time.Time{}
		fn(keyspace.Range{Start: e.start, End: m.endOf(p)})
	}
}

// nextEnd returns when due has something to report: the earliest end of a
// pending reservation if it is no later than by, and otherwise a time
// after by and no later than that end (zero if nothing is pending). A
// caller that will look again by then anyway gets exactly what the
// earliest end would give it, and the segments renewed since they were
// queued are not all queued again at each call, only those whose places
// come by then.
func (m *reservations) nextEnd(by time.Time) time.Time {
	m.requeue(by)
	e, _ := m.ends.first()
	return e.until
}

// requeue queues again at their ends the segments at the front of ends
// queued no later than by whose reservations were moved later since, up to
// the first one whose place is its end: the front is then the earliest end
// of all, or a place after by. The segments of one renewal were queued
// together and so are together in ends; they leave the front as one span,
// one move of the chunk's elements rather than one per segment.
func (m *reservations) requeue(by time.Time) {
	// (Positions in segs stay valid: only ends changes here.)
	moved := m.moved[:0]
	var first resEnd
	for p := (pos{}); !m.ends.end(p); p = m.ends.next(p) {
		e := *m.ends.at(p)
		if e.until.After(by) {
			break
		}
		q, _ := m.segs.search(resSeg{start: e.start})
		if !m.segs.at(q).until.After(e.until) {
			break
		}
		if len(moved) == 0 {
			first = e
		}
		moved = append(moved, q)
	}
	if len(moved) == 0 {
		return
	}
	i := 0
	m.ends.deleteRange(first, func(resEnd) bool { i++; return i <= len(moved) })
	for _, q := range moved {
		s := m.segs.at(q)
		s.queued = s.until
		m.ends.insert(resEnd{s.until, s.start})
	}
	m.moved = moved[:0]
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
// from key 0, every pending entry naming a segment queued at its time,
// every segment queued no later than its reservation ends and in ends,
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
		case s.until.After(m.reported) && !pending(s):
			err = fmt.Errorf("segment at %x is reserved until %v, after the last due (%v), but not pending", uint64(s.start), s.until, m.reported)
		case pending(s) && (s.until.IsZero() || s.queued.After(s.until)):
			err = fmt.Errorf("segment at %x is queued at %v, but reserved until %v", uint64(s.start), s.queued, s.until)
		case pending(s):
			if _, ok := m.ends.search(resEnd{s.queued, s.start}); !ok {
				err = fmt.Errorf("segment at %x is queued at %v, but not in ends", uint64(s.start), s.queued)
			}
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
		case !m.segs.at(p).queued.Equal(e.until):
			err = fmt.Errorf("pending entry for %x at %v, but the segment is queued at %v", uint64(e.start), e.until, m.segs.at(p).queued)
		}
		return err == nil
	})
	return err
}
