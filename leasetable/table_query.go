package leasetable

// Each calls fn for every segment in key order, without copying the table,
// until fn returns false. fn must not change the table.
func (t *Table) Each(fn func(Segment) bool) {
	for i := range t.segs.starts {
		if !fn(Segment{Range: t.segs.rangeOf(i), Entry: t.segs.ents[i]}) {
			return
		}
	}
}
