package rebalance

import (
	"cmp"
	"math"
	"slices"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
)

// CentrifugeTolerance is the threshold of Centrifuge's rule: an owner more
// than 10% above the mean load gives up a virtual node (C§2.1.2).
const CentrifugeTolerance = 1.10

// centrifuge is the policy Centrifuge returns.
type centrifuge struct{}

// Centrifuge returns the baseline policy, Centrifuge's adaptive load
// management (C§2.1.2) on ranges: in each round, every owner whose load per
// unit of capacity is more than 10% above the mean gives one of its ranges
// (a virtual node) to the owner that is least loaded at that moment, even if
// that owner is not below the mean. The range given is the owner's most
// typical one: the one whose load is nearest the owner's mean load per
// range, standing in for "a virtual node" (the paper does not say which;
// dropping a random virtual node moves that much on average). It never
// splits or merges ranges, ignores hot keys, budgets and Input.Elapsed (one
// range per overloaded owner per round is its rate), and places orphaned
// ranges as Weighted does. A member that holds nothing has just joined:
// as a node joining Centrifuge's ring places its virtual nodes by
// consistent hashing at once (C§2.1.1), the round then starts over from
// assign.ConsistentHash of the members instead of waiting for overloaded
// owners to shed one range per round.
func Centrifuge() Policy { return centrifuge{} }

// Plan implements Policy.
func (centrifuge) Plan(in Input) (Plan, error) {
	r, err := start(in)
	if r == nil {
		return Plan{}, err
	}
	if r.joined() {
		r.ring(in.Members)
		return r.plan(0, 0), nil
	}
	r.placeOrphans()
	if !(r.total > 0) {
		return r.plan(0, 0), nil
	}
	var capSum float64
	for i := range r.owners {
		capSum += r.owners[i].cap
	}
	mean := r.total / capSum
	for i := range r.owners {
		r.owners[i].target = r.owners[i].cap * mean
	}
	held := make([][]int, len(r.owners)) // each owner's pieces
	for i := range r.pieces {
		held[r.pieces[i].owner] = append(held[r.pieces[i].owner], i)
	}
	order := make([]int, len(r.owners)) // most loaded first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(r.owners[b].util(), r.owners[a].util()) })
	for _, o := range order {
		src := &r.owners[o]
		if src.util() <= CentrifugeTolerance || len(held[o]) < 2 {
			continue
		}
		dst := -1 // there is one: a single member is never above the mean
		for i := range r.owners {
			if i != o && (dst < 0 || r.owners[i].util() < r.owners[dst].util()) {
				dst = i
			}
		}
		typical := src.load / float64(len(held[o]))
		pick, dist := -1, math.Inf(1)
		for _, i := range held[o] {
			if p := &r.pieces[i]; !p.moved && math.Abs(p.load-typical) < dist {
				pick, dist = i, math.Abs(p.load-typical)
			}
		}
		if pick >= 0 {
			r.move(pick, dst)
		}
	}
	return r.plan(0, 0), nil
}

// joined reports whether some member holds no range.
func (r *round) joined() bool {
	holds := make([]bool, len(r.owners))
	for i := range r.pieces {
		if o := r.pieces[i].owner; o >= 0 {
			holds[o] = true
		}
	}
	return slices.Contains(holds, false)
}

// ring gives every range its owner by consistent hashing of members: the
// pieces are cut where the hash ring's segments begin, each part keeping
// its share of the load.
func (r *round) ring(members []assign.Member) {
	ch := assign.ConsistentHash{}.Assign(members)
	idx := make(map[string]int, len(r.owners))
	for i, o := range r.owners {
		idx[o.id] = i
	}
	var pieces []piece
	j := 0
	for _, p := range r.pieces {
		for j > 0 && ch[j].Range.Start > p.r.Start {
			j--
		}
		var cuts []keyspace.Key
		var owners []int
		for ; j < len(ch); j++ {
			q, ok := ch[j].Range.Intersect(p.r)
			if !ok {
				if ch[j].Range.Start > p.r.Last() {
					break
				}
				continue
			}
			if q.Start != p.r.Start {
				cuts = append(cuts, q.Start)
			}
			owners = append(owners, idx[ch[j].Owner])
			if ch[j].Range.Last() > p.r.Last() {
				break
			}
		}
		parts := []piece{p}
		if len(cuts) > 0 {
			parts = p.splitAt(cuts)
		}
		for i := range parts {
			parts[i].fresh = false
			parts[i].orphan = p.orphan
			parts[i].owner = owners[i]
			parts[i].moved = owners[i] != p.owner
		}
		pieces = append(pieces, parts...)
	}
	for i := range r.owners {
		r.owners[i].load = 0
	}
	for _, p := range pieces {
		r.owners[p.owner].load += p.load
	}
	r.pieces = pieces
}
