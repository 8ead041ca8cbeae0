package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// An Owner record is forgotten by one rule (docs/protocol.md, "Forgetting
// Owners"): once the Owner is not a member (silent for a ManagerLease, or
// gone by a goodbye) and is owed nothing, it is removed from the
// replicated state ForgetAfter after it was last heard — by the leader's
// timers, or at once by an operator (leasehold forget). "Owed nothing" is
// what keeps forgetting safe:
//
//   - no entry of the table names it, orphans included. An entry names its
//     Owner by ID, and only the session tells an orphan (an earlier run's
//     entry) from the current run's; a forgotten Owner that came back
//     would start a session with no record of which entries predate it,
//     and be listed an earlier run's lease as its own, under the same LGN:
//     a loss no Lookup would see. Its entries go free when their
//     reservations end, at most ManagerLease after the last message that
//     listed them, and then nothing stops the forgetting.
//   - no planned move hands a range to it: the handover would otherwise
//     be judged against a session that no longer exists.
//
// What the last message to it listed does not matter once the table names
// it for nothing: each lease listed was reserved, the reservation has
// ended (its entry went free only then), and the Owner's lease ran out
// before the reservation did. (The rule before this one waited for that
// list to be empty as well, and so never forgot an Owner killed while it
// held ranges: they expire without a message, and the list stays as it
// was.)
//
// Reservations are kept by range, not by Owner, and forgetting leaves them
// as they are: a range an Owner held is not granted again before its
// reservation ends, whether or not the Owner is remembered.

// ForgetAfter is how long after an Owner was last heard its record is
// forgotten, if it is not a member and is owed nothing: twice ManagerLease.
// It becomes a non-member after one ManagerLease of silence; every
// reservation listing its ranges ends within one more (the last message
// that listed them was sent while it was a member), and its entries go
// free then. So a killed Owner is gone from the table of Owners within
// ForgetAfter of its last request, plus one pass of the Manager's timers
// (at most Renew/4), or of a new leader's takeover when one happened since.
func ForgetAfter(managerLease time.Duration) time.Duration { return 2 * managerLease }

// ErrOwnerOwed refuses to forget an Owner that is a member or is owed
// something; its message says what.
var ErrOwnerOwed = errors.New("manager: the owner cannot be forgotten")

// owed says what keeps Owner o from being forgotten, or "" when nothing
// does (the rule above).
func (c *Core) owed(n *namespace, o *ownerSession) string {
	if o.member {
		return fmt.Sprintf("it is a member (heard from within ManagerLease %s); stop it, or drain it and stop it, first", c.cfg.Timing.ManagerLease)
	}
	if c.broken.ForgetHolder {
		return ""
	}
	if segs := n.heldBy(o.id); len(segs) > 0 {
		return fmt.Sprintf("the lease table still names it for %d ranges (freed when their reservations end, within ManagerLease %s of the last message that listed them)",
			len(segs), c.cfg.Timing.ManagerLease)
	}
	var from []string
	for id, p := range n.owners {
		for _, h := range p.handing {
			if h.to == o.id {
				from = append(from, id)
				break
			}
		}
	}
	if len(from) > 0 {
		slices.Sort(from)
		return "a planned move hands it ranges from " + strings.Join(from, ", ")
	}
	return ""
}

// forgetDead forgets, at a Tick, every Owner of n that is not a member,
// was last heard ForgetAfter ago or more, and is owed nothing.
//
// It also sets n.forgetAt, the earliest time another Owner may be
// forgotten, which NextDeadline wakes the Core at: a busy Manager, whose
// steps keep moving its default deadline, still forgets on time. An Owner
// due but owed something waits for what it is owed: an entry goes free
// when its reservation ends, and a handover ends at its deadline, both
// times the Core wakes at already.
func (c *Core) forgetDead(now time.Time, n *namespace) {
	after := ForgetAfter(c.cfg.Timing.ManagerLease)
	var gone []string
	n.forgetAt = time.Time{}
	for id, o := range n.owners {
		switch {
		case o.member:
		case c.broken.ForgetHolder:
			gone = append(gone, id) // at once, whatever it is owed
		case now.Sub(o.lastHeard) < after:
			c.forgetTimer(n, o)
		case c.owed(n, o) == "":
			gone = append(gone, id)
		}
	}
	slices.Sort(gone) // in order, so a run replays exactly
	for _, id := range gone {
		c.forget(now, n, id)
	}
}

// forgetTimer has the Core wake when o, no member, may be forgotten.
func (c *Core) forgetTimer(n *namespace, o *ownerSession) {
	if o.lastHeard.IsZero() {
		return // a session being created: set at the next Tick
	}
	if t := o.lastHeard.Add(ForgetAfter(c.cfg.Timing.ManagerLease)); n.forgetAt.IsZero() || t.Before(n.forgetAt) {
		n.forgetAt = t
	}
}

func (c *Core) forget(now time.Time, n *namespace, id string) {
	delete(n.owners, id)
	c.stats.Forgotten++
	c.apply(now, Change{Op: OpForget, NS: n.name, Owner: id})
}

// Forget removes an Owner's record at an operator's request (leasehold
// forget), before ForgetAfter: it is refused, wrapping ErrOwnerOwed, while
// the Owner is a member or is owed anything (the rule above), and wraps
// ErrUnknownOwner when no Owner of that ID is recorded.
func (c *Core) Forget(now time.Time, ns, id string) error {
	c.step(now)
	n, err := c.namespace(ns)
	if err != nil {
		return err
	}
	o := n.owners[id]
	if o == nil {
		return fmt.Errorf("%w %q in namespace %q: no owner of that ID is recorded", ErrUnknownOwner, id, ns)
	}
	if why := c.owed(n, o); why != "" {
		return fmt.Errorf("%w: %q in namespace %q: %s", ErrOwnerOwed, id, ns, why)
	}
	c.forget(now, n, id)
	c.flush(now)
	return nil
}

// Undrain cancels the drain of an Owner (leasehold drain --cancel): it is
// given ranges again as a member, and no longer counts at the maintenance
// gate. An Owner that is not draining is left as it is. An Owner that
// asked to drain itself (it is stopping) asks again with its next request,
// and drains again if the gate lets it.
func (c *Core) Undrain(now time.Time, ns, id string) error {
	c.step(now)
	n, err := c.namespace(ns)
	if err != nil {
		return err
	}
	o := n.owners[id]
	if o == nil {
		return fmt.Errorf("%w %q in namespace %q", ErrUnknownOwner, id, ns)
	}
	if !o.draining && !o.wantDrain {
		return nil
	}
	o.draining, o.wantDrain = false, false
	n.members = true
	c.record(now, n, o)
	n.push(o) // tell it the drain is off (and grant it its share)
	c.flush(now)
	return nil
}

// gateWayOut is the end of the gate-full refusal: what an operator can do
// about the Owners that hold the gate.
func gateWayOut(busy []string) string {
	return fmt.Sprintf("cancel a drain with 'leasehold drain --cancel %s', or stop the drained Owner (one that has left frees the gate), or raise the Manager's --drain-gate",
		busy[0])
}
