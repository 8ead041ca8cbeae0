package owner

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// LeaseNum names one lease: an LGN within a Manager epoch. An operation that
// saw the same LeaseNum before and after ran under one continuous lease
// (C§3.2; PRS's ownership handle, P§2.2).
type LeaseNum struct {
	Epoch uint64
	LGN   keyspace.LGN
}

// Lease is a lease the Owner holds.
type Lease struct {
	Range keyspace.Range
	Num   LeaseNum
	// Expiry is when the Owner stops believing the lease, on its own clock.
	Expiry time.Time
	// Migrated marks a grant that carries the previous holder's state: the
	// state it handed over for this range is to be taken up, not thrown
	// away (C§2.1.2). A grant without it starts empty.
	Migrated bool
	// Promoted marks a grant to this Owner as the lease's standby after
	// the holder's lease ended (docs/design.md rule 21): the copy it kept
	// as standby for the old lease (StandbyFor) is now the serving copy.
	// Migrated is set too.
	Promoted bool
}

// OwnershipChange reports one step's change of the held set: Revoked ranges
// are no longer held (recalled, expired, refused, handed over or replaced);
// Granted leases are newly held; Handovers are planned moves the Manager
// asks for. Within a change, revocations happened first.
type OwnershipChange struct {
	Revoked   []keyspace.Range
	Granted   []Lease
	Handovers []Handover
	// Paired lists the pairings of held leases that changed in this step,
	// and StandbyFor, when StandbyForChanged, the complete new set of
	// leases this Owner is the standby for (core_standby.go).
	Paired            []Pairing
	StandbyFor        []Pairing
	StandbyForChanged bool
}

// Handover asks the application to hand the state of Range (held under
// Lease) over to the Owner To at Addr before Deadline, on this Owner's
// clock, and then to call HandoverDone. The lease stays valid meanwhile;
// the application should stop changing the range's state while it copies
// it. Past the deadline the Manager recalls the range without the state.
type Handover struct {
	Range       keyspace.Range
	Lease       LeaseNum
	To          string
	Addr        string
	Incarnation uint64
	Deadline    time.Time
}

// CoreConfig configures a Core.
type CoreConfig struct {
	Namespace string
	ID        string // stable across restarts
	Addr      string // where Lookups send requests for the Owner's keys
	// Incarnation must grow with every start of the Owner process (the
	// runtime uses the start time in nanoseconds).
	Incarnation uint64
	Timing      protocol.Timing
	Seed        uint64 // seeds the race-backoff jitter
	// Handovers says the application hands state over (it takes the
	// OwnershipChange.Handovers and calls HandoverDone). Without it every
	// handover is declined at once: the range is given up as if recalled.
	Handovers bool
	// Capacity weighs this Owner's share of the load; 0 means 1.
	Capacity float64
	// Load, if set, is asked at every request for the requests per held
	// range and the hot keys since the last call, and the window they span.
	Load func(now time.Time) ([]protocol.RangeLoad, []protocol.KeyLoad, time.Duration)
	// ConfirmReleases keeps a lease given up before it ends (recalled, or
	// its handover declined) listed in the requests, though no longer held,
	// until Released names it or it would have run out: for an embedder
	// whose application learns of the change only later (the agent,
	// docs/agent.md), so that the Manager frees the range only once the
	// application has stopped serving it (core_release.go).
	ConfirmReleases bool
	// Zone is the Owner's failure domain (at most protocol.MaxZoneLen
	// bytes): the Manager puts each range's standby in another zone than
	// its holder's when one has capacity (docs/design.md rule 22).
	Zone string
}

// Core is the Owner's deterministic state machine: it is fed clock readings
// and Manager messages, and returns the requests to send and the ownership
// changes to report. It starts no goroutines, opens no sockets and never
// reads a clock. It is not safe for concurrent use.
type Core struct {
	cfg CoreConfig
	rng *rand.Rand
	// broken holds the rules the simulation breaks on purpose
	// (core_broken.go); the zero value, always outside it, breaks none.
	broken faults.Set

	seq    uint64    // Seq of the last LeaseRequest sent
	sentAt time.Time // when it was sent: the start of any lease it earns
	// unanswered says no answer in order has come to request seq yet
	// (in-sync reports wait for one: InSync).
	unanswered bool
	// inOrder is when the latest answer in order came, and raced counts
	// the answers dropped as raced since: what a lease that runs out
	// unrenewed is logged with (Owner.run).
	inOrder time.Time
	raced   uint64
	// sentAts keeps when each recent request was sent, so that grants in a
	// raced answer can be timed from the request they answer.
	sentAts   map[uint64]time.Time
	peerEpoch uint64 // Manager epoch last heard
	peerSeq   uint64 // highest Manager Seq heard in peerEpoch
	// peerLeases is the lease list of the Manager's message peerSeq (of
	// peerEpoch), if peerKnown: while the held set is exactly that list, a
	// request says so by HeldAsAcked instead of listing it.
	peerLeases []protocol.Lease
	peerKnown  bool
	// sentHeld keeps the Held of each recent request (consecutive requests
	// share one slice while the held set stays the same), to expand a
	// response that renews it by RenewHeld.
	sentHeld map[uint64][]protocol.Lease
	epoch    uint64 // the epoch of the held leases

	held       []Lease // sorted by Range.Start, disjoint
	expired    uint64  // leases that ran out before a renewal reached the Owner
	nextRenew  time.Time
	resendAt   time.Time // zero: no resend pending
	leaving    bool
	left       bool // the Manager acknowledged the goodbye
	draining   bool
	drain      protocol.Drain // the Manager's last answer to the drain
	drainHeard bool           // an answer arrived since Drain

	handing map[Handover]bool // planned moves asked for: false pending, true answered
	handed  []handed          // reported to the Manager until their lease would have run out
	// gone are the pieces of leases this run gave up (recalled, refused,
	// expired, handed over), kept until the Manager answers a request sent
	// after: the Manager repeats a grant in its messages until a request
	// acknowledges one of them, so a message it sent before it learned of
	// the give-up may still list the piece as a grant. Taking it up again
	// would believe the lease again after a gap.
	gone []gonePiece
	// releasing are the pieces given up but still listed until Released
	// (CoreConfig.ConfirmReleases), sorted and disjoint.
	releasing []Lease

	out     []*protocol.LeaseRequest
	changes []OwnershipChange

	sb standbys // the pairings of holder and standby (core_standby.go)
}

// gonePiece is a piece of a lease given up before request until was sent.
type gonePiece struct {
	num   LeaseNum
	r     keyspace.Range
	until uint64
}

// handed is a handover done, reported in every request until until.
type handed struct {
	protocol.Handed
	until time.Time
}

// NewCore returns a Core that will send its first request at the first Tick.
func NewCore(cfg CoreConfig) *Core {
	return &Core{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Incarnation))}
}

// Ready returns the requests to send and the ownership changes to report
// since the last call, in order, and forgets them.
func (c *Core) Ready() ([]*protocol.LeaseRequest, []OwnershipChange) {
	out, ch := c.out, c.changes
	c.out, c.changes = nil, nil
	return out, ch
}

// NextDeadline is the local time by which Tick must be called next.
func (c *Core) NextDeadline() time.Time {
	d := c.nextRenew
	if !c.resendAt.IsZero() && c.resendAt.Before(d) {
		d = c.resendAt
	}
	for _, l := range c.held {
		if l.Expiry.Before(d) {
			d = l.Expiry
		}
	}
	return d
}

// Tick runs the timers: expiry of leases, renewals and race resends.
func (c *Core) Tick(now time.Time) {
	c.expire(now)
	if !now.Before(c.nextRenew) || (!c.resendAt.IsZero() && !now.Before(c.resendAt)) {
		c.send(now)
	}
}

// Leave gives up every lease and tells the Manager the Owner is leaving.
func (c *Core) Leave(now time.Time) {
	c.leaving = true
	c.setHeld(nil)
	c.releasing = nil // the embedder leaves once nothing is served
	c.send(now)
}

// Drain asks the Manager to move every range away, handing the state over,
// before the Owner leaves (a planned restart): the first half of a graceful
// shutdown; Leave is the second, once Held is empty.
func (c *Core) Drain(now time.Time) {
	if c.draining || c.leaving {
		return
	}
	c.draining = true
	c.send(now)
}

// DrainState is the Manager's last answer about the drain: active, or
// waiting for the maintenance gate; and whether it has answered since Drain
// at all (DrainNone then means a Manager that does not drain).
func (c *Core) DrainState() (protocol.Drain, bool) { return c.drain, c.drainHeard }

// HandoverDone ends a planned move. With ok the application has handed the
// state of h.Range to h.To: the Owner gives the range up at once and tells
// the Manager, which grants it to h.To marked migrated. Without ok it gave
// up; the Manager recalls the range at the deadline and reports the state
// lost. A handover reported done at or after h.Deadline counts as given up:
// past the deadline the application may take writes on the range again,
// and the state it handed over no longer has them.
func (c *Core) HandoverDone(now time.Time, h Handover, ok bool) {
	if answered, asked := c.handing[h]; !asked || answered {
		return
	}
	c.handing[h] = true
	if !ok || c.lateHandover(now, h) {
		return
	}
	if _, held := covering(c.Held(now), h.Range, h.Lease); !held {
		return // expired or recalled meanwhile: nothing to hand over
	}
	var next []Lease
	for _, l := range c.held {
		for _, r := range keyspace.NewRangeSet(l.Range).Subtract(keyspace.NewRangeSet(h.Range)).Ranges() {
			l := l
			l.Range = r
			next = append(next, l)
		}
	}
	c.replaceHeld(next, false) // the application stopped serving it before it said done
	c.handed = append(c.handed, handed{protocol.Handed{Range: h.Range, LGN: h.Lease.LGN, To: h.To, Incarnation: h.Incarnation},
		now.Add(c.cfg.Timing.OwnerLease)})
	// Report it at the next Tick, which may be now: handovers finished
	// together go out in one request.
	if c.resendAt.IsZero() || now.Before(c.resendAt) {
		c.resendAt = now
	}
}

// Timing returns the timings in force: the Manager's, once it has answered.
func (c *Core) Timing() protocol.Timing { return c.cfg.Timing }

// Left reports whether the Manager has acknowledged Leave.
func (c *Core) Left() bool { return c.left }

// Expired counts the leases this Core lost by letting them run out: no
// renewal reached it in time. Recalls, refusals, handovers and Leave are
// not counted; a lost lease is.
func (c *Core) Expired() uint64 { return c.expired }

// AppendHeld appends the leases held at now to dst and returns the
// extended slice: Held without an allocation, for a caller that asks on
// every step (the simulation's checkers).
func (c *Core) AppendHeld(dst []Lease, now time.Time) []Lease {
	for _, l := range c.held {
		if now.Before(l.Expiry) {
			dst = append(dst, l)
		}
	}
	return dst
}

// Held returns the leases held at now.
func (c *Core) Held(now time.Time) []Lease {
	var out []Lease
	for i, l := range c.held {
		if now.Before(l.Expiry) {
			if out == nil { // one allocation, not append's doublings
				out = make([]Lease, 0, len(c.held)-i)
			}
			out = append(out, l)
		}
	}
	return out
}

// CheckLeaseNow reports whether the Owner holds a lease covering key at now,
// and which (C§3.2 step 1). It is a local read.
func (c *Core) CheckLeaseNow(now time.Time, key keyspace.Key) (LeaseNum, bool) {
	i, ok := findLease(c.held, key)
	if !ok || !now.Before(c.held[i].Expiry) {
		return LeaseNum{}, false
	}
	return c.held[i].Num, true
}

// CheckLeaseContinuous reports whether key has been covered by lease n
// without a gap up to now (C§3.2 step 4).
func (c *Core) CheckLeaseContinuous(now time.Time, key keyspace.Key, n LeaseNum) bool {
	cur, ok := c.CheckLeaseNow(now, key)
	return ok && cur == n
}

// findLease returns the index of the lease containing key.
func findLease(held []Lease, key keyspace.Key) (int, bool) {
	lo, hi := 0, len(held)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if held[m].Range.Start <= key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 || !held[lo-1].Range.Contains(key) {
		return 0, false
	}
	return lo - 1, true
}

func (c *Core) expire(now time.Time) {
	c.expireReleasing(now)
	kept := c.held[:0:0]
	var revoked []keyspace.Range
	for _, l := range c.held {
		if now.Before(l.Expiry) {
			kept = append(kept, l)
		} else {
			revoked = append(revoked, l.Range)
		}
	}
	if len(revoked) > 0 {
		c.expired += uint64(len(revoked))
		for _, l := range c.held {
			if !now.Before(l.Expiry) {
				c.gave(l.Num, l.Range)
			}
		}
		c.held = kept
		c.changes = append(c.changes, OwnershipChange{Revoked: revoked})
	}
}

// gave records that piece r of lease n is given up.
func (c *Core) gave(n LeaseNum, r keyspace.Range) {
	c.gone = append(c.gone, gonePiece{num: n, r: r, until: c.seq + 1})
}

// notGone returns the parts of r that lease n was not given up on.
func (c *Core) notGone(n LeaseNum, r keyspace.Range) []keyspace.Range {
	rs := keyspace.NewRangeSet(r)
	if c.broken.RetakeGone {
		return rs.Ranges()
	}
	for _, g := range c.gone {
		if g.num == n && g.r.Overlaps(r) {
			rs = rs.Subtract(keyspace.NewRangeSet(g.r))
		}
	}
	return rs.Ranges()
}

// Reconnected tells the Owner its transport reached a Manager replica anew
// (after a failure, or following a new leader): it sends a request now, so
// a new leader's session starts without waiting for the next renewal.
func (c *Core) Reconnected(now time.Time) {
	if c.left {
		return
	}
	c.send(now)
}

// send builds the next LeaseRequest: the complete held set (C§2.3).
func (c *Core) send(now time.Time) {
	c.expire(now)
	c.seq++
	c.sentAt = now
	c.unanswered, c.sb.deferred = true, false
	if c.sentAts == nil {
		c.sentAts = map[uint64]time.Time{}
	}
	c.sentAts[c.seq] = now
	delete(c.sentAts, c.seq-sentAtsKept)
	c.nextRenew = now.Add(c.cfg.Timing.Renew)
	c.resendAt = time.Time{}
	req := &protocol.LeaseRequest{
		Namespace:   c.cfg.Namespace,
		Owner:       c.cfg.ID,
		Addr:        c.cfg.Addr,
		Incarnation: c.cfg.Incarnation,
		Seq:         c.seq,
		AckEpoch:    c.peerEpoch,
		AckSeq:      c.peerSeq,
		Leaving:     c.leaving,
		Draining:    c.draining && !c.leaving,
		Capacity:    c.cfg.Capacity,
		Zone:        c.cfg.Zone,
		InSync:      c.inSyncReports(),
	}
	kept := c.handed[:0]
	for _, h := range c.handed {
		if now.Before(h.until) {
			kept = append(kept, h)
			req.Handed = append(req.Handed, h.Handed)
		}
	}
	c.handed = kept
	if c.cfg.Load != nil {
		req.Load, req.HotKeys, req.Window = c.cfg.Load(now)
	}
	held := c.listed()
	if last, ok := c.sentHeld[c.seq-1]; ok && protocol.SameHeld(held, last) {
		held = last
	}
	if c.sentHeld == nil {
		c.sentHeld = map[uint64][]protocol.Lease{}
	}
	c.sentHeld[c.seq] = held
	delete(c.sentHeld, c.seq-sentHeldKept)
	req.Held = held
	if len(held) > 0 && c.peerKnown && protocol.SameHeld(held, c.peerLeases) {
		// We hold exactly what the message we acknowledge lists: say so
		// instead of listing it. The Manager expands it against that
		// message, so this is the complete set all the same (C§2.3).
		req.Held, req.HeldAsAcked = nil, true
	}
	c.out = append(c.out, req)
}

// stepForgotten handles a RenewHeld answer to a request too old for its
// Held to be kept: it raced with our later requests. It is handled as any
// raced message: acknowledged, nothing in it taken up (a RenewHeld grants
// nothing), and our request sent again after a random backoff, listing
// what we hold in full since we cannot say which leases m stood for.
// Dropping it instead would leave the Manager waiting for a request that
// acknowledges its latest message until our next renewal, holding back
// every recall and handover meanwhile.
func (c *Core) stepForgotten(now time.Time, m *protocol.LeaseResponse) {
	c.peerEpoch, c.peerSeq = m.Epoch, m.Seq
	c.peerLeases, c.peerKnown = nil, false
	c.adopt(m)
	c.expire(now)
	if c.resendAt.IsZero() {
		c.resendAt = now.Add(c.backoff())
	}
}

// sentHeldKept is how many recent requests' Held the Core keeps. A
// response to an older one is dropped, as if lost, if it says RenewHeld.
const sentHeldKept = 16

// expandRenewHeld returns m in full: a RenewHeld response lists as renewals
// exactly the Held of our request m.AckSeq. It reports false when that Held
// is no longer known (Step handles m as raced: stepForgotten), or m is
// malformed (m is dropped, as if lost).
func (c *Core) expandRenewHeld(m *protocol.LeaseResponse) (*protocol.LeaseResponse, bool) {
	if !m.RenewHeld {
		return m, true
	}
	held, ok := c.sentHeld[m.AckSeq]
	if !ok || len(m.Leases) > 0 {
		return nil, false
	}
	full := *m
	full.RenewHeld = false
	full.Leases = make([]protocol.Lease, len(held))
	for i, l := range held {
		full.Leases[i] = protocol.Lease{Range: l.Range, LGN: l.LGN}
	}
	return &full, true
}

// Step handles a LeaseResponse received at now.
func (c *Core) Step(now time.Time, m *protocol.LeaseResponse) {
	if m.Namespace != c.cfg.Namespace || m.Owner != c.cfg.ID || m.Incarnation != c.cfg.Incarnation {
		return // addressed to another owner or to an earlier run of this one
	}
	if m.Epoch < c.peerEpoch || (m.Epoch == c.peerEpoch && m.Seq <= c.peerSeq) {
		return // from a dead Manager incarnation, a duplicate, or overtaken
	}
	full, ok := c.expandRenewHeld(m)
	if !ok {
		if len(m.Leases) == 0 && m.AckSeq != c.seq {
			c.stepForgotten(now, m)
		}
		return
	}
	m = full
	c.peerEpoch, c.peerSeq = m.Epoch, m.Seq
	defer c.stepPairings(m)()
	if !c.broken.CompactAsAccepted {
		// Our next request acknowledges m, raced or not: HeldAsAcked then
		// means m's list.
		c.peerLeases, c.peerKnown = m.Leases, true
	}
	c.adopt(m)
	c.expire(now)
	if m.AckSeq != c.seq && !c.broken.NoRaceFilter {
		// The Manager sent this before it saw our latest request: it raced
		// (C§2.3.2). Drop it, and resend after a random backoff so one
		// side's message gets through before the other's resend.
		if c.resendAt.IsZero() {
			c.resendAt = now.Add(c.backoff())
		}
		c.raced++
		c.adoptRacedGrants(now, m)
		return
	}
	if c.broken.CompactAsAccepted {
		c.peerLeases, c.peerKnown = m.Leases, true
	}
	c.answered(now)
	if c.leaving {
		if len(m.Leases) == 0 {
			c.left = true // it answered the goodbye: we are out of the membership
			return
		}
		// An answer in order that still lists leases did not act on the
		// goodbye (the Manager acts on no request that crossed its
		// message): say it again now, in order.
		c.resendAt = now
		return
	}

	// The lease runs from when the answered request was sent, on our clock:
	// the Manager's reservation began later, when it answered (C§2.3.1).
	start := c.sentAt
	if c.broken.TimerAtReceipt {
		start = now
	}
	expiry := start.Add(c.cfg.Timing.OwnerLease)

	old := c.held
	if m.Epoch != c.epoch {
		old = nil // leases of another epoch are never renewed
	}
	var next []Lease
	refused := false
	for _, l := range m.Leases {
		if !l.Range.Valid() {
			refused = true
			continue
		}
		num := LeaseNum{Epoch: m.Epoch, LGN: l.LGN}
		if l.Grant {
			// A grant is repeated until acknowledged; a piece given up
			// since is refused (C§2.3: the lease is not renewed after a gap).
			parts := c.notGone(num, l.Range)
			if len(parts) != 1 || parts[0] != l.Range {
				refused = true
			}
			for _, r := range parts {
				next = append(next, Lease{Range: r, Num: num, Expiry: expiry, Migrated: l.Migrated, Promoted: l.Promoted})
			}
			continue
		}
		// A renewal is accepted only for a lease held without a gap: a
		// restarted or lapsed Owner refuses it, so the Manager learns the
		// range is free and grants it anew with a new LGN (C§2.3).
		if prev, ok := covering(old, l.Range, num); ok {
			next = append(next, Lease{Range: l.Range, Num: num, Expiry: later(prev, expiry)})
		} else if c.isReleasing(l.Range, num) {
			// Still listed while the application stops serving it: not
			// taken up again, and not refused either (a refusal would be
			// answered by the same renewal, at once, until Released).
		} else {
			refused = true
		}
	}
	slices.SortFunc(next, func(a, b Lease) int { return keyspace.Compare(a.Range, b.Range) })
	next = dropOverlaps(next)
	// The Manager has answered our latest request: whatever we gave up
	// before sending it, it knows, and no message of its still to come
	// lists it (an older one would be overtaken).
	c.gone = slices.DeleteFunc(c.gone, func(g gonePiece) bool { return g.until <= m.AckSeq })
	c.epoch = m.Epoch
	c.drain = m.Drain
	c.drainHeard = c.draining
	recalled := c.setHeld(next)
	if c.askHandovers(now, m) {
		recalled = true
	}
	if recalled || refused {
		// Acknowledge by omission now, so the Manager can move the range
		// at once instead of waiting for the lease to run out (C§2.3.2).
		c.send(now)
	}
}

// sentAtsKept is how many recent requests' send times the Core keeps.
const sentAtsKept = 64

// Answers reports whether a response acknowledging ackSeq answers a
// request this Core still remembers sending, its latest or one of the
// sentAtsKept before it: the only responses it may take a grant from, in
// order or raced (a push answering no request, AckSeq 0, gives none). The
// simulation's checkers ask it rather than keep a copy of the rule.
func (c *Core) Answers(ackSeq uint64) bool {
	_, ok := c.sentAts[ackSeq]
	return ackSeq != 0 && ok
}

// adoptRacedGrants takes up the new grants of a raced message m. The rest
// of m is stale and ignored, but a grant in it must not be: our next
// request acknowledges m's Seq, and the Manager would take the grant's
// absence from our held set for a release — losing the state a migrated
// grant carries. Each lease runs from when the request m answers was sent,
// as any lease does (C§2.3.1), so it ends before the Manager's
// reservation.
func (c *Core) adoptRacedGrants(now time.Time, m *protocol.LeaseResponse) {
	at, ok := c.sentAts[m.AckSeq]
	if !ok || c.leaving || m.Epoch != c.epoch || !now.Before(at.Add(c.cfg.Timing.OwnerLease)) {
		return
	}
	next := slices.Clone(c.held)
	for _, l := range m.Leases {
		if !l.Grant || !l.Range.Valid() {
			continue
		}
		if slices.ContainsFunc(c.held, func(h Lease) bool { return h.Range.Overlaps(l.Range) }) {
			continue
		}
		num := LeaseNum{Epoch: m.Epoch, LGN: l.LGN}
		for _, r := range c.notGone(num, l.Range) {
			next = append(next, Lease{Range: r, Num: num, Expiry: at.Add(c.cfg.Timing.OwnerLease), Migrated: l.Migrated, Promoted: l.Promoted})
		}
	}
	if len(next) == len(c.held) {
		return
	}
	slices.SortFunc(next, func(a, b Lease) int { return keyspace.Compare(a.Range, b.Range) })
	c.setHeld(dropOverlaps(next))
}

// askHandovers passes the planned moves of m to the application, once each,
// or, if it does not hand state over, gives the ranges up at once as if
// recalled. It reports whether it gave anything up.
func (c *Core) askHandovers(now time.Time, m *protocol.LeaseResponse) (gaveUp bool) {
	live := map[Handover]bool{}
	var ask []Handover
	drop := keyspace.RangeSet{}
	for _, ho := range m.Handovers {
		h := Handover{Range: ho.Range, Lease: LeaseNum{Epoch: m.Epoch, LGN: ho.LGN}, To: ho.To, Addr: ho.Addr,
			Incarnation: ho.Incarnation}
		if _, held := covering(c.held, h.Range, h.Lease); !held {
			continue
		}
		if !c.cfg.Handovers {
			drop = drop.Add(h.Range)
			continue
		}
		// One handover is one (range, lease, target run): the Manager asks
		// again in every message until it is done or too late.
		for k, answered := range c.handing {
			if k.Range == h.Range && k.Lease == h.Lease && k.To == h.To && k.Incarnation == h.Incarnation {
				h.Deadline = k.Deadline
				live[k] = answered
			}
		}
		if h.Deadline.IsZero() {
			h.Deadline = now.Add(ho.Within)
			live[h] = false
			ask = append(ask, h)
		}
	}
	c.handing = live
	if len(ask) > 0 {
		c.changes = append(c.changes, OwnershipChange{Handovers: ask})
	}
	if drop.Empty() {
		return false
	}
	var next []Lease
	for _, l := range c.held {
		for _, r := range keyspace.NewRangeSet(l.Range).Subtract(drop).Ranges() {
			l := l
			l.Range = r
			next = append(next, l)
		}
	}
	return c.setHeld(next)
}

// adopt takes the Manager's timings: the Manager reserves a range for its
// ManagerLease, which is only safe against the OwnerLease it chose.
func (c *Core) adopt(m *protocol.LeaseResponse) {
	if m.OwnerLease > 0 && m.Renew > 0 && m.Renew < m.OwnerLease {
		c.cfg.Timing.OwnerLease = m.OwnerLease
		if m.Renew != c.cfg.Timing.Renew {
			c.cfg.Timing.Renew = m.Renew
			c.nextRenew = c.sentAt.Add(m.Renew)
		}
	}
}

// setHeld replaces the held set and records the change: the parts of old
// leases not kept under the same LeaseNum are revoked, the parts of new
// leases not held before under it are granted. It reports whether anything
// was revoked.
func (c *Core) setHeld(next []Lease) (revoked bool) {
	return c.replaceHeld(next, c.cfg.ConfirmReleases && !c.leaving)
}

// replaceHeld is setHeld; with keep, the revoked pieces stay listed until
// Released (CoreConfig.ConfirmReleases).
func (c *Core) replaceHeld(next []Lease, keep bool) (revoked bool) {
	var ch OwnershipChange
	for _, l := range c.held {
		for _, r := range uncovered(l.Range, next, l.Num) {
			ch.Revoked = append(ch.Revoked, r)
			c.gave(l.Num, r)
			if keep {
				c.keepListed(Lease{Range: r, Num: l.Num, Expiry: l.Expiry})
			}
		}
	}
	for _, l := range next {
		for _, r := range uncovered(l.Range, c.held, l.Num) {
			ch.Granted = append(ch.Granted, Lease{Range: r, Num: l.Num, Expiry: l.Expiry, Migrated: l.Migrated, Promoted: l.Promoted})
		}
	}
	c.held = next
	if len(ch.Revoked) > 0 || len(ch.Granted) > 0 {
		c.changes = append(c.changes, ch)
	}
	return len(ch.Revoked) > 0
}

// backoff draws the random wait before a resend (C§2.3.2).
func (c *Core) backoff() time.Duration {
	t := c.cfg.Timing
	if t.BackoffMax <= t.BackoffMin {
		return t.BackoffMin
	}
	return t.BackoffMin + time.Duration(c.rng.Int64N(int64(t.BackoffMax-t.BackoffMin)))
}
