// The Manager's answer to an Owner, which renews what it lists (docs/design.md
// rules 2, 4, 6 and 16): every lease of the Owner's run is listed again
// and reserved for a ManagerLease from now, with a handover if it moves,
// or omitted to recall it; a grant is listed as a grant until
// acknowledged, and a steady-state renewal goes in the compact form.

package lease

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// heard records when a member falls silent, after a request from it.
func (c *Core) heard(n *namespace, o *ownerSession) {
	if o.member {
		n.silences.insert(ownerTimer{o.lastHeard.Add(c.cfg.Timing.ManagerLease), o.id})
	}
}

// push has the next flush send o a message.
func (n *namespace) push(o *ownerSession) {
	if !o.push {
		o.push = true
		n.pushing = append(n.pushing, o.id)
	}
}

// sendTo builds the owner's complete lease set and queues it (C§2.3):
// renewals of what it holds and should keep, grants of free ranges the
// desired assignment gives it, and by omission recalls of everything else.
// Every range listed is reserved for ManagerLease from now, which is after
// the owner sent the request this answers (C§2.3.1).
// maxOwnerLeases caps the leases one Owner is granted up to: half of what
// a LeaseResponse may list (wire.MaxLeases), so that a message listing
// every piece of them, split at the desired assignment's boundaries, still
// fits. (A variable only so that tests can make it small.)
var maxOwnerLeases = wire.MaxLeases / 2

func (c *Core) sendTo(now time.Time, n *namespace, o *ownerSession) {
	var leases []protocol.Lease
	var handovers []protocol.Handover
	if o.member {
		c.grantWanted(now, n, o)
		leases, handovers = c.listHeld(now, n, o)
	}
	c.stamp(o, leases)
	msg := &protocol.LeaseResponse{
		Namespace:   n.name,
		Owner:       o.id,
		Incarnation: o.inc,
		Epoch:       c.st.epoch,
		Seq:         o.mySeq,
		AckSeq:      o.peerSeq,
		Leases:      leases,
		OwnerLease:  c.cfg.Timing.OwnerLease,
		Renew:       c.cfg.Timing.Renew,
		Handovers:   handovers,
		Drain:       drainState(o),
	}
	msg.Standbys, msg.StandbyFor = c.standbyLists(n, o, leases)
	if c.renewsHeld(o, leases) {
		// A steady-state renewal: the owner expands it with the Held of
		// its request AckSeq, and gets exactly this list.
		msg.Leases, msg.RenewHeld = nil, true
	}
	c.out.Owners = append(c.out.Owners, OwnerMessage{To: o.id, Msg: msg})
}

// listHeld lists the leases of o's run in the message to o, each piece
// renewed (rule 2: reserved from now for a ManagerLease), renewed with a
// handover to the Owner that wants it (rule 13), or omitted to recall it
// (rule 4); a grant is listed as a grant until acknowledged (rule 6).
func (c *Core) listHeld(now time.Time, n *namespace, o *ownerSession) ([]protocol.Lease, []protocol.Handover) {
	until := now.Add(c.cfg.Timing.ManagerLease)
	var handovers []protocol.Handover
	handing := map[keyspace.Range]handing{}
	// What is listed is reserved until `until`: adjacent pieces as one
	// range (extend is pointwise, so this is the same), which is one
	// reservation segment already when they were renewed together
	// last time, and not a split and a join per piece.
	held := n.heldByRun(o)
	leases := make([]protocol.Lease, 0, len(held)+len(o.fresh)) // pieces: one a segment, usually
	reserve := make([]keyspace.Range, 0, len(held))
	for _, s := range held {
		n.eachDesired(s.Range, func(p keyspace.Range, want string) {
			switch {
			case want == o.id: // renewed
			case c.handover(now, n, o, p, want, handing):
				h, to := handing[p], n.owners[want]
				handovers = append(handovers, protocol.Handover{Range: p, LGN: s.Entry.LGN, To: want, Addr: to.addr,
					Incarnation: to.inc, Within: h.deadline.Sub(now)})
			case want != "" && !n.canTake(want):
				// Renewed: the plan still names an Owner that died or is
				// draining, until the next membership round places the
				// range anew (MembershipEvery). A recall now would free it
				// with its state lost, for an Owner that cannot take it:
				// in a namespace with standbys, a range its holder kept
				// in sync elsewhere (rule 13). A plan that names no Owner
				// (the last one draining) still recalls it.
			case o.sent.OverlapsRange(p):
				c.stats.Recalls++ // omitted now, listed last time
				return
			default:
				return // recalled earlier
			}
			// Grants (made here, or by a migration) are listed as
			// grants, new leases, until acknowledged.
			_, grant := o.fresh[s.Entry.LGN]
			leases = append(leases, protocol.Lease{Range: p, LGN: s.Entry.LGN, Grant: grant, Migrated: grant && s.Entry.Migrated,
				Promoted: grant && n.promotedGrant(s.Entry.LGN)})
			if l := len(reserve) - 1; l >= 0 && reserve[l].End == p.Start && p.Start != 0 {
				reserve[l].End = p.End
			} else {
				reserve = append(reserve, p)
			}
		})
	}
	for _, r := range reserve {
		n.res.extend(r, until)
	}
	o.handing = handing
	if len(leases) == 0 {
		leases = nil // as when nothing was listed
	}
	slices.SortFunc(leases, func(a, b protocol.Lease) int { return keyspace.Compare(a.Range, b.Range) })
	return leases, handovers
}

// stamp numbers the message to o that lists leases, and records what it
// lists: the grants first sent in it (rule 6), and what a request that
// omits them releases (rule 7).
func (c *Core) stamp(o *ownerSession, leases []protocol.Lease) {
	o.mySeq++
	for lgn, first := range o.fresh {
		if first == 0 {
			o.fresh[lgn] = o.mySeq
		}
	}
	o.push = false
	o.resendAt = time.Time{}
	sent := make([]keyspace.Range, len(leases))
	for i, l := range leases {
		sent[i] = l.Range
	}
	o.sent = keyspace.NewRangeSet(sent...)
	o.sentLeases = leases
}

// renewsHeld reports whether leases, a message to o, may be sent as
// RenewHeld: it renews exactly what o's request peerSeq held — the same
// ranges under the same LGNs, none a grant (a Held not known is nil, and matches no list).
func (c *Core) renewsHeld(o *ownerSession, leases []protocol.Lease) bool {
	if len(leases) == 0 || slices.ContainsFunc(leases, func(l protocol.Lease) bool { return l.Grant }) {
		return false
	}
	if c.broken.RenewHeldSubset {
		return renewsHeldSubset(leases, o.peerHeld)
	}
	return protocol.SameHeld(leases, o.peerHeld)
}

func drainState(o *ownerSession) protocol.Drain {
	switch {
	case o.draining:
		return protocol.DrainActive
	case o.wantDrain:
		return protocol.DrainWaiting
	}
	return protocol.DrainNone
}
