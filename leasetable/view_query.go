package leasetable

import (
	"maps"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// Overlapping returns the view's segments intersecting r, clipped to r, in
// key order.
func (v *View) Overlapping(r keyspace.Range) []Segment { return v.segs.segments(r, v.entry) }

// Clone returns an independent copy of the view. A runtime applies updates
// to one View and publishes clones, so readers never wait for a writer.
func (v *View) Clone() *View {
	c := &View{
		lsn:        v.lsn,
		segs:       segList[viewEntry]{starts: slices.Clone(v.segs.starts), ents: slices.Clone(v.segs.ents)},
		buckets:    slices.Clone(v.buckets),
		shift:      v.shift,
		owners:     slices.Clone(v.owners),
		ownerIndex: maps.Clone(v.ownerIndex),
		compactAt:  v.compactAt,
	}
	return c
}
