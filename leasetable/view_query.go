package leasetable

import "github.com/leasehold/leasehold/keyspace"

// Overlapping returns the view's segments intersecting r, clipped to r, in
// key order.
func (v *View) Overlapping(r keyspace.Range) []Segment { return v.segs.segments(r, v.entry) }
