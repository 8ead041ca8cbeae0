package manager

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/rebalance"
)

// The load-aware desired assignment (CoreConfig.Rebalance). Every
// RebalanceEvery the leader measures the load on each range of the desired
// assignment from the Owners' reports and lets the policy plan a round of
// moves under its churn budget; membership changes plan a round at once
// (the ranges of departed Owners are placed then). The desired assignment
// is replicated (OpDesired), so a new leader carries on from it: it cannot
// be recomputed from membership alone.

// activeMembers returns the Owners that may be given ranges: live and not
// draining, sorted.
func (n *namespace) activeMembers() []assign.Member {
	var ms []assign.Member
	for id, o := range n.owners {
		if o.member && !o.draining {
			ms = append(ms, assign.Member{ID: id, Capacity: o.capacity})
		}
	}
	slices.SortFunc(ms, func(a, b assign.Member) int { return cmp.Compare(a.ID, b.ID) })
	return ms
}

// setDesired installs a desired assignment (and replicates it when the
// policy is load-aware).
func (c *Core) setDesired(now time.Time, n *namespace, d assign.Assignment) {
	if c.cfg.Rebalance != nil && !slices.Equal(d, n.s.desired) {
		c.apply(now, Change{Op: OpDesired, NS: n.name, Desired: d})
	}
	n.desired = d
	n.wants = map[string][]keyspace.Range{}
	for _, s := range d {
		n.wants[s.Owner] = append(n.wants[s.Owner], s.Range)
	}
	n.dirty = true
}

// plan runs one round of the load-aware policy at now. A round for load
// alone waits until every active Owner has reported its load; one for a
// membership change does not (the new and departed Owners' ranges must be
// placed).
func (c *Core) plan(now time.Time, n *namespace, membership bool) {
	every := c.rebalanceEvery()
	n.planAt = now.Add(every)
	ms := n.activeMembers()
	if len(ms) == 0 {
		c.setDesired(now, n, nil)
		return
	}
	if !membership && len(n.desired) > 0 {
		for _, m := range ms {
			if !n.owners[m.ID].reported {
				return
			}
		}
	}
	elapsed := now.Sub(n.lastPlan)
	if n.lastPlan.IsZero() {
		elapsed = every
	}
	n.lastPlan = now
	cur := n.desired
	if len(cur) == 0 {
		// The first assignment: consistent hashing, then balance by load.
		cur = assign.ConsistentHash{}.Assign(ms)
	}
	in := rebalance.Input{Members: ms, Current: c.measure(n, cur), HotKeys: n.hotKeys(), Elapsed: elapsed}
	p, err := c.cfg.Rebalance.Plan(in)
	if err != nil {
		// The policy refused our own input: keep the assignment (and the
		// Owners' leases) as they are.
		c.stats.PlanErrors++
		c.setDesired(now, n, cur)
		return
	}
	c.stats.Plans++
	c.stats.PlannedMoves += uint64(len(p.Moves))
	c.setDesired(now, n, p.Assignment())
}

// rebalanceEvery is the planning period, 5 s unless configured.
func (c *Core) rebalanceEvery() time.Duration {
	if c.cfg.RebalanceEvery > 0 {
		return c.cfg.RebalanceEvery
	}
	return 5 * time.Second
}

// measure attaches to each desired segment the load the Owners reported on
// it: each reported range's rate spread evenly over its keys. With no load
// reported at all, each segment weighs its share of the key space, so that
// an idle namespace is balanced by key space.
func (c *Core) measure(n *namespace, d assign.Assignment) []rebalance.Segment {
	type rate struct {
		r keyspace.Range
		v float64 // requests per second
	}
	var rates []rate
	for _, o := range n.owners {
		for _, l := range o.rangeRates {
			rates = append(rates, rate{l.Range, float64(l.Requests) / 1000})
		}
	}
	slices.SortFunc(rates, func(a, b rate) int { return keyspace.Compare(a.r, b.r) })
	out := make([]rebalance.Segment, len(d))
	total := 0.0
	for i, s := range d {
		out[i] = rebalance.Segment{Range: s.Range, Owner: s.Owner}
		j, _ := slices.BinarySearchFunc(rates, s.Range.Start, func(x rate, k keyspace.Key) int {
			if x.r.Last() < k {
				return -1
			}
			return 1
		})
		for ; j < len(rates); j++ {
			p, ok := rates[j].r.Intersect(s.Range)
			if !ok {
				if rates[j].r.Start > s.Range.Last() {
					break
				}
				continue
			}
			out[i].Load += rates[j].v * p.Size() / rates[j].r.Size()
		}
		total += out[i].Load
	}
	if total == 0 {
		for i := range out {
			out[i].Load = out[i].Range.Size() / (1 << 64)
		}
	}
	return out
}

// hotKeys merges the Owners' hot-key reports.
func (n *namespace) hotKeys() []rebalance.HotKey {
	var out []rebalance.HotKey
	for _, o := range n.owners {
		for _, k := range o.hot {
			out = append(out, rebalance.HotKey{Key: k.Key, Load: float64(k.Requests)})
		}
	}
	slices.SortFunc(out, func(a, b rebalance.HotKey) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
