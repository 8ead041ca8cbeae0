package leasetable

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// segList is a partition of the whole key space into segments, kept in
// canonical form as two parallel slices: segment i is
// [starts[i], starts[i+1]) (the last one runs to the end of the key space)
// and carries ents[i].
//
// Invariants (checked by check): len(starts) == len(ents) >= 1,
// starts[0] == 0, starts strictly increasing, and ents[i] != ents[i+1].
// Table uses it with E = Entry, View with its compact viewEntry.
type segList[E comparable] struct {
	starts []keyspace.Key
	ents   []E
}

func newSegList[E comparable](free E) segList[E] {
	return segList[E]{starts: []keyspace.Key{0}, ents: []E{free}}
}

func (s *segList[E]) len() int { return len(s.starts) }

// find returns the index of the segment containing k: the largest i with
// starts[i] <= k. It never allocates.
func (s *segList[E]) find(k keyspace.Key) int {
	starts := s.starts
	// Invariant: starts[lo] <= k, and k < starts[hi] when hi < len(starts).
	lo, hi := 0, len(starts)
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if starts[mid] <= k {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// end returns the exclusive end of segment i (0 for the end of the key space).
func (s *segList[E]) end(i int) keyspace.Key {
	if i+1 < len(s.starts) {
		return s.starts[i+1]
	}
	return 0
}

func (s *segList[E]) rangeOf(i int) keyspace.Range {
	return keyspace.Range{Start: s.starts[i], End: s.end(i)}
}

// covered reports whether every key of r already carries e. r must be valid.
func (s *segList[E]) covered(r keyspace.Range, e E) bool {
	i := s.find(r.Start)
	// Adjacent segments differ, so r has e throughout only if one segment
	// holds all of r.
	return s.ents[i] == e && i == s.find(r.Last())
}

// window returns the segments lo..hi-1 that set(r, …) rewrites: those r
// touches and one neighbour each side. After set they are replaced by
// segments lo..hi-1+len()-(length before); all others keep their start and
// entry. r must be valid.
func (s *segList[E]) window(r keyspace.Range) (lo, hi int) {
	i, j := s.find(r.Start), s.find(r.Last())
	return max(i-1, 0), min(j+2, len(s.starts))
}

// set overwrites r with e, keeping canonical form, and reports whether
// anything changed. If visit is not nil it is called, in key order and before
// anything changes, with each piece of r and the entry the piece had.
//
// Cost: O(log n + k) to find and rewrite the k segments r touches, plus a
// copy of the segments after them when their number changes (O(n) memmove
// in the worst case).
func (s *segList[E]) set(r keyspace.Range, e E, visit func(piece keyspace.Range, old E)) bool {
	i, j := s.find(r.Start), s.find(r.Last())
	if i == j && s.ents[i] == e {
		return false
	}
	if visit != nil {
		for k := i; k <= j; k++ {
			piece, _ := s.rangeOf(k).Intersect(r)
			visit(piece, s.ents[k])
		}
	}

	// Rewrite segments lo..hi-1: those r touches plus one unchanged
	// neighbour each side, so that merging with the neighbours is just
	// coalescing this short list. The segments outside keep their entries
	// at the edges of the list, so canonical form holds outside it. (These
	// are window's lo and hi.)
	lo, hi := max(i-1, 0), min(j+2, len(s.starts))
	var (
		ps [5]keyspace.Key
		pe [5]E
		n  int
	)
	add := func(start keyspace.Key, ent E) {
		if n > 0 && pe[n-1] == ent {
			return // same entry as the piece before: merge
		}
		ps[n], pe[n] = start, ent
		n++
	}
	if lo < i {
		add(s.starts[lo], s.ents[lo])
	}
	if s.starts[i] < r.Start {
		add(s.starts[i], s.ents[i]) // left remainder of segment i
	}
	add(r.Start, e)
	if r.End != 0 && r.End != s.end(j) {
		add(r.End, s.ents[j]) // right remainder of segment j
	}
	if j+1 < hi {
		add(s.starts[j+1], s.ents[j+1])
	}
	s.starts = slices.Replace(s.starts, lo, hi, ps[:n]...)
	s.ents = slices.Replace(s.ents, lo, hi, pe[:n]...)
	return true
}

// segments returns the segments clipped to r, converting entries with conv.
func (s *segList[E]) segments(r keyspace.Range, conv func(E) Entry) []Segment {
	if !r.Valid() {
		return nil
	}
	i, j := s.find(r.Start), s.find(r.Last())
	out := make([]Segment, 0, j-i+1)
	for k := i; k <= j; k++ {
		piece, _ := s.rangeOf(k).Intersect(r)
		out = append(out, Segment{Range: piece, Entry: conv(s.ents[k])})
	}
	return out
}

// check reports a broken invariant (an assertion error), or nil.
func (s *segList[E]) check() error {
	if len(s.starts) == 0 || len(s.starts) != len(s.ents) {
		return fmt.Errorf("leasetable: internal error: %d starts, %d entries", len(s.starts), len(s.ents))
	}
	if s.starts[0] != 0 {
		return fmt.Errorf("leasetable: internal error: first segment starts at %016x, not 0", uint64(s.starts[0]))
	}
	for i := 1; i < len(s.starts); i++ {
		if s.starts[i] <= s.starts[i-1] {
			return fmt.Errorf("leasetable: internal error: segment %d starts at %016x, not after %016x",
				i, uint64(s.starts[i]), uint64(s.starts[i-1]))
		}
		if s.ents[i] == s.ents[i-1] {
			return fmt.Errorf("leasetable: internal error: segments %d and %d have equal entries %v", i-1, i, s.ents[i])
		}
	}
	return nil
}
