// Release (docs/design.md rule 7): an accepted request that omits a range
// it was sent frees it at once; an Owner that leaves or is lost frees what
// it holds. A new incarnation's old ranges are orphans (orphans.go, rule
// 11).

package lease

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// loseOwner frees every range of an owner incarnation in the table at once,
// reservations left as they are: the rule for a new incarnation before
// orphans (orphans.go), kept as the broken rule faults.FreeAtRestart.
// The old process, if it still runs, acknowledges writes after the loss is
// reported, and no later change reports them.
func (c *Core) loseOwner(now time.Time, n *namespace, o *ownerSession) {
	for _, r := range n.heldBy(o.id) {
		c.set(now, n, r.Range, leasetable.Entry{})
		// Still reserved, so reconciled again when that ends; marked all
		// the same, as everything freed is.
		n.markDirty(r.Range)
	}
}

// heldBy returns the table segments the owner holds, in key order, from
// the table's owner index (not a scan of the table: it is asked on every
// lease request).
func (n *namespace) heldBy(id string) []leasetable.Segment { return n.s.table.Owned(id) }

// release frees every part of the owner's table entries that its accepted
// request no longer lists: the owner dropped them after processing our
// latest message (a recall acknowledged by omission, or a refused renewal),
// and the race filter guarantees no earlier message of ours can give them
// back, so they may be granted at once (C§2.3.2).
//
// A piece the owner omits goes to the lease's standby where that one is
// recorded in sync on it, as a promoted grant (rule 21), instead of being
// freed — whether our latest message still listed it (renewed: the owner
// gave it up on its own, its lease having run out on its side before a
// renewal reached it, or it left) or recalled it (a handover not reported
// by its deadline, rule 13, or a move with planned moves off). Either way
// the owner dropped the piece before it sent the request that omits it,
// so its belief ended first, by the race filter's argument that lets a
// free be granted at once; and it acknowledged no write on the piece the
// standby lacks (rule 24: every write, those taken again after a failed
// handover's deadline included, is stored at the standby before it is
// acknowledged; a handover's copy-out takes none) — the piece was in the
// fill that put the standby in sync on it (rule 23: the mark is per piece,
// so a piece the holder had dropped before the fill is not promoted). A
// copy a late handover left at the next Owner is never served: that Owner
// is granted the piece migrated from this lease only on a handover
// reported in time, and the piece is no longer this lease's. Freed, the
// range would be reported lost though its standby holds every
// acknowledged write: a live Owner starved of its renewals for one owner
// lease lost a zone's worth of ranges so, and one that could not get its
// handover copies through by the deadline 14 ranges.
func (c *Core) release(now time.Time, n *namespace, o *ownerSession, held []protocol.Lease, handed []protocol.Handed) (freed uint64) {
	segs := n.heldByRun(o)
	if sameSegments(held, segs) {
		return 0 // a renewal of exactly what it holds: nothing to free
	}
	// The held leases by LGN: each segment is compared with the leases
	// under its own LGN only (one, in steady state), not with all of them.
	byLGN := make(map[keyspace.LGN][]keyspace.Range, len(held))
	for _, h := range held {
		byLGN[h.LGN] = append(byLGN[h.LGN], h.Range)
	}
	for _, s := range segs {
		var kept keyspace.RangeSet
		if hs := byLGN[s.Entry.LGN]; len(hs) == 1 && hs[0].Overlaps(s.Range) {
			kept = keyspace.NewRangeSet(hs[0])
		} else if len(hs) > 1 {
			var ks []keyspace.Range
			for _, h := range hs {
				if h.Overlaps(s.Range) {
					ks = append(ks, h)
				}
			}
			kept = keyspace.NewRangeSet(ks...)
		}
		if kept.CoversRange(s.Range) {
			continue // all of it kept: nothing freed, every handover it overlaps still listed
		}
		for _, p := range keyspace.NewRangeSet(s.Range).Subtract(kept).Ranges() {
			n.markDirty(p)
			freed++
			// A piece whose state the holder handed over goes straight to
			// the next Owner, marked migrated: Lookups see the LGN change
			// from this lease to the next with nothing lost (C§2.1.2).
			rest := keyspace.NewRangeSet(p)
			for _, h := range handed {
				q, ok := h.Range.Intersect(p)
				if !ok || h.LGN != s.Entry.LGN {
					continue
				}
				if to := n.owners[h.To]; to != nil && to.inc == h.Incarnation && to.member && !to.draining && c.handedInTime(now, o, h) {
					c.grant(now, n, to, q, s.Entry.LGN)
					rest = rest.Subtract(keyspace.NewRangeSet(q))
					c.stats.Migrations++
				}
			}
			for _, q := range rest.Ranges() {
				if c.broken.MigrateUnhanded && c.migrateUnhanded(now, n, o, q, s.Entry.LGN) {
					continue
				}
				// Given up on its own or recalled: promoted where in sync
				// (rule 21), the rest freed. With planned moves off a
				// recall moves a piece without its state, to the Owner
				// the plan names (rule 13): a grant to the standby would
				// never be listed to it, only freed a request later.
				toFree := []keyspace.Range{q}
				if c.cfg.Handover >= 0 || o.sent.CoversRange(q) {
					toFree = c.promote(now, n, s.Entry, q)
				}
				for _, f := range toFree {
					c.set(now, n, f, leasetable.Entry{})
					n.res.set(f, time.Time{})
				}
			}
		}
		for r := range o.handing {
			if r.Overlaps(s.Range) && !kept.OverlapsRange(r) {
				delete(o.handing, r)
			}
		}
	}
	return freed
}

// sameSegments reports whether held lists exactly segs, in order: the same
// ranges under the same LGNs. Each segment is then kept whole, and release
// has nothing to do.
func sameSegments(held []protocol.Lease, segs []leasetable.Segment) bool {
	if len(held) != len(segs) {
		return false
	}
	for i, s := range segs {
		if held[i].Range != s.Range || held[i].LGN != s.Entry.LGN {
			return false
		}
	}
	return true
}

// releaseOwn releases what a raced request says the owner gave up by its
// own act: the pieces it handed over (under the LGN it handed), or, when it
// is leaving, everything. Omissions in a raced request prove nothing, so
// nothing else is released.
func (c *Core) releaseOwn(now time.Time, n *namespace, o *ownerSession, handed []protocol.Handed, leaving bool) uint64 {
	var keep []protocol.Lease
	if !leaving {
		for _, s := range n.heldByRun(o) {
			var gone keyspace.RangeSet
			for _, h := range handed {
				if h.LGN == s.Entry.LGN {
					gone = gone.Add(h.Range)
				}
			}
			for _, r := range keyspace.NewRangeSet(s.Range).Subtract(gone).Ranges() {
				keep = append(keep, protocol.Lease{Range: r, LGN: s.Entry.LGN})
			}
		}
	}
	return c.release(now, n, o, keep, handed)
}
