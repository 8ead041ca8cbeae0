package leasetable

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// Each calls fn for every segment in key order, without copying the table,
// until fn returns false. fn must not change the table.
func (t *Table) Each(fn func(Segment) bool) {
	for i := range t.segs.starts {
		if !fn(Segment{Range: t.segs.rangeOf(i), Entry: t.segs.ents[i]}) {
			return
		}
	}
}

// Owned returns the segments whose entry names owner, in key order: what
// Each would find, without visiting the whole table. The Manager asks it
// on every lease request from the owner.
//
// Cost: O(k log n) for the owner's k segments, from an index that Set keeps
// at O(1) extra work per segment it rewrites.
func (t *Table) Owned(owner string) []Segment {
	m := t.owned[owner]
	if len(m) == 0 {
		return nil
	}
	starts := make([]keyspace.Key, 0, len(m))
	for k := range m {
		starts = append(starts, k)
	}
	slices.Sort(starts)
	out := make([]Segment, len(starts))
	for i, k := range starts {
		j := t.segs.find(k)
		out[i] = Segment{Range: t.segs.rangeOf(j), Entry: t.segs.ents[j]}
	}
	return out
}

// checkOwned reports where the owner index and the segments disagree, or
// nil (an assertion for tests).
func (t *Table) checkOwned() error {
	n := 0
	for i, e := range t.segs.ents {
		if e.Owner == "" {
			continue
		}
		n++
		if _, ok := t.owned[e.Owner][t.segs.starts[i]]; !ok {
			return fmt.Errorf("leasetable: internal error: segment %d (%v) is not in the index of %q", i, t.segs.rangeOf(i), e.Owner)
		}
	}
	m := 0
	for o, starts := range t.owned {
		if len(starts) == 0 {
			return fmt.Errorf("leasetable: internal error: empty index for %q", o)
		}
		m += len(starts)
	}
	if m != n {
		return fmt.Errorf("leasetable: internal error: the owner index has %d segments, the table %d owned ones", m, n)
	}
	return nil
}
