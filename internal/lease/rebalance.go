// The desired assignment, load-aware when a rebalance policy is set:
// membership and load rounds plan the moves that handover.go carries out
// (docs/design.md rule 13).

package lease

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/rebalance"
)

// The load-aware desired assignment (Settings.Rebalance). Every
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
// policy is load-aware). It compares the new assignment with the old in one
// pass over both: the ranges whose desired owner changed are reconciled,
// and the desired ranges (wants) of only the owners whose segments changed
// are rebuilt. A join among 10,000 Owners changes about 64 ranges of
// 640,000.
func (c *Core) setDesired(now time.Time, n *namespace, d assign.Assignment) {
	if c.cfg.Rebalance != nil && !slices.Equal(d, n.s.desired) {
		c.apply(now, Change{Op: OpDesired, NS: n.name, Desired: d})
	}
	removed, added := map[string][]keyspace.Range{}, map[string][]keyspace.Range{}
	diffDesired(n.desired, d, n.markDirty,
		func(s assign.Segment) { removed[s.Owner] = append(removed[s.Owner], s.Range) },
		func(s assign.Segment) { added[s.Owner] = append(added[s.Owner], s.Range) })
	n.desired = d
	if n.wants == nil {
		n.wants = map[string][]keyspace.Range{}
	}
	patch := func(id string) {
		if w := patchWants(n.wants[id], removed[id], added[id]); len(w) > 0 {
			n.wants[id] = w
		} else {
			delete(n.wants, id)
		}
	}
	for id := range removed {
		patch(id)
	}
	for id := range added {
		if _, done := removed[id]; !done {
			patch(id)
		}
	}
}

// diffDesired compares two desired assignments (sorted segments covering
// the key space, or none), calling dirty for every range whose owner
// differs (an empty assignment owns nothing), removed for every segment of
// old that new does not have as it is, and added for every segment of new
// that old does not have.
func diffDesired(old, new assign.Assignment, dirty func(keyspace.Range), removed, added func(assign.Segment)) {
	i, j := 0, 0
	for i < len(old) && j < len(new) {
		// old[i] and new[j] overlap. Segments that are the same start
		// together, so they meet as a pair here.
		a, b := old[i], new[j]
		if a == b {
			i, j = i+1, j+1
			continue
		}
		if ov, ok := a.Range.Intersect(b.Range); ok && a.Owner != b.Owner {
			dirty(ov)
		}
		ae, be := a.Range.Last(), b.Range.Last()
		if ae <= be {
			removed(a)
			i++
		}
		if be <= ae {
			added(b)
			j++
		}
	}
	for ; i < len(old); i++ {
		dirty(old[i].Range)
		removed(old[i])
	}
	for ; j < len(new); j++ {
		dirty(new[j].Range)
		added(new[j])
	}
}

// patchWants returns an owner's desired ranges w without the ones removed
// and with the ones added (all sorted by key; removed is a subset of w).
func patchWants(w, removed, added []keyspace.Range) []keyspace.Range {
	out := make([]keyspace.Range, 0, len(w)-len(removed)+len(added))
	k := 0
	for _, r := range w {
		for k < len(added) && added[k].Start < r.Start {
			out = append(out, added[k])
			k++
		}
		if len(removed) > 0 && removed[0] == r {
			removed = removed[1:]
			continue
		}
		out = append(out, r)
	}
	return append(out, added[k:]...)
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
			if !n.owners[m.ID].reported.After(n.lastPlan) {
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
	if len(cur) == 0 || (membership && n.nothingHeld()) {
		// The first assignment, or Owners joining while no range is held
		// (a new Manager's reservation): consistent hashing, then balance
		// by load. With nothing held, no move costs a handover, so the
		// churn budget need not pace the joins.
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

// nothingHeld reports whether no range of the namespace has an Owner, from
// the table's owner index: every Owner the table names has a session.
func (n *namespace) nothingHeld() bool {
	for id := range n.owners {
		if len(n.heldBy(id)) > 0 {
			return false
		}
	}
	return true
}

// rebalanceEvery is the planning period, 5 s unless configured.
func (c *Core) rebalanceEvery() time.Duration {
	if c.cfg.RebalanceEvery > 0 {
		return c.cfg.RebalanceEvery
	}
	return 5 * time.Second
}

// rate is the request rate of a range, from the latest report that
// covered it.
type rate struct {
	r keyspace.Range
	v float64 // requests per second
}

// recordRates folds one Owner's load report into the namespace's load map:
// the rates it reports replace what older reports said of those keys, and
// the rest of the map stays. A range that changed hands keeps the load its
// last holder saw until its new holder reports it: without that, a round
// planned in between would see the new holder light and move more load
// onto it.
func (n *namespace) recordRates(report []rate) {
	report = disjoint(report)
	if len(report) == 0 {
		return
	}
	out := make([]rate, 0, len(n.rates)+len(report))
	for _, e := range n.rates {
		k, _ := slices.BinarySearchFunc(report, e.r.Start, func(x rate, key keyspace.Key) int {
			if x.r.Last() < key {
				return -1
			}
			return 1
		})
		cur, done := e.r.Start, false
		keep := func(end keyspace.Key) {
			p := keyspace.Range{Start: cur, End: end}
			out = append(out, rate{p, e.v * p.Size() / e.r.Size()})
		}
		for ; k < len(report) && report[k].r.Start <= e.r.Last(); k++ {
			if report[k].r.Start > cur {
				keep(report[k].r.Start)
			}
			if report[k].r.Last() >= e.r.Last() {
				done = true
				break
			}
			cur = report[k].r.End
		}
		if !done {
			keep(e.r.End)
		}
	}
	out = append(out, report...)
	slices.SortFunc(out, func(a, b rate) int { return keyspace.Compare(a.r, b.r) })
	n.rates = out
}

// fullWindow corrects an Owner's report for the ranges it was granted
// after the window began (at from, until now): their counts cover only the
// time since the grant, so their rate is scaled up to it. A range held for
// less than a tenth of the window is left out (too few requests to go by):
// the load map keeps what its previous holder reported until the next
// report.
func fullWindow(n *namespace, o *ownerSession, report []rate, from, now time.Time) []rate {
	if len(o.grantedAt) == 0 {
		return report
	}
	window := now.Sub(from)
	out := report[:0]
	for _, x := range report {
		since := from
		for _, s := range n.s.table.Overlapping(x.r) {
			if at, ok := o.grantedAt[s.Entry.LGN]; ok && s.Entry.Owner == o.id && at.After(since) {
				since = at
			}
		}
		held := now.Sub(since)
		if held < window/10 {
			continue
		}
		x.v *= float64(window) / float64(held)
		out = append(out, x)
	}
	return out
}

// disjoint sorts a report's ranges and merges any that overlap (an Owner
// reports every range it held during the window, and its ranges may have
// been split or merged meanwhile) into one, with their rates added.
func disjoint(report []rate) []rate {
	slices.SortFunc(report, func(a, b rate) int { return keyspace.Compare(a.r, b.r) })
	out := report[:0]
	for _, x := range report {
		if l := len(out) - 1; l >= 0 && x.r.Start <= out[l].r.Last() {
			if x.r.Last() > out[l].r.Last() {
				out[l].r.End = x.r.End
			}
			out[l].v += x.v
			continue
		}
		out = append(out, x)
	}
	return out
}

// measure attaches to each desired segment its load by the load map: each
// range's rate spread evenly over its keys. With no load reported at all,
// each segment weighs its share of the key space, so that an idle
// namespace is balanced by key space.
func (c *Core) measure(n *namespace, d assign.Assignment) []rebalance.Segment {
	rates := n.rates
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
