package owner

import (
	"slices"

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
	if c.broken.PairedBeforeGranted || len(c.changes) == mark {
		return func() {}
	}
	later := slices.Clone(c.changes[mark:])
	c.changes = c.changes[:mark]
	return func() { c.changes = append(c.changes, later...) }
}
