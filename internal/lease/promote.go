// Promotion (docs/design.md rule 21): a lease that ends without a handover
// goes to its in-sync standby instead of being freed, at the moment it
// would have been freed — when the reservation of rule 3 has run out, or
// when the holder's accepted request omits it (given up on its own, or
// recalled: release.go, rule 7) — so the old holder's belief ended first.

package lease

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// promote grants the part of piece p of the expired lease e that e's
// standby is recorded in sync on (rule 23: per piece, as its fills named
// them) to that standby, if it is the same live run that was named, as a
// promoted grant migrated from exactly e's LGN: Lookups raise no loss. It
// returns the rest of p, which the caller frees and whose loss is
// reported (rule 14): a piece the standby's copy was never filled on is
// not promoted onto it.
func (c *Core) promote(now time.Time, n *namespace, e leasetable.Entry, p keyspace.Range) (rest []keyspace.Range) {
	rec, ok := n.s.standbys[e.LGN]
	if !ok || !rec.InSync || !n.standbyOK(rec) {
		return []keyspace.Range{p}
	}
	whole := keyspace.NewRangeSet(p)
	in := whole.Intersect(keyspace.NewRangeSet(rec.Synced...))
	for _, q := range in.Ranges() {
		c.grantPromoted(now, n, n.owners[rec.Owner], q, e.LGN)
	}
	return whole.Subtract(in).Ranges()
}

// grantPromoted grants p to standby s as a promoted grant of lease from.
func (c *Core) grantPromoted(now time.Time, n *namespace, s *ownerSession, p keyspace.Range, from keyspace.LGN) {
	lgn := c.grant(now, n, s, p, from)
	if s.promoted == nil {
		s.promoted = map[keyspace.LGN]bool{}
	}
	s.promoted[lgn] = true
	c.stats.Promotions++
}

// promoteEarly is the broken rule faults.PromoteEarly: an in-sync standby
// is promoted as soon as the holder has missed one renewal, before the
// holder's reservation ends, so a holder that is only slow or cut off
// still believes its lease (and acknowledges writes) while the standby
// serves.
func (c *Core) promoteEarly(now time.Time, n *namespace) {
	for _, rec := range n.s.standbyList() {
		h := n.owners[rec.Holder]
		if !rec.InSync || !n.standbyOK(rec) || h == nil || now.Before(h.lastHeard.Add(c.cfg.Timing.Renew*3/2)) {
			continue
		}
		for _, s := range n.heldBy(rec.Holder) {
			if s.Entry.LGN == rec.LGN && rec.syncedCovers(s.Range) {
				n.res.set(s.Range, time.Time{})
				c.grantPromoted(now, n, n.owners[rec.Owner], s.Range, rec.LGN)
			}
		}
	}
}
