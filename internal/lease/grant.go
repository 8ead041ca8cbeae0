// Grants (docs/design.md rules 3 and 5): what the desired assignment gives
// an Owner and is free and unreserved is granted under a fresh LGN.

package lease

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// grant gives piece g to o with a fresh LGN, reserved from now, and returns
// the LGN; from, when not zero, is the LGN whose state the grant carries (a
// migration, or a promotion).
func (c *Core) grant(now time.Time, n *namespace, o *ownerSession, g keyspace.Range, from keyspace.LGN) keyspace.LGN {
	lgn := c.nextLGN(n)
	e := leasetable.Entry{Owner: o.id, Addr: o.addr, LGN: lgn}
	if from != 0 {
		e.Migrated, e.MigratedFrom = true, from
	}
	c.set(now, n, g, e)
	n.res.set(g, now.Add(c.cfg.Timing.ManagerLease))
	c.stats.Grants++
	if o.fresh == nil {
		o.fresh = map[keyspace.LGN]uint64{}
	}
	o.fresh[lgn] = 0
	if c.cfg.Rebalance != nil {
		if o.grantedAt == nil {
			o.grantedAt = map[keyspace.LGN]time.Time{}
		}
		o.grantedAt[lgn] = now
	}
	n.push(o)
	return lgn
}

// grantWanted grants o what the desired assignment gives it and is free
// and unreserved (rules 3 and 5). Grants stop where the message would
// list more leases than an Owner accepts (wire.MaxLeases): the rest stays
// free for others.
func (c *Core) grantWanted(now time.Time, n *namespace, o *ownerSession) {
	wants := n.wants[o.id]
	if o.draining {
		// Given nothing new, even while the desired assignment still
		// names it (its drain waits to be planned).
		wants = nil
	}
	room := maxOwnerLeases - len(o.sentLeases)
	if !n.s.table.HasFree() {
		wants = nil // nothing to grant (the steady state): no need to look
	}
	for _, d := range wants {
		for _, s := range n.s.table.Overlapping(d) {
			if s.Entry.Owner != "" {
				continue
			}
			free, _ := n.res.free(s.Range, now)
			for _, g := range free.Ranges() {
				if room <= 0 {
					return
				}
				c.grant(now, n, o, g, 0)
				room--
			}
		}
	}
}

// nextLGN issues a fresh lease generation number: every grant gets one, so
// every loss shows as an LGN change (C§2.3, P§4.1).
func (c *Core) nextLGN(n *namespace) keyspace.LGN {
	if c.broken.ReuseLGN {
		return reusedLGN(n)
	}
	return n.s.lgn + 1 // recorded by the Set that grants it
}
