package owner

import (
	"slices"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// stepPairings takes in m's pairings (stepStandbys) and returns what Step
// defers to its end: reporting them after the held set's changes of the
// same step. A grant that carries state (promoted, or migrated) comes in
// the same message as its lease's first pairing; reported first, the
// pairing would start a fill of a range whose state the application has
// not taken up yet, and the standby, filled with a partial copy, would be
// recorded in sync (docs/design.md rule 24).
//
// A pairing of a lease not held at the step's end (its grant came in a
// raced message and was declined) waits until a step takes the grant up.
//
// A raced message that carries a grant does not change the leases this
// Owner stands by for: the grant may be declined (adoptRacedGrants), and
// a promoted grant's message no longer lists the lease it promotes, so
// the application would drop the copy the grant, resent, carries. The
// next message in order brings the list.
func (c *Core) stepPairings(m *protocol.LeaseResponse) (report func()) {
	keepOf := m.AckSeq != c.seq && !c.broken.NoRaceFilter && !c.broken.StandbyForFromRaced &&
		slices.ContainsFunc(m.Leases, func(l protocol.Lease) bool { return l.Grant })
	mark := len(c.changes)
	c.stepStandbys(m, keepOf)
	if c.broken.PairedBeforeGranted {
		return func() {}
	}
	later := slices.Clone(c.changes[mark:])
	c.changes = c.changes[:mark]
	return func() { c.reportPairings(later) }
}

// reportPairings appends the changes stepStandbys made, at the end of a
// step, with each pairing of a lease not held (a raced message's grant
// declined, say) held back until a step takes the lease's grant up.
func (c *Core) reportPairings(later []OwnershipChange) {
	sb := &c.sb
	held := func(n LeaseNum) bool { return slices.ContainsFunc(c.held, func(l Lease) bool { return l.Num == n }) }
	var ready []Pairing
	sb.waiting = slices.DeleteFunc(sb.waiting, func(lgn keyspace.LGN) bool {
		p, ok := sb.mine[lgn]
		if !ok || p.Lease.Epoch != sb.epoch {
			return true // dropped, or of another epoch
		}
		if held(p.Lease) {
			ready = append(ready, p)
			return true
		}
		return false
	})
	for _, ch := range later {
		var paired []Pairing
		for _, p := range ch.Paired {
			switch {
			case held(p.Lease):
				paired = append(paired, p)
			case !slices.Contains(sb.waiting, p.Lease.LGN):
				sb.waiting = append(sb.waiting, p.Lease.LGN)
			}
		}
		ready = slices.DeleteFunc(ready, func(r Pairing) bool {
			return slices.ContainsFunc(paired, func(p Pairing) bool { return p.Lease == r.Lease })
		})
		ch.Paired = paired
		if len(ch.Paired) > 0 || ch.StandbyForChanged {
			c.changes = append(c.changes, ch)
		}
	}
	if len(ready) > 0 {
		c.changes = append(c.changes, OwnershipChange{Paired: ready})
	}
}
