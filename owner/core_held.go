package owner

// Pure helpers on a held set: the leases an Owner holds, sorted by range
// and disjoint (Core.held).

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// covering reports whether the held leases cover r with lease n, and the
// earliest expiry among them.
func covering(held []Lease, r keyspace.Range, n LeaseNum) (time.Time, bool) {
	var exp time.Time
	need := r
	for _, l := range held {
		if l.Num != n || !l.Range.Overlaps(need) {
			continue
		}
		if l.Range.Start > need.Start {
			return time.Time{}, false // a gap at need.Start
		}
		if exp.IsZero() || l.Expiry.Before(exp) {
			exp = l.Expiry
		}
		if l.Range.End == 0 || (need.End != 0 && l.Range.End >= need.End) {
			return exp, true
		}
		need.Start = l.Range.End
	}
	return time.Time{}, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dropOverlaps removes leases overlapping an earlier one: a well-behaved
// Manager never sends them, and an Owner must never hold a key twice.
func dropOverlaps(ls []Lease) []Lease {
	out := ls[:0]
	for _, l := range ls {
		if len(out) > 0 && out[len(out)-1].Range.Overlaps(l.Range) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// uncovered returns the parts of r not covered by the leases in ls numbered n.
// ls is sorted and disjoint (a held set), so only the leases overlapping r
// are looked at.
func uncovered(r keyspace.Range, ls []Lease, n LeaseNum) []keyspace.Range {
	i, _ := slices.BinarySearchFunc(ls, r.Start, func(l Lease, k keyspace.Key) int {
		if l.Range.Last() < k {
			return -1
		}
		return 1
	})
	var out []keyspace.Range
	cur, done := r.Start, false
	for ; i < len(ls) && ls[i].Range.Start <= r.Last(); i++ {
		if ls[i].Num != n {
			continue
		}
		if ls[i].Range.Start > cur {
			out = append(out, keyspace.Range{Start: cur, End: ls[i].Range.Start})
		}
		if ls[i].Range.Last() >= r.Last() {
			done = true
			break
		}
		cur = ls[i].Range.End
	}
	if !done {
		out = append(out, keyspace.Range{Start: cur, End: r.End})
	}
	return out
}
