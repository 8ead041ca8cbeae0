package leasetable

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
// any view at u.From (TestMergeAppliesAsTheWhole). The result is Merged
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
	via := false
	for i, c := range u.Changes {
		if drop[i] {
			continue
		}
		// c takes up a range a dropped change freed: find that one.
		for k := i - 1; k >= 0 && k >= i-mergeWindow; k-- {
			p := u.Changes[k]
			if p.Range.Overlaps(c.Range) {
				via = drop[k] && p.Range == c.Range
				break
			}
		}
		if via {
			c.ViaFree = true
			via = false
		}
		out.Changes = append(out.Changes, c)
	}
	return out
}
