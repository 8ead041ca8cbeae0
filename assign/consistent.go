package assign

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/leasehold/leasehold/keyspace"
)

// DefaultVNodes is the number of virtual nodes per owner of capacity 1, as in
// Centrifuge (C§2.1, P§4.1).
const DefaultVNodes = 64

// maxVNodesPerMember bounds the virtual nodes of one member, so that an absurd
// Capacity (say +Inf) cannot exhaust memory.
const maxVNodesPerMember = 1 << 20

// ConsistentHash is consistent hashing with VNodes virtual nodes per owner
// (C§2.1.2: 64). See the package documentation for the exact construction.
type ConsistentHash struct {
	// VNodes is the number of virtual nodes of a member with Capacity 1. A
	// member gets round(VNodes*Capacity) of them, at least 1 (and at most
	// 2^20). 0 (or a negative value) means DefaultVNodes.
	VNodes int
}

var _ Policy = ConsistentHash{}

// VNodeKey returns the point on the ring of virtual node i of the owner id:
// xxhash64 of id + "#" + the decimal i. It is part of the policy's contract;
// other packages may use it to predict an assignment.
func VNodeKey(id string, i int) keyspace.Key {
	return keyspace.Key(xxhash.Sum64String(id + "#" + strconv.Itoa(i)))
}

// vnodes returns how many virtual nodes a member of the given (normalized,
// positive) capacity gets.
func (c ConsistentHash) vnodes(capacity float64) int {
	v := c.VNodes
	if v <= 0 {
		v = DefaultVNodes
	}
	n := math.Round(float64(v) * capacity)
	switch {
	case n < 1:
		return 1
	case n > maxVNodesPerMember:
		return maxVNodesPerMember
	}
	return int(n)
}

// Points returns how many virtual nodes a member of the given capacity gets
// (a capacity that is not positive counts as 1): the most segments it adds
// to an assignment, since each point starts at most one. The Manager counts
// a join's ranges with it before admitting the join (--max-ranges).
func (c ConsistentHash) Points(capacity float64) int {
	if !(capacity > 0) {
		capacity = 1
	}
	return c.vnodes(capacity)
}

// point is one virtual node on the ring.
type point struct {
	key    keyspace.Key
	member uint32 // index into the normalized members, which are sorted by ID
	index  uint32 // which of the member's virtual nodes
}

// Assign places every member's virtual nodes on the ring and gives each
// point the keys from it up to the next point; the first point also takes
// the keys below it, and the last the keys up to the end of the key space.
// The result has one segment per distinct point.
func (c ConsistentHash) Assign(members []Member) Assignment {
	ms := normalize(members)
	if len(ms) == 0 {
		return nil
	}
	counts := make([]int, len(ms))
	total := 0
	for i, m := range ms {
		counts[i] = c.vnodes(m.Capacity)
		total += counts[i]
	}

	pts := make([]point, 0, total)
	var buf []byte // id + "#" + i, built in place: same bytes as VNodeKey hashes
	for mi, m := range ms {
		buf = append(append(buf[:0], m.ID...), '#')
		base := len(buf)
		for i := range counts[mi] {
			buf = strconv.AppendInt(buf[:base], int64(i), 10)
			pts = append(pts, point{
				key:    keyspace.Key(xxhash.Sum64(buf)),
				member: uint32(mi),
				index:  uint32(i),
			})
		}
	}
	return ring(ms, pts)
}

// ring sorts the points of the members ms and cuts the key space at them.
// It reorders pts.
func ring(ms []Member, pts []point) Assignment {
	sortPoints(pts)
	// Of equal points the first in tie order owns the range; the others own
	// nothing and make no segment.
	pts = slices.CompactFunc(pts, func(a, b point) bool { return a.key == b.key })

	out := make(Assignment, len(pts))
	for j, p := range pts {
		r := keyspace.Range{Start: p.key} // End 0: the end of the key space
		if j == 0 {
			r.Start = 0
		}
		if j+1 < len(pts) {
			r.End = pts[j+1].key
		}
		out[j] = Segment{Range: r, Owner: ms[p.member].ID}
	}
	return out
}

// comparePoints orders points by key, then (ties) by owner ID, then by index.
// Members are sorted by ID, so member index order is ID order.
func comparePoints(a, b point) int {
	if c := cmp.Compare(a.key, b.key); c != 0 {
		return c
	}
	if c := cmp.Compare(a.member, b.member); c != 0 {
		return c
	}
	return cmp.Compare(a.index, b.index)
}

// sortPoints sorts pts by comparePoints. It is an LSD radix sort on the key,
// a byte at a time, which is several times faster than a comparison sort for
// the tens of thousands of points of a few hundred owners; runs of equal keys
// (almost never more than one point) are then put in tie order.
func sortPoints(pts []point) {
	if len(pts) < 256 {
		slices.SortFunc(pts, comparePoints)
		return
	}
	var counts [8][256]int
	for _, p := range pts {
		for d := range 8 {
			counts[d][byte(p.key>>(8*d))]++
		}
	}
	src, dst := pts, make([]point, len(pts))
	for d := range 8 {
		c := &counts[d]
		shift := 8 * d
		if c[byte(src[0].key>>shift)] == len(src) {
			continue // every key has the same byte here: nothing to do
		}
		next := 0 // c[b] becomes the position of the next point with byte b
		for b := range c {
			c[b], next = next, next+c[b]
		}
		for _, p := range src {
			b := byte(p.key >> shift)
			dst[c[b]] = p
			c[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &pts[0] {
		copy(pts, src)
	}
	for i := 0; i < len(pts); {
		j := i + 1
		for j < len(pts) && pts[j].key == pts[i].key {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(pts[i:j], comparePoints)
		}
		i = j
	}
}
