package sim

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// Acknowledged writes.
//
// Recovery notification is about the writes an application acknowledged:
// if a key's state disappears, every write acknowledged on it must be
// covered by a loss notification that comes after it — a notification
// sent before the write cannot tell the client to republish it. The
// simulation's application (app.go) takes writes as kv does: an Owner run
// acknowledges a write on every key it holds a lease on, under that lease,
// at each of its steps (every message and timer it handles), except on a
// range whose state it copied out for a handover, until the handover's
// deadline or until it gives the handover up. A stalled run handles
// nothing and so acknowledges nothing.
//
// Two checks follow, at every step of every Owner run:
//
//   - A write under lease L on a key whose loss from L the Manager has
//     recorded (an unmigrated LGN change) is lost, and every notification
//     of that loss was sent before it: a recovery notification violation.
//     (The loss rule reports a change once; a later grant from free is no
//     loss.) This is what a second live process with a restarted Owner's
//     ID does if the Manager frees the old run's ranges at once.
//   - A grant marked migrated from L, taken up with a copy made at time T,
//     loses every write under L on its range after T, and no Lookup hears
//     of it: a migration violation. This is what an Owner that reports a
//     handover done after its deadline, having taken writes again, does.
//
// Losses of a whole Manager state (a new epoch) are left out: they are
// not a table change.

// freeze is a handover whose range takes no write.
type freeze struct{ h owner.Handover }

// thaw ends the freezes of handover h: the application gave it up.
func (a *app) thaw(h owner.Handover) {
	a.frozen = slices.DeleteFunc(a.frozen, func(f freeze) bool { return f.h == h })
}

// writable is the part of rs, held under lease num, on which the
// application takes writes at local time now.
func (a *app) writable(rs keyspace.RangeSet, num owner.LeaseNum, now time.Time) keyspace.RangeSet {
	for _, f := range a.frozen {
		if f.h.Lease == num && now.Before(f.h.Deadline) && rs.OverlapsRange(f.h.Range) {
			rs = rs.Subtract(keyspace.NewRangeSet(f.h.Range))
		}
	}
	return rs
}

// writeBook is what the checker knows of acknowledged writes.
type writeBook struct {
	last map[leaseID][]ackRec          // the last write on each piece of a lease
	lost map[leaseID]keyspace.RangeSet // the ranges whose loss from a lease was recorded
}

type ackRec struct {
	r  keyspace.Range
	at time.Duration
}

func (c *checker) book() *writeBook {
	if c.writes == nil {
		c.writes = &writeBook{last: map[leaseID][]ackRec{}, lost: map[leaseID]keyspace.RangeSet{}}
	}
	return c.writes
}

// acked records the writes Owner run n acknowledges at this step, and
// fails any on a key whose loss from the lease was recorded already.
func (c *checker) acked(n *node) {
	if c.off || c.noWrites || !n.up {
		return
	}
	b := c.book()
	now := n.local(c.s.now)
	c.acks = n.own.AppendHeld(c.acks[:0], now)
	for _, l := range c.acks {
		rs := n.app.writable(keyspace.NewRangeSet(l.Range), l.Num, now)
		if rs.Empty() {
			continue
		}
		id := leaseID{l.Num.Epoch, l.Num.LGN}
		recs := b.last[id]
		for _, r := range rs.Ranges() {
			if lost := b.lost[id]; lost.OverlapsRange(r) {
				c.fail("recovery notification", "%s (incarnation %d) acknowledged a write under lease %+v on %v after the Manager recorded its loss: "+
					"no notification follows it", n.name, n.inc, id, lost.Intersect(keyspace.NewRangeSet(r)))
				return
			}
			if i := slices.IndexFunc(recs, func(a ackRec) bool { return a.r == r }); i >= 0 {
				recs[i].at = c.s.now
			} else {
				recs = append(recs, ackRec{r, c.s.now})
			}
		}
		b.last[id] = recs
	}
}

// lostWrites records that the state of lease id on old ∩ r is lost.
func (c *checker) lostWrites(old, r keyspace.Range, id leaseID) {
	if p, ok := old.Intersect(r); ok {
		b := c.book()
		b.lost[id] = b.lost[id].Add(p)
	}
}

// copiedAfterWrites checks a migrated grant g that Owner run n took up,
// carrying the state of lease from: no write under from on g's range came
// after the copy n received was made.
func (c *checker) copiedAfterWrites(n *node, g owner.Lease, from leaseID) {
	var copied time.Duration
	for _, t := range n.app.pending {
		if t.from == from && t.r.Overlaps(g.Range) {
			copied = max(copied, t.copied)
		}
	}
	for _, a := range c.book().last[from] {
		if a.r.Overlaps(g.Range) && a.at > copied {
			c.fail("migration", "%s took up %v migrated from lease %+v with a copy made at %s, but a write under that lease on %v was acknowledged at %s: "+
				"it is lost, and no Lookup is told", n.name, g.Range, from, copied, a.r, a.at)
			return
		}
	}
}
