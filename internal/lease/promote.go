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

// grantPromoted grants p to standby s as a promoted grant of lease from,
// and marks it so in the replicated state with the Seq of the next
// message to s, the first to list it (stamp): until s acknowledges that
// message or a later one, any leader lists the lease to s as a promoted
// grant (resumePromoted), not as a renewal s would refuse — a lease it
// never held — which would free the range and throw its copy away.
func (c *Core) grantPromoted(now time.Time, n *namespace, s *ownerSession, p keyspace.Range, from keyspace.LGN) {
	lgn := c.grant(now, n, s, p, from)
	c.apply(now, Change{Op: OpPromoted, NS: n.name, Promoted: &PromotedGrant{LGN: lgn, Owner: s.id, Seq: s.mySeq + 1}})
	c.stats.Promotions++
}

// promotedGrant reports whether lgn was granted by promotion.
func (n *namespace) promotedGrant(lgn keyspace.LGN) bool {
	_, ok := n.s.promoted[lgn]
	return ok
}

// promotionPending reports whether a promoted grant to o's run is not yet
// acknowledged in its session.
func (n *namespace) promotionPending(o *ownerSession) bool {
	for lgn := range o.fresh {
		if n.promotedGrant(lgn) {
			return true
		}
	}
	return false
}

// resumePromoted is a new leader's start of n's sessions: each promoted
// grant its holder's run may not have seen is unacknowledged in the
// session, from the Seq of the message that first listed it, as in the
// session of the leader that made it. The holder's first request clears
// it if it acknowledged that message or a later one (learn); otherwise the
// lease is listed as a promoted grant (listHeld) until acknowledged. With
// faults.PromotionLeaderLocal nothing is: the mark is the leader's own, as
// it once was, and the lease is listed as a renewal.
func (c *Core) resumePromoted(n *namespace) {
	if c.broken.PromotionLeaderLocal {
		return
	}
	for _, p := range n.s.promotedList() {
		o := n.owners[p.Owner]
		if o == nil || p.LGN <= o.since {
			continue // an earlier run's: an orphan, never listed (rule 11)
		}
		if o.fresh == nil {
			o.fresh = map[keyspace.LGN]uint64{}
		}
		o.fresh[p.LGN] = p.Seq
	}
}

// promotionsSeen forgets the marks of the promoted grants to o's run that
// a request acknowledging message ack (in this epoch) has seen: the first
// message that listed each was at or before ack. The standby holds them
// now, and any leader lists them as renewals; a mark kept past this would
// have the next leader (or one restored from a backup) list the lease as a
// promoted grant again, and withhold its pushes to o (sendPushed) until
// o's first request.
func (c *Core) promotionsSeen(now time.Time, n *namespace, o *ownerSession, ack uint64) {
	for _, p := range n.s.promotedList() {
		if first, ok := o.fresh[p.LGN]; ok && p.Owner == o.id && first != 0 && first <= ack {
			c.apply(now, Change{Op: OpPromoted, NS: n.name, Promoted: &PromotedGrant{LGN: p.LGN}})
		}
	}
}

// forgetPromoted forgets the promotion marks of the leases that ended:
// those live says the table no longer has.
func (c *Core) forgetPromoted(now time.Time, n *namespace, live func(keyspace.LGN) bool) {
	for _, p := range n.s.promotedList() {
		if !live(p.LGN) {
			c.apply(now, Change{Op: OpPromoted, NS: n.name, Promoted: &PromotedGrant{LGN: p.LGN}})
		}
	}
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
