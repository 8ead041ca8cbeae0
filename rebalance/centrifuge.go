package rebalance

import (
	"cmp"
	"math"
	"slices"
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
// ranges as Weighted does.
func Centrifuge() Policy { return centrifuge{} }

// Plan implements Policy.
func (centrifuge) Plan(in Input) (Plan, error) {
	r, err := start(in)
	if r == nil {
		return Plan{}, err
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
