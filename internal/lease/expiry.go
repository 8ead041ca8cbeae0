// Timers and expiry (docs/design.md rules 3 and 12): the Core's deadlines
// (resends, silent Owners, handovers, reservations) and the reconciliation
// that frees a range whose reservation ran out.

package lease

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// step starts a step at now that may change the Core: every exported
// method that changes it calls step first.
func (c *Core) step(now time.Time) {
	c.lastNow = now
	c.wake = time.Time{}
}

// NextDeadline is the local time by which Tick must be called next.
func (c *Core) NextDeadline() time.Time {
	if c.wake.IsZero() {
		c.wake = c.nextDeadline()
	}
	return c.wake
}

func (c *Core) nextDeadline() time.Time {
	d := c.lastNow.Add(c.cfg.Timing.Renew / 4)
	min := func(t time.Time) {
		if !t.IsZero() && t.Before(d) {
			d = t
		}
	}
	for _, n := range c.ns {
		min(n.wakeAt(d))
		if n.members {
			min(n.membersAt) // a membership change waits to be planned
		}
		if c.cfg.Rebalance != nil {
			min(n.planAt)
		}
		min(firstTimer(n.resends, c.resendCurrent(n)))
		min(firstTimer(n.silences, c.silenceCurrent(n)))
		min(n.forgetAt)
	}
	return d
}

// ownerTimer is a time set for a session: a race resend (resends) or when
// a member falls silent (silences).
type ownerTimer struct {
	at time.Time
	id string
}

func cmpOwnerTimer(a, b ownerTimer) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// resendCurrent reports whether an entry of n.resends is still its
// session's race resend.
func (c *Core) resendCurrent(n *namespace) func(ownerTimer) bool {
	return func(e ownerTimer) bool {
		o := n.owners[e.id]
		return o != nil && o.resendAt.Equal(e.at)
	}
}

// silenceCurrent reports whether an entry of n.silences is still when its
// session, a member, falls silent.
func (c *Core) silenceCurrent(n *namespace) func(ownerTimer) bool {
	return func(e ownerTimer) bool {
		o := n.owners[e.id]
		return o != nil && o.member && o.lastHeard.Add(c.cfg.Timing.ManagerLease).Equal(e.at)
	}
}

// firstTimer returns the earliest current time in ts (zero if none),
// dropping the out-of-date entries before it.
func firstTimer(ts *ordered[ownerTimer], current func(ownerTimer) bool) time.Time {
	for {
		e, ok := ts.first()
		if !ok || current(e) {
			return e.at
		}
		ts.deleteAt(pos{})
	}
}

// Tick runs the timers: owner liveness, lease expiry, deferred grants, race
// resends, lookup session expiry and log truncation.
func (c *Core) Tick(now time.Time) {
	c.step(now)
	t := c.cfg.Timing
	for _, n := range c.ns {
		for _, o := range n.owners {
			if o.member && !now.Before(o.lastHeard.Add(t.ManagerLease)) {
				// Silent for a whole manager lease: its leases have run out
				// too. Assign its share to the others.
				o.member = false
				n.members = true
				c.record(now, n, o)
			}
		}
		n.s.table.Truncate(now)
		if c.broken.PromoteEarly {
			c.promoteEarly(now, n)
		}
	}
	c.flush(now)
	for _, name := range c.Namespaces() { // after the flush, which frees what expired
		c.forgetDead(now, c.ns[name])
	}
}

// reconcile expires leases whose reservation ended, and marks the owners
// that need a message now: those holding a range the desired assignment
// gives elsewhere (recall), and those a free range can be granted to.
//
// It visits only the table segments that may need it: those overlapping a
// dirty range, a reservation that has run out, or a handover past its
// deadline. Everywhere else nothing it looks at has changed since it last
// looked, and what it would wait for (a reservation's end, a deadline) is
// in res's ends or in handovers, which wake it at that time (wakeAt).
func (c *Core) reconcile(now time.Time, n *namespace) (expired uint64) {
	n.res.due(now, n.markDirty)
	for {
		h, ok := n.handovers.first()
		if !ok || h.at.After(now) {
			break
		}
		n.handovers.deleteAt(pos{})
		n.markDirty(h.r)
	}
	// Whole segments, as a walk of the whole table would see them.
	dirty := coalesce(n.dirty)
	n.dirty = nil
	for i, r := range dirty {
		dirty[i] = keyspace.Range{Start: n.s.table.At(r.Start).Range.Start, End: n.s.table.At(r.Last()).Range.End}
	}
	dirty = coalesce(dirty)
	// Expiry: the reservation ran out, so the holder's own lease ran out
	// earlier (C§2.3.1).
	for _, r := range dirty {
		for _, s := range n.s.table.Overlapping(r) {
			if s.Entry.Owner == "" {
				continue
			}
			gone, _ := n.res.free(s.Range, now)
			for _, p := range gone.Ranges() {
				// What its standby is in sync on goes to it (rule 21);
				// the rest is freed.
				for _, q := range c.promote(now, n, s.Entry, p) {
					c.set(now, n, q, leasetable.Entry{})
					expired++
				}
			}
		}
	}
	for _, r := range dirty {
		for _, s := range n.s.table.Overlapping(r) {
			n.eachDesired(s.Range, func(p keyspace.Range, want string) {
				switch holder := s.Entry.Owner; {
				case n.orphan(s.Entry):
					// An earlier run's: it expires when its reservation ends.
				case holder != "" && holder != want:
					o := n.owners[holder]
					if o == nil || !o.sent.OverlapsRange(p) || (want != "" && !n.canTake(want)) {
						break // a stale plan's: kept until one names a live Owner
					}
					if h, ok := o.handing[p]; ok && h.to == want && now.Before(h.deadline) {
						break // handing over; recalled at the deadline
					}
					n.push(o) // recall, or ask for a handover, now
				case holder != "":
					if o := n.owners[holder]; o != nil && !o.sent.CoversRange(p) {
						n.push(o) // renew what the last message left out
					}
				case want != "":
					if free, _ := n.res.free(p, now); !free.Empty() {
						if o := n.owners[want]; o != nil {
							n.push(o) // grant
						}
					}
				}
			})
		}
	}
	return expired
}

// markDirty has the next flush reconcile r.
func (n *namespace) markDirty(r keyspace.Range) {
	if l := len(n.dirty) - 1; l >= 0 && n.dirty[l].End == r.Start && r.Start != 0 {
		n.dirty[l].End = r.End // the common case: adjacent ranges in key order
		return
	}
	n.dirty = append(n.dirty, r)
}

// wakeAt is when reconcile has something to do without a change: the
// earliest end of a pending reservation or handover deadline (zero: none),
// exact if it is no later than by, else some time after by
// (reservations.nextEnd).
func (n *namespace) wakeAt(by time.Time) time.Time {
	t := n.res.nextEnd(by)
	if h, ok := n.handovers.first(); ok && (t.IsZero() || h.at.Before(t)) {
		t = h.at
	}
	return t
}

// coalesce sorts rs and merges the ranges that overlap or touch, in place.
func coalesce(rs []keyspace.Range) []keyspace.Range {
	slices.SortFunc(rs, func(a, b keyspace.Range) int { return cmp.Compare(a.Start, b.Start) })
	out := rs[:0]
	for _, r := range rs {
		if l := len(out) - 1; l >= 0 && (out[l].End == 0 || r.Start <= out[l].End) {
			if out[l].End != 0 && (r.End == 0 || r.End > out[l].End) {
				out[l].End = r.End
			}
			continue
		}
		out = append(out, r)
	}
	return out
}
