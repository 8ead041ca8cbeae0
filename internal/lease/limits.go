// The limits on a namespace's Owners and lease-table ranges (MaxOwners,
// MaxRanges): a request past one is refused before anything is recorded.

package lease

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// The Manager's limits on a namespace (MaxOwners, MaxRanges) are checked
// before the work they bound: a request that would pass one is refused
// before anything of it is recorded or planned.
//
// MaxRanges counts what the table can hold once the membership changes
// already admitted are planned, with the request's change among them. A
// join is planned up to MembershipEvery after it is admitted, together with
// the others of that round, so looking at the table alone (as this check
// once did) lets a round of joins take it far past the limit: one Owner of
// capacity 100 brings 6,400 ring points. The table's segments after the
// round start at a start of the table now, of the desired assignment now
// (whose grants may still be under way), or of the next desired assignment;
// the bound is the number of distinct starts among the three. Under
// consistent hashing the next assignment's starts are the current ones plus
// the ring points of what was admitted since it was computed (a point that
// takes key 0 from the first segment moves that segment's start to its old
// point, one for one), so the bound is
//
//	|starts(table) ∪ starts(desired)| + Σ pending(member)
//
// where pending is how many more points a member has than desired ranges:
// all of them for a join not yet planned, the difference for a higher
// capacity. Near the limit the request's own member is counted by its
// points that are not yet starts (newStarts): an Owner that returns finds
// most of its points still starting ranges of the table. A request is
// refused when what it adds is not zero and the bound with it passes the
// limit; one that adds nothing (a renewal, a lower capacity, a leave) is
// never refused for it, so a table at its limit keeps serving the Owners
// it has. Other policies are counted by computing their next assignment.
//
// Ranges can also be split by what an Owner releases or hands over (a piece
// of a lease), and, under a load-aware policy, by the planner's splits,
// which its own MaxSegmentsPerOwner bounds; neither is counted here.

// checkLimits refuses, before anything is recorded or planned, a request
// that would take namespace n past MaxOwners (a new Owner) or past
// MaxRanges (a new Owner, a returning one or a higher capacity: each adds
// ring points). o is the Owner's session, nil for a new Owner. Requests of
// recorded Owners that add no range are never refused for a limit: a table
// at a limit keeps serving the Owners it has.
func (c *Core) checkLimits(n *namespace, o *ownerSession, req *protocol.LeaseRequest) error {
	if o == nil {
		if _, known := n.s.owners[req.Owner]; !known && len(n.owners) >= c.cfg.OwnerLimit() {
			return fmt.Errorf("%w: namespace %q has %d owners, the most allowed (MaxOwners, leasehold manager --max-owners); "+
				"owner %q is refused", ErrLimit, n.name, len(n.owners), req.Owner)
		}
	}
	join, why, ok := joining(o, req)
	if !ok {
		return nil
	}
	limit := c.cfg.RangeLimit()
	adds, total := c.rangesAfter(n, join, limit)
	if adds > 0 && total > limit {
		return fmt.Errorf("%w: namespace %q would have up to %d ranges once owner %q %s with capacity %g (up to %d more), "+
			"past the most allowed, %d (MaxRanges, leasehold manager --max-ranges); it is refused",
			ErrLimit, n.name, total, req.Owner, why, capacityOf(join.Capacity), adds, limit)
	}
	return nil
}

// joining returns the member req would make active with its capacity, and
// what it does, if it may add ring points: a new Owner, a recorded one that
// is not a member (returning, or a new run of a draining Owner, which no
// longer drains), or a higher capacity. A leave, a request of a dead run
// and a renewal of an active member as it is add none.
func joining(o *ownerSession, req *protocol.LeaseRequest) (assign.Member, string, bool) {
	if req.Leaving || (o != nil && req.Incarnation < o.inc) {
		return assign.Member{}, "", false
	}
	m := assign.Member{ID: req.Owner, Capacity: max(req.Capacity, 0)}
	if o == nil {
		return m, "joins", true
	}
	if req.Capacity < 0 || req.Capacity == o.capacity {
		m.Capacity = o.capacity // what StepLease keeps
	}
	restarted := req.Incarnation > o.inc
	switch {
	case !o.member || (o.draining && restarted):
		return m, "returns", true
	case o.draining:
		return assign.Member{}, "", false // its ranges are moving away; it is given none
	case capacityOf(m.Capacity) > capacityOf(o.capacity):
		return m, "raises its capacity", true
	}
	return assign.Member{}, "", false
}

// capacityOf is a member's capacity as the policies read it: one unless
// positive.
func capacityOf(c float64) float64 {
	if !(c > 0) {
		return 1
	}
	return c
}

// rangesAfter returns how many ranges join adds to namespace n's table, at
// most, and how many the table may then have, at most (see above). Past
// limit it counts exactly; below, a cheaper sum may do.
func (c *Core) rangesAfter(n *namespace, join assign.Member, limit int) (adds, total int) {
	ch, hashed := c.cfg.Policy.(assign.ConsistentHash)
	if c.cfg.Rebalance != nil {
		// Joins are placed by consistent hashing when nothing is held
		// (a new Manager), and by the planner's moves, whose splits its
		// own MaxSegmentsPerOwner caps, otherwise: they are counted as if
		// hashed, which bounds the first and overstates the second.
		ch, hashed = assign.ConsistentHash{}, true
	}
	if !hashed {
		return c.rangesAfterAssign(n, join)
	}
	pending := func(id string, capacity float64) int { return max(ch.Points(capacity)-len(n.wants[id]), 0) }
	adds = pending(join.ID, join.Capacity)
	others := 0
	for id, o := range n.owners { // activeMembers, without sorting them
		if !n.members {
			break // no change since the desired assignment was computed
		}
		if o.member && !o.draining && id != join.ID {
			others += pending(id, o.capacity)
		}
	}
	if total = n.s.table.Len() + len(n.desired) + others + adds; total <= limit {
		return adds, total // bounds the union of the starts too
	}
	adds = min(adds, n.newStarts(ch, join))
	return adds, n.countStarts(limit-others-adds) + others + adds
}

// newStarts returns how many starts m's ring points would add to n's table
// and desired assignment: those that are neither yet, plus one if a point
// falls in the desired assignment's first segment, which starts at key 0
// rather than at the point that begins it, and would then start there. A
// returning Owner's points are mostly starts of the table still (its
// ranges went to others as they were), and add few.
func (n *namespace) newStarts(ch assign.ConsistentHash, m assign.Member) int {
	k, first := 0, false
	for i := range ch.Points(m.Capacity) {
		p := assign.VNodeKey(m.ID, i)
		if len(n.desired) > 0 && (len(n.desired) == 1 || p < n.desired[1].Range.Start) {
			first = true
		}
		if n.s.table.At(p).Range.Start == p {
			continue
		}
		if _, found := slices.BinarySearchFunc(n.desired, p, func(s assign.Segment, k keyspace.Key) int {
			return cmp.Compare(s.Range.Start, k)
		}); found {
			continue
		}
		k++
	}
	if first {
		k++
	}
	return k
}

// startsCount is the number of distinct starts of a namespace's table and
// desired assignment, as counted at the table's LSN lsn. A Set of the
// table changes its boundaries at its range's two ends only, so each LSN
// since adds at most two starts: the count bounds the union at a later LSN
// without walking the table again, for as long as the desired assignment
// is the same.
type startsCount struct {
	table   *leasetable.Table
	lsn     keyspace.LSN
	desired *assign.Segment // the desired assignment counted (its first segment), nil if empty
	n       int
}

// countStarts returns a bound on the distinct starts of n's table and
// desired assignment: from the last count if that bound is within budget,
// counted anew otherwise (a walk of the table).
func (n *namespace) countStarts(budget int) int {
	t, lsn := n.s.table, n.s.table.LSN()
	var first *assign.Segment
	if len(n.desired) > 0 {
		first = &n.desired[0]
	}
	c := &n.starts
	if c.table == t && c.desired == first && c.lsn <= lsn {
		if b := c.n + 2*int(lsn-c.lsn); b <= budget || c.lsn == lsn {
			return b
		}
	}
	*c = startsCount{table: t, lsn: lsn, desired: first, n: countStarts(t, assignmentStarts(n.desired))}
	return c.n
}

// rangesAfterAssign is rangesAfter for a policy other than consistent
// hashing: it computes the next assignment with and without join.
func (c *Core) rangesAfterAssign(n *namespace, join assign.Member) (adds, total int) {
	var without, with []assign.Member
	for _, m := range n.activeMembers() {
		if m.ID != join.ID {
			without = append(without, m)
		}
	}
	with = append(slices.Clone(without), join)
	before := countStarts(n.s.table, mergeStarts(n.desired, c.cfg.Policy.Assign(without)))
	total = countStarts(n.s.table, mergeStarts(n.desired, c.cfg.Policy.Assign(with)))
	return max(total-before, 0), total
}

// assignmentStarts returns the starts of a's segments, in order.
func assignmentStarts(a assign.Assignment) func(int) (keyspace.Key, bool) {
	return func(i int) (keyspace.Key, bool) {
		if i >= len(a) {
			return 0, false
		}
		return a[i].Range.Start, true
	}
}

// mergeStarts returns the distinct starts of two assignments' segments, in
// order.
func mergeStarts(a, b assign.Assignment) func(int) (keyspace.Key, bool) {
	ks := make([]keyspace.Key, 0, len(a)+len(b))
	for _, s := range a {
		ks = append(ks, s.Range.Start)
	}
	for _, s := range b {
		ks = append(ks, s.Range.Start)
	}
	slices.Sort(ks)
	ks = slices.Compact(ks)
	return func(i int) (keyspace.Key, bool) {
		if i >= len(ks) {
			return 0, false
		}
		return ks[i], true
	}
}

// countStarts returns the number of distinct keys among the starts of the
// table's segments and the keys starts(0), starts(1), … (ascending, distinct,
// until it says false).
func countStarts(t *leasetable.Table, starts func(int) (keyspace.Key, bool)) int {
	n, j := 0, 0
	k, more := starts(0)
	t.Each(func(s leasetable.Segment) bool {
		for more && k < s.Range.Start {
			n, j = n+1, j+1
			k, more = starts(j)
		}
		if more && k == s.Range.Start {
			j++
			k, more = starts(j)
		}
		n++
		return true
	})
	for ; more; k, more = starts(j) {
		n, j = n+1, j+1
	}
	return n
}
