// A lease request's way in (docs/design.md rules 1, 7, 11, 16 and 18):
// StepLease checks it, finds its session (dropping a dead run's, a
// duplicate or an overtaken one), learns what it says of its Owner, drops
// it if it raced the Manager's latest message (the race filter, rule 1),
// and otherwise releases what it omits and answers it.

package lease

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

func (c *Core) noRaceFilter() bool {
	return c.broken.NoRaceFilter
}

// StepLease handles a LeaseRequest received at now. An error means the
// request was malformed or for an unknown namespace; it changed nothing.
func (c *Core) StepLease(now time.Time, req *protocol.LeaseRequest) error {
	c.step(now)
	c.stats.LeaseRequests++
	n, err := c.namespace(req.Namespace)
	if err != nil {
		return err
	}
	if err := validateLeaseRequest(req); err != nil {
		return err
	}
	o, err := c.session(now, n, req)
	if o == nil || err != nil {
		return err
	}
	// The compact form is expanded here, before anything reads Held: from
	// here on a request means what its complete form would.
	held, heldKnown := c.expandHeld(o, req)
	o.peerHeld = held // nil when not known
	c.learn(now, n, o, req)
	fresh := o.mySeq == c.seqBase // nothing sent yet in this session
	if !fresh && !(req.AckEpoch == c.st.epoch && req.AckSeq == o.mySeq) && !c.noRaceFilter() {
		c.dropRaced(now, n, o, req)
		return nil
	}
	c.accept(now, n, o, req, held, heldKnown, fresh)
	return nil
}

// session returns the session req belongs to: a new one for an Owner not
// seen before, or for a new incarnation of one (its old run's ranges are
// orphans, kept in the table until their reservations end: rule 11,
// orphans.go). It returns nil for a request of a dead run, a
// duplicate or one overtaken (rule 18), which is dropped.
func (c *Core) session(now time.Time, n *namespace, req *protocol.LeaseRequest) (*ownerSession, error) {
	o := n.owners[req.Owner]
	if err := c.checkLimits(n, o, req); err != nil {
		return nil, err
	}
	if o == nil {
		o = &ownerSession{id: req.Owner, addr: req.Addr, inc: req.Incarnation, mySeq: c.seqBase}
		n.owners[req.Owner] = o
		c.record(now, n, o)
	}
	switch {
	case req.Incarnation < o.inc:
		c.stats.StaleDropped++
		return nil, nil // from a dead run of this owner
	case req.Incarnation > o.inc:
		c.restarted(now, n, o, req)
	}
	if req.Seq <= o.peerSeq {
		c.stats.StaleDropped++
		return nil, nil // duplicate or overtaken
	}
	o.peerSeq = req.Seq
	o.lastHeard = now
	return o, nil
}

// restarted opens a new session for a new incarnation of o's Owner.
func (c *Core) restarted(now time.Time, n *namespace, o *ownerSession, req *protocol.LeaseRequest) {
	c.stats.OwnerRestarts++
	if c.broken.FreeAtRestart {
		c.loseOwner(now, n, o)
	}
	*o = ownerSession{id: req.Owner, addr: req.Addr, inc: req.Incarnation, member: o.member, since: n.s.lgn, mySeq: c.seqBase}
	c.record(now, n, o)
}

// learn takes in what a request in sequence says of its Owner, whether or
// not it raced: which grants it has seen (rule 6), whether it leaves, its
// capacity, its load and whether it drains.
func (c *Core) learn(now time.Time, n *namespace, o *ownerSession, req *protocol.LeaseRequest) {
	if req.AckEpoch == c.st.epoch {
		// The owner has seen a message at or after AckSeq, and each of
		// those listed the grants first sent by then.
		c.promotionsSeen(now, n, o, req.AckSeq)
		for lgn, first := range o.fresh {
			if first != 0 && first <= req.AckSeq {
				delete(o.fresh, lgn)
			}
		}
	}
	if o.member == req.Leaving {
		o.member = !req.Leaving
		n.members = true
		c.record(now, n, o)
		if o.member {
			// Back before a round placed its ranges anew: their holders
			// kept them for it (rule 13), and hand them over now.
			for _, r := range n.wants[o.id] {
				n.markDirty(r)
			}
		}
	}
	c.heard(n, o)
	if req.Capacity != o.capacity && req.Capacity >= 0 {
		o.capacity = req.Capacity
		n.members = true
		c.record(now, n, o)
	}
	if req.Window > 0 {
		c.recordLoad(n, o, req)
	}
	if req.Zone != o.zone {
		o.zone = req.Zone
		c.record(now, n, o)
	}
	c.learnInSync(now, n, o, req.InSync)
	o.wantDrain = req.Draining
	if req.Draining && !o.draining {
		_ = c.drain(now, n, o) // refused while the gate is full: asked again at each request
	}
}

// dropRaced is the race filter (rule 1): the owner sent req before it
// processed our latest message, so it raced (C§2.3.2, Figure 7). It is
// dropped, and ours is sent again after a random backoff.
func (c *Core) dropRaced(now time.Time, n *namespace, o *ownerSession, req *protocol.LeaseRequest) {
	c.stats.RacesDropped++
	if o.resendAt.IsZero() {
		o.resendAt = now.Add(c.backoff())
		n.resends.insert(ownerTimer{o.resendAt, o.id})
	}
	// Nothing it says frees a range or clears a reservation: a message
	// that crossed ours may have crossed a grant, and it is where a
	// mistaken or forged control message would hide. A goodbye waits:
	// it names no lease, so it could free a range our crossing message
	// just granted; the Owner says it again until an answer in order
	// lists no lease (owner.Core). A handover the Owner completed is
	// acted on as a migration only: it names the lease (the LGN) it
	// hands, which no crossing grant can carry, and the range goes
	// straight to the Owner it names, never free. Acting on it now
	// matters: a draining Owner reports its handovers and stops, and a
	// report that waited for its next request in order could find it
	// gone, and the range's state lost.
	if len(req.Handed) > 0 {
		c.stats.Releases += c.migrateRaced(now, n, o, req.Handed)
		c.flush(now)
	}
}

// accept acts on a request in order: what it omits of what it was sent
// is released (rule 7), and it is answered.
func (c *Core) accept(now time.Time, n *namespace, o *ownerSession, req *protocol.LeaseRequest, held []protocol.Lease, heldKnown, fresh bool) {
	switch {
	case heldKnown && (!fresh || c.seqBase == 0):
		c.stats.Releases += c.release(now, n, o, held, req.Handed)
	case len(req.Handed) > 0 || req.Leaving:
		// A fresh session under a new leader may answer a request sent
		// before the owner heard the old leader's last grant: what it omits
		// proves nothing (with no earlier leader there was no such grant).
		// Nor does a compact Held we cannot expand say what it omits. What
		// the owner did on its own still stands, as in a raced request.
		c.stats.Releases += c.releaseOwn(now, n, o, req.Handed, req.Leaving)
	}
	n.push(o) // answer every accepted request
	c.flush(now)
}

func validateLeaseRequest(req *protocol.LeaseRequest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
	}
	if req.Owner == "" {
		return bad("lease request without an owner ID")
	}
	if req.Incarnation == 0 {
		return bad("lease request from %q without an incarnation", req.Owner)
	}
	if req.Seq == 0 {
		return bad("lease request from %q with sequence number 0", req.Owner)
	}
	if len(req.Zone) > protocol.MaxZoneLen {
		return bad("lease request from %q has a zone of %d bytes; at most %d allowed (protocol.MaxZoneLen)", req.Owner, len(req.Zone), protocol.MaxZoneLen)
	}
	for _, l := range req.Held {
		if !l.Range.Valid() || l.LGN == 0 {
			return bad("lease request from %q holds invalid lease %v LGN %d", req.Owner, l.Range, l.LGN)
		}
	}
	if req.HeldAsAcked && len(req.Held) > 0 {
		return bad("lease request from %q says HeldAsAcked and lists %d leases in Held; the compact form lists none",
			req.Owner, len(req.Held))
	}
	return nil
}

// expandHeld returns what req holds, and whether that is known. Held in
// full is known. HeldAsAcked says the owner holds exactly the leases of our
// message AckSeq; we remember only our latest message of this session, so
// it is known only for a request that acknowledges that one. Anything else
// (a raced request, a fresh session whose owner acknowledges an earlier
// leader's or a forgotten session's message) is unknown, and releases
// nothing: not releasing is always safe, since the owner refuses renewals
// of what it does not hold and then lists its set in full.
func (c *Core) expandHeld(o *ownerSession, req *protocol.LeaseRequest) ([]protocol.Lease, bool) {
	if !req.HeldAsAcked {
		return req.Held, true
	}
	if req.AckEpoch != c.st.epoch || req.AckSeq != o.mySeq || o.mySeq == c.seqBase {
		return nil, false
	}
	return o.sentLeases, true
}

// backoff draws the random wait before a resend (C§2.3.2).
func (c *Core) backoff() time.Duration {
	t := c.cfg.Timing
	if t.BackoffMax <= t.BackoffMin {
		return t.BackoffMin
	}
	return t.BackoffMin + time.Duration(c.rng.Int64N(int64(t.BackoffMax-t.BackoffMin)))
}
