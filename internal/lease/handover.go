// Handover and migration (docs/design.md rule 13), and drains: a range that
// moves between two live Owners is handed over with its state before it
// is granted to the new one, within a deadline; a draining Owner hands
// everything over.

package lease

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// handing is one planned move: the holder was asked to hand the state of a
// piece over to the next Owner's run by the deadline.
type handing struct {
	to       string
	inc      uint64
	deadline time.Time
}

// migrateRaced hands over, from a raced request, the pieces whose handover
// can complete as a migration (the next Owner is the live member of the
// incarnation named, and the report came in time); it frees nothing else.
func (c *Core) migrateRaced(now time.Time, n *namespace, o *ownerSession, handed []protocol.Handed) uint64 {
	var ok []protocol.Handed
	for _, h := range handed {
		if to := n.owners[h.To]; to != nil && to.inc == h.Incarnation && to.member && !to.draining && c.handedInTime(now, o, h) {
			ok = append(ok, h)
		}
	}
	if len(ok) == 0 {
		return 0
	}
	return c.releaseOwn(now, n, o, ok, false)
}

// drain starts moving every range of o away (handing the state over), if
// the maintenance gate lets one more Owner drain.
func (c *Core) drain(now time.Time, n *namespace, o *ownerSession) error {
	if o.draining {
		return nil
	}
	var busy []string
	for id, p := range n.owners {
		if p.draining && p.member {
			busy = append(busy, id)
		}
	}
	if gate := max(c.cfg.DrainGate, 1); len(busy) >= gate {
		slices.Sort(busy)
		return fmt.Errorf("%w: %d owners of namespace %q are draining already (%s); at most %d may drain at once: %s",
			ErrGateFull, len(busy), n.name, strings.Join(busy, ", "), gate, gateWayOut(busy))
	}
	o.draining = true
	n.members = true
	c.record(now, n, o)
	return nil
}

// Drain starts draining an Owner at an operator's request (leasehold
// drain): its ranges move to the others, with their state, and it gets
// none. It fails with ErrGateFull while DrainGate Owners are draining.
func (c *Core) Drain(now time.Time, ns, id string) error {
	c.step(now)
	n, err := c.namespace(ns)
	if err != nil {
		return err
	}
	o := n.owners[id]
	if o == nil || !o.member {
		return fmt.Errorf("%w %q in namespace %q", ErrUnknownOwner, id, ns)
	}
	if err := c.drain(now, n, o); err != nil {
		return err
	}
	c.flush(now)
	return nil
}

// handoverEnd is the deadline of a handover asked for of piece r.
type handoverEnd struct {
	at time.Time
	r  keyspace.Range
}

func cmpHandoverEnd(a, b handoverEnd) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return keyspace.Compare(a.r, b.r)
}

// eachDesired calls fn for each piece of r with the owner the desired
// assignment gives it ("" when there are no members).
func (n *namespace) eachDesired(r keyspace.Range, fn func(keyspace.Range, string)) {
	if len(n.desired) == 0 {
		fn(r, "")
		return
	}
	// The first segment that does not end before r starts.
	i, j := 0, len(n.desired)
	for i < j {
		mid := int(uint(i+j) >> 1)
		if n.desired[mid].Range.Last() < r.Start {
			i = mid + 1
		} else {
			j = mid
		}
	}
	for ; i < len(n.desired); i++ {
		p, ok := n.desired[i].Range.Intersect(r)
		if !ok {
			break
		}
		fn(p, n.desired[i].Owner)
	}
}

// canTake reports whether the desired assignment's Owner want may be given
// a range now: a live member, not draining. A plan naming another is stale
// (a membership round is pending) and moves nothing.
func (n *namespace) canTake(want string) bool {
	to := n.owners[want]
	return to != nil && to.member && !to.draining
}

// handover reports whether piece p of o's lease moves to want as a planned
// move — want is a live Owner that is not draining, and planned moves are
// on — and records it in moves, keeping the deadline of a handover
// already asked for. Past the deadline the piece is recalled instead, and
// stays recalled: the expired handover is kept in moves, so a later
// message does not ask for the handover again with a new deadline (the
// Owner may not have seen the recall yet, and would keep the lease).
func (c *Core) handover(now time.Time, n *namespace, o *ownerSession, p keyspace.Range, want string, moves map[keyspace.Range]handing) bool {
	to := n.owners[want]
	if c.cfg.Handover < 0 || want == "" || to == nil || !to.member || to.draining {
		return false
	}
	h, ok := o.handing[p]
	if !ok || h.to != want || h.inc != to.inc {
		within := c.cfg.Handover
		if within == 0 {
			within = c.cfg.Timing.OwnerLease
		}
		h = handing{to: want, inc: to.inc, deadline: now.Add(within)}
		n.handovers.insert(handoverEnd{h.deadline, p}) // reconciled then
	}
	moves[p] = h
	// Too late: recall it, and the state is lost.
	return now.Before(h.deadline)
}
