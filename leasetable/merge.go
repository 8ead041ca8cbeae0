package leasetable

import "github.com/leasehold/leasehold/keyspace"

// mergeWindow bounds how far after a change to free Merge looks for the
// change that takes the range again: far enough for every change of the
// round that freed it (an Owner's 64 ranges freed and granted), without
// making Merge quadratic on a large delta.
const mergeWindow = 512

// Merge returns the delta u with each change to free that the next change
// overlapping its range undoes at once left out: that next change covers
// exactly the same range and owns it, and is marked ViaFree in its place,
// so that a view applying it reports the same losses as for the two
// (lost when the old entry was owned; nothing lost from free). An Owner
// that crashes has its ranges freed and, in the same round, granted to
// others: the push then carries one change per range instead of two.
//
// The view and the losses it reports are exactly those of applying u, for
// any view at u.From (TestMergeAppliesAsTheWhole). A change kept keeps its
// FromCopy mark, and a change via free takes that of the change it replaces
// (MarkFromCopy, which runs first). The result is Merged
// when a change was left out, and is u itself otherwise; u is not changed.
// A snapshot is returned as it is.
func Merge(u Update) Update {
	if u.Snapshot || len(u.Changes) < 2 {
		return u
	}
	var drop []bool
	for i, c := range u.Changes {
		if c.Entry.Owner != "" {
			continue
		}
		for j := i + 1; j < len(u.Changes) && j <= i+mergeWindow; j++ {
			n := u.Changes[j]
			if !n.Range.Overlaps(c.Range) {
				continue
			}
			if n.Range == c.Range && n.Entry.Owner != "" {
				if drop == nil {
					drop = make([]bool, len(u.Changes))
				}
				drop[i] = true
			}
			break
		}
	}
	if drop == nil {
		return u
	}
	out := u
	out.Merged = true
	out.Changes = make([]Change, 0, len(u.Changes))
	via, viaFrom := false, 0
	for i, c := range u.Changes {
		if drop[i] {
			continue
		}
		// c takes up a range a dropped change freed: find that one.
		for k := i - 1; k >= 0 && k >= i-mergeWindow; k-- {
			p := u.Changes[k]
			if p.Range.Overlaps(c.Range) {
				via, viaFrom = drop[k] && p.Range == c.Range, k
				break
			}
		}
		if via {
			// The range is the one the dropped change freed: at From it
			// was what it was before that change.
			c.ViaFree, c.FromCopy = true, u.Changes[viaFrom].FromCopy
			via = false
		}
		out.Changes = append(out.Changes, c)
	}
	return out
}

// fromCopyWindow bounds the changes MarkFromCopy marks, since it compares
// each with every change before it: past it, changes keep their End.
const fromCopyWindow = 1024

// MarkFromCopy returns the delta u with FromCopy set on each change whose
// Range is exactly one segment of the table at u.From: it was Whole just
// before the change (Table.Set records that), and no change before it in u
// overlaps its range or touches either end of it. The keys of the range,
// the key before it and its End then held at the change what they held at
// From, so the segment starting at Range.Start at From was Range. A Lookup
// whose copy is at From finds it there, and a compact delta sends its Start
// alone. It also sets OwnerFromCopy on each owned change whose Entry has
// the Owner and Addr of the key before its range just before it
// (LeftOwner, recorded by Table.Set) when no change before it in u wrote
// that key: the key held the same at From, and a Lookup reads the Owner
// there (an Owner's crash gives each of its ranges to the Owner of the
// range before it, under consistent hashing). Only the first
// fromCopyWindow changes are marked; u is not changed.
// A snapshot is returned as it is.
func MarkFromCopy(u Update) Update {
	if u.Snapshot || len(u.Changes) == 0 {
		return u
	}
	out := u
	out.Changes = make([]Change, len(u.Changes))
	copy(out.Changes, u.Changes)
	for i := range out.Changes {
		c := &out.Changes[i]
		c.FromCopy, c.OwnerFromCopy = false, false
		if i >= fromCopyWindow {
			continue
		}
		c.FromCopy = c.Whole
		c.OwnerFromCopy = c.LeftOwner && c.Entry.Owner != "" && c.Range.Start > 0
		for _, p := range u.Changes[:i] {
			if p.Range.Overlaps(c.Range) || touches(p.Range, c.Range) {
				c.FromCopy = false
			}
			if p.Range.Contains(c.Range.Start - 1) {
				c.OwnerFromCopy = false
			}
		}
	}
	return out
}

// touches reports whether a ends where b starts or starts where b ends.
func touches(a, b keyspace.Range) bool {
	return (a.End != 0 && a.End == b.Start) || (b.End != 0 && a.Start == b.End)
}
