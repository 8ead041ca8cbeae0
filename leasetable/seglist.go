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
// View uses it with its compact viewEntry: one flat slice of starts is what
// its radix index and Lookup need. Table keeps its segments in a chunkList,
// which makes the same changes (setBounds) in chunks.
type segList[E comparable] struct {
	starts []keyspace.Key
	ents   []E
}

func newSegList[E comparable](free E) segList[E] {
	return segList[E]{starts: []keyspace.Key{0}, ents: []E{free}}
}

func (s *segList[E]) len() int { return len(s.starts) }

// search returns the largest i with starts[i] <= k, where starts is sorted
// and starts[0] <= k. It never allocates.
func search(starts []keyspace.Key, k keyspace.Key) int {
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

// find returns the index of the segment containing k: the largest i with
// starts[i] <= k. It never allocates.
func (s *segList[E]) find(k keyspace.Key) int { return search(s.starts, k) }

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

// setBounds is the rewrite that overwriting r with e makes to a partition in
// canonical form, shared by segList and chunkList. Think of the partition as
// its boundaries, a (start, entry) pair for each segment. Overwriting r
// removes every boundary whose start lies in [r.Start, r.End] (both ends
// included; to the end of the key space when r.End == 0) and puts back the
// n <= 2 that setBounds returns, in key order:
//   - (r.Start, e), unless the key before r already has e (prev), in which
//     case that segment grows over r;
//   - (r.End, next), where next is the entry the key r.End had, unless next
//     is e (that segment grows back over r) or r reaches the end of the key
//     space.
//
// Boundaries outside [r.Start, r.End] keep their start and entry, and
// canonical form holds: a new boundary's entry differs from the one before
// it (e != prev, next != e), and the boundary after r.End, if any, differs
// from next, the entry of the segment it followed before the change. prev
// is ignored when r.Start == 0, next when r.End == 0. r must be valid.
func setBounds[E comparable](r keyspace.Range, e, prev, next E) (starts [2]keyspace.Key, ents [2]E, n int) {
	if r.Start == 0 || prev != e {
		starts[n], ents[n] = r.Start, e
		n++
	}
	if r.End != 0 && next != e {
		starts[n], ents[n] = r.End, next
		n++
	}
	return starts, ents, n
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
	// Replace the boundaries a..b-1, those with starts in [r.Start, r.End].
	var prev, next E
	a, b := 0, len(s.starts)
	if r.Start > 0 {
		p := i // the segment holding r.Start-1
		if s.starts[i] == r.Start {
			p = i - 1
		}
		prev, a = s.ents[p], p+1
	}
	if r.End != 0 {
		q := j // the segment holding r.End
		if s.end(j) == r.End {
			q = j + 1
		}
		next, b = s.ents[q], q+1
	}
	starts, ents, n := setBounds(r, e, prev, next)
	s.starts = slices.Replace(s.starts, a, b, starts[:n]...)
	s.ents = slices.Replace(s.ents, a, b, ents[:n]...)
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
