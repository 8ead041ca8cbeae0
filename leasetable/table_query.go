package leasetable

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// Each calls fn for every segment in key order, without copying the table,
// until fn returns false. fn must not change the table.
func (t *Table) Each(fn func(Segment) bool) {
	t.segs.each(keyspace.Full, func(r keyspace.Range, e Entry) bool {
		return fn(Segment{Range: r, Entry: e})
	})
}

// EachOverlapping calls fn for the segments intersecting r, clipped to r, in
// key order, until fn returns false: what Overlapping returns, without
// copying them into a slice. It does nothing if r is not a valid range. fn
// must not change the table.
//
// Cost: O(log n) to find r.Start, then O(1) per segment; no allocation
// (unless fn's closure escapes).
func (t *Table) EachOverlapping(r keyspace.Range, fn func(Segment) bool) {
	if !r.Valid() {
		return
	}
	t.segs.each(r, func(seg keyspace.Range, e Entry) bool {
		piece, _ := seg.Intersect(r)
		return fn(Segment{Range: piece, Entry: e})
	})
}

// Owned returns the segments whose entry names owner, in key order: what
// Each would find, without visiting the whole table. The Manager asks it
// on every lease request from the owner.
//
// The slice is shared by every call until the table next changes, and
// must not be modified (its capacity is its length, so an append copies).
//
// Cost: O(k log n) for the owner's k segments, from an index that Set keeps
// at O(1) extra work per segment it rewrites; O(1) when asked again before
// a change.
func (t *Table) Owned(owner string) []Segment {
	m := t.owned[owner]
	if len(m) == 0 {
		return nil
	}
	if out, ok := t.ownedMemo[owner]; ok {
		return out
	}
	starts := make([]keyspace.Key, 0, len(m))
	for k := range m {
		starts = append(starts, k)
	}
	slices.Sort(starts)
	out := make([]Segment, len(starts))
	for i, k := range starts {
		out[i] = t.At(k)
	}
	if t.ownedMemo == nil {
		t.ownedMemo = map[string][]Segment{}
	}
	t.ownedMemo[owner] = out
	return out
}

// HasFree reports whether any key is free: when none is, a Manager has
// nothing to grant and need not look for free ranges. O(1).
func (t *Table) HasFree() bool { return t.free > 0 }

// checkOwned reports where the owner index and the segments disagree, or
// nil (an assertion for tests).
func (t *Table) checkOwned() error {
	n, free := 0, 0
	var err error
	t.segs.each(keyspace.Full, func(r keyspace.Range, e Entry) bool {
		if e.Owner == "" {
			free++
			return true
		}
		n++
		if _, ok := t.owned[e.Owner][r.Start]; !ok {
			err = fmt.Errorf("leasetable: internal error: segment %v is not in the index of %q", r, e.Owner)
		}
		return err == nil
	})
	if err != nil {
		return err
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
	if free != t.free {
		return fmt.Errorf("leasetable: internal error: %d free segments counted, %d recorded", free, t.free)
	}
	for o, memo := range t.ownedMemo {
		var want []Segment
		t.Each(func(s Segment) bool {
			if s.Entry.Owner == o {
				want = append(want, s)
			}
			return true
		})
		if !slices.Equal(memo, want) || cap(memo) != len(memo) {
			return fmt.Errorf("leasetable: internal error: the remembered segments of %q are %v, the table's %v", o, memo, want)
		}
	}
	return nil
}

// check reports a broken invariant of the table (an assertion error), or
// nil: of its segment chunks, of the owner index, and of the log.
func (t *Table) check() error {
	if err := t.segs.check(); err != nil {
		return err
	}
	if err := t.checkOwned(); err != nil {
		return err
	}
	if len(t.log) != len(t.stamps) {
		return fmt.Errorf("leasetable: internal error: %d changes but %d stamps", len(t.log), len(t.stamps))
	}
	for i, c := range t.log {
		if want := t.FirstLSN() + keyspace.LSN(i); c.LSN != want {
			return fmt.Errorf("leasetable: internal error: change %d of the log has LSN %d, want %d", i, c.LSN, want)
		}
	}
	if t.snap != nil && !slices.Equal(t.snap, t.Segments()) {
		return fmt.Errorf("leasetable: internal error: the snapshot kept for LSN %d is not the table", t.lsn)
	}
	return nil
}
