package leasetable

import (
	"cmp"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// OwnerRanges is what one Owner lost in a change of a View: the ranges
// whose soft state was lost, of the leases it held.
type OwnerRanges struct {
	Owner  string
	Addr   string
	Ranges []keyspace.Range // sorted and coalesced
}

// ApplyByOwner is Apply, and also returns the lost ranges grouped by the
// Owner that held them (sorted by Owner, then address), so that a loss
// notification can name whose state was lost.
func (v *View) ApplyByOwner(u Update) (lost []keyspace.Range, by []OwnerRanges, err error) {
	g := lostGroups{}
	v.lostFrom = g.add
	defer func() { v.lostFrom = nil }()
	lost, err = v.Apply(u)
	if err != nil {
		return nil, nil, err
	}
	return lost, g.sorted(), nil
}

// ResetByOwner is Reset, and also returns the lost ranges grouped by the
// Owner that held them.
func (v *View) ResetByOwner() (lost []keyspace.Range, by []OwnerRanges) {
	g := lostGroups{}
	v.lostFrom = g.add
	defer func() { v.lostFrom = nil }()
	lost = v.Reset()
	return lost, g.sorted()
}

type lostGroups map[ownerInfo][]keyspace.Range

func (g lostGroups) add(r keyspace.Range, o ownerInfo) { g[o] = append(g[o], r) }

func (g lostGroups) sorted() []OwnerRanges {
	if len(g) == 0 {
		return nil
	}
	out := make([]OwnerRanges, 0, len(g))
	for o, rs := range g {
		out = append(out, OwnerRanges{Owner: o.id, Addr: o.addr, Ranges: coalesce(rs)})
	}
	slices.SortFunc(out, func(a, b OwnerRanges) int {
		return cmp.Or(cmp.Compare(a.Owner, b.Owner), cmp.Compare(a.Addr, b.Addr))
	})
	return out
}
