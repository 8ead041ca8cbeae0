package keyspace

import (
	"slices"
	"strings"
)

// RangeSet is a set of keys kept as sorted, disjoint, non-adjacent ranges.
// The zero value is the empty set. Methods that return a RangeSet never alias
// the receiver's storage.
type RangeSet struct {
	rs []Range // sorted by Start; disjoint; adjacent ranges are merged
}

// NewRangeSet builds the union of rs (in any order, overlapping or not).
func NewRangeSet(rs ...Range) RangeSet {
	switch len(rs) {
	case 0:
		return RangeSet{}
	case 1:
		return RangeSet{}.Add(rs[0])
	}
	// Sorted by Start, then merged in one pass: O(n log n), where adding
	// one by one copies the set each time (a lease set of an Owner, 64
	// ranges, is built on every renewal).
	sorted := make([]Range, 0, len(rs))
	for _, r := range rs {
		if r.Valid() {
			sorted = append(sorted, r)
		}
	}
	slices.SortFunc(sorted, func(a, b Range) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	out := sorted[:0]
	for _, r := range sorted {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.End == 0 || r.Start <= last.End { // overlapping or adjacent
				if last.End != 0 && (r.End == 0 || r.End > last.End) {
					last.End = r.End
				}
				continue
			}
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return RangeSet{}
	}
	return RangeSet{out}
}

// Ranges returns the set's ranges in key order. The caller must not modify it.
func (s RangeSet) Ranges() []Range { return s.rs }

// Empty reports whether the set holds no key.
func (s RangeSet) Empty() bool { return len(s.rs) == 0 }

// Len returns the number of maximal ranges in the set.
func (s RangeSet) Len() int { return len(s.rs) }

// Contains reports whether k is in the set (binary search).
func (s RangeSet) Contains(k Key) bool {
	i, _ := slices.BinarySearchFunc(s.rs, k, func(r Range, k Key) int {
		if r.Last() < k {
			return -1
		}
		if r.Start > k {
			return 1
		}
		return 0
	})
	return i < len(s.rs) && s.rs[i].Contains(k)
}

// Size returns the number of keys in the set, as a float.
func (s RangeSet) Size() float64 {
	var n float64
	for _, r := range s.rs {
		n += r.Size()
	}
	return n
}

// Add returns s ∪ {r}.
func (s RangeSet) Add(r Range) RangeSet {
	if !r.Valid() {
		return s.clone()
	}
	out := make([]Range, 0, len(s.rs)+1)
	i := 0
	// Ranges entirely before r and not adjacent to it.
	for ; i < len(s.rs) && s.rs[i].End != 0 && s.rs[i].End < r.Start; i++ {
		out = append(out, s.rs[i])
	}
	merged := r
	// Ranges overlapping or adjacent to r.
	for ; i < len(s.rs) && (merged.End == 0 || s.rs[i].Start <= merged.End); i++ {
		merged.Start = min(merged.Start, s.rs[i].Start)
		if merged.End != 0 && (s.rs[i].End == 0 || s.rs[i].End > merged.End) {
			merged.End = s.rs[i].End
		}
	}
	out = append(out, merged)
	out = append(out, s.rs[i:]...)
	return RangeSet{out}
}

// Union returns s ∪ o.
func (s RangeSet) Union(o RangeSet) RangeSet {
	out := s.clone()
	for _, r := range o.rs {
		out = out.Add(r)
	}
	return out
}

// Intersect returns s ∩ o.
func (s RangeSet) Intersect(o RangeSet) RangeSet {
	var out []Range
	i, j := 0, 0
	for i < len(s.rs) && j < len(o.rs) {
		if x, ok := s.rs[i].Intersect(o.rs[j]); ok {
			out = append(out, x)
		}
		if s.rs[i].Last() < o.rs[j].Last() {
			i++
		} else {
			j++
		}
	}
	return RangeSet{out}
}

// Complement returns every key not in s.
func (s RangeSet) Complement() RangeSet {
	var out []Range
	next := Key(0)
	atEnd := false
	for _, r := range s.rs {
		if r.Start > next {
			out = append(out, Range{next, r.Start})
		}
		if r.End == 0 {
			atEnd = true
			break
		}
		next = r.End
	}
	if !atEnd {
		out = append(out, Range{next, 0})
	}
	return RangeSet{out}
}

// Subtract returns s \ o.
func (s RangeSet) Subtract(o RangeSet) RangeSet { return s.Intersect(o.Complement()) }

// Overlaps reports whether s and o share a key.
func (s RangeSet) Overlaps(o RangeSet) bool {
	i, j := 0, 0
	for i < len(s.rs) && j < len(o.rs) {
		if s.rs[i].Overlaps(o.rs[j]) {
			return true
		}
		if s.rs[i].Last() < o.rs[j].Last() {
			i++
		} else {
			j++
		}
	}
	return false
}

// Equal reports whether s and o hold the same keys.
func (s RangeSet) Equal(o RangeSet) bool { return slices.Equal(s.rs, o.rs) }

func (s RangeSet) clone() RangeSet { return RangeSet{slices.Clone(s.rs)} }

func (s RangeSet) String() string {
	parts := make([]string, len(s.rs))
	for i, r := range s.rs {
		parts[i] = r.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// search returns the index of the first range whose last key is ≥ k.
func (s RangeSet) search(k Key) int {
	lo, hi := 0, len(s.rs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.rs[m].Last() < k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// OverlapsRange reports whether some key of r is in the set. It does not
// allocate.
func (s RangeSet) OverlapsRange(r Range) bool {
	i := s.search(r.Start)
	return i < len(s.rs) && s.rs[i].Overlaps(r)
}

// CoversRange reports whether every key of r is in the set. It does not
// allocate.
func (s RangeSet) CoversRange(r Range) bool {
	i := s.search(r.Start)
	return i < len(s.rs) && s.rs[i].Covers(r)
}
