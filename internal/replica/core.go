package replica

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/manager/config"
	"github.com/leasehold/leasehold/protocol"
)

// Errors returned for messages the Manager will not act on. Other clients
// are unaffected by them.
var (
	ErrUnknownNamespace = errors.New("manager: unknown namespace")
	ErrBadMessage       = errors.New("manager: malformed message")
)

// DefaultNamespace is the namespace every Manager serves.
const DefaultNamespace = "default"

// CoreConfig configures a Core: the replica's settings, of which the Core
// reads the lease logic's (Timing to MembershipEvery). It is the struct
// manager.ServerConfig embeds, so a setting reaches the Core uncopied.
type CoreConfig = config.Replica

// ErrUnknownOwner refuses to drain an Owner that is not a live member.
var ErrUnknownOwner = errors.New("manager: no live owner")

// ErrLimit refuses a request that would take a namespace past one of the
// Manager's limits (MaxOwners, MaxRanges); its message names the limit
// and the flag that sets it.
var ErrLimit = errors.New("manager: limit reached")

// ErrGateFull refuses a drain while DrainGate Owners are draining.
var ErrGateFull = errors.New("manager: the maintenance gate is full")

// OwnerMessage is a LeaseResponse to deliver to the Owner named To.
type OwnerMessage struct {
	To  string
	Msg *protocol.LeaseResponse
}

// Round is what a Core asks its Replica to do after a round of steps:
// record Changes in the replicated state, and only then send the Owners'
// messages (docs/design.md rule 8: the leader commits every change before it
// answers).
type Round struct {
	Changes []Change
	Owners  []OwnerMessage
}

// Core is the Manager's deterministic state machine (C§2.1.2, P§4.1): it
// keeps the namespaces, their owners and lease tables, computes the desired
// assignment, grants, renews, recalls and expires leases, and answers
// Lookups. It is fed messages and clock readings and returns messages; it
// starts no goroutines, opens no sockets, never reads a clock, and is not
// safe for concurrent use.
type Core struct {
	cfg     CoreConfig
	broken  faults.Set // rules broken on purpose (core_broken.go); none outside the simulation
	rng     *rand.Rand
	st      *State // the working copy: the replicated state plus this Core's Changes
	ns      map[string]*namespace
	seqBase uint64 // sessions number their messages from here
	lastNow time.Time
	// wake caches NextDeadline's answer until the next step changes the
	// Core (zero: not computed). NextDeadline is asked after every step of
	// the Manager, Lookup syncs included, and visits every Owner session.
	wake  time.Time
	out   Round
	stats Stats
}

// Stats counts what a Core has done since it started.
type Stats struct {
	LeaseRequests uint64 // accepted or not
	SyncRequests  uint64 // counted by the Feed
	Grants        uint64 // ranges granted with a fresh LGN
	Recalls       uint64 // ranges omitted from a holder's message to move them
	Releases      uint64 // ranges freed by acknowledgement (recall or refusal)
	Expiries      uint64 // ranges freed because their reservation ran out
	OwnerRestarts uint64 // new incarnations seen
	Migrations    uint64 // ranges granted with the previous holder's state (planned moves)
	Plans         uint64 // rebalancing rounds planned
	PlannedMoves  uint64 // ranges the rounds moved
	PlanErrors    uint64 // rounds the policy refused
	RacesDropped  uint64 // requests dropped by the race filter (C§2.3.2)
	StaleDropped  uint64 // duplicates and messages of dead incarnations
	Forgotten     uint64 // Owner records forgotten (core_admin.go)
}

// Stats returns the counters.
func (c *Core) Stats() Stats { return c.stats }

// OwnerInfo describes one owner session for status displays.
type OwnerInfo struct {
	ID, Addr    string
	Incarnation uint64
	Member      bool
	Ranges      int     // lease-table segments held
	Share       float64 // fraction of the key space held
	Load        float64 // requests per second over the last report
	Capacity    float64 // 0 means 1
	Draining    bool
	HotKeys     []protocol.KeyLoad // requests per second, estimated
}

// Owners describes a namespace's owner sessions, sorted by ID.
func (c *Core) Owners(ns string) []OwnerInfo {
	out := c.Sessions(ns)
	if len(out) == 0 {
		return out
	}
	by := make(map[string]*OwnerInfo, len(out))
	for i := range out {
		by[out[i].ID] = &out[i]
	}
	c.ns[ns].s.table.Each(func(s leasetable.Segment) bool {
		if i := by[s.Entry.Owner]; i != nil {
			i.Ranges++
			i.Share += s.Range.Size() / (1 << 64)
		}
		return true
	})
	return out
}

// Sessions describes the owner sessions of a namespace as Owners does, by
// ID, without what the table gives them (Ranges and Share are zero): it
// does not walk the table.
func (c *Core) Sessions(ns string) []OwnerInfo {
	n := c.ns[ns]
	if n == nil {
		return nil
	}
	out := make([]OwnerInfo, 0, len(n.owners))
	for id, o := range n.owners {
		out = append(out, OwnerInfo{ID: id, Addr: o.addr, Incarnation: o.inc, Member: o.member,
			Load: o.rate, Capacity: o.capacity, Draining: o.draining, HotKeys: o.hot})
	}
	slices.SortFunc(out, func(a, b OwnerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Namespaces returns the names of the namespaces served, sorted.
func (c *Core) Namespaces() []string {
	var out []string
	for name := range c.ns {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// namespace is the leader's view of one namespace: the replicated part in s,
// and the leader-local reservations, sessions and desired assignment.
type namespace struct {
	name    string
	s       *nsState
	res     *reservations
	owners  map[string]*ownerSession
	desired assign.Assignment
	wants   map[string][]keyspace.Range // desired ranges by owner
	members bool                        // membership changed: recompute desired
	// membersAt is the earliest time the next membership change may be
	// planned: MembershipEvery after the last one (zero: at once).
	membersAt time.Time
	// dirty lists the ranges the next flush reconciles: freed, released,
	// given another desired owner. The rest of the table is as the last
	// reconcile left it, or waits for a time: a reservation's end (res's
	// ends) or a handover's deadline (handovers).
	dirty     []keyspace.Range
	handovers *ordered[handoverEnd] // the deadlines of the handovers asked for
	// pushing lists the sessions whose push was set since the last flush,
	// and resends and silences the sessions' race resends and the times
	// their members fall silent, in time order. An entry is added when the
	// time is set and dropped when found out of date (resendCurrent,
	// silenceCurrent): flush
	// and NextDeadline, asked on every request, need not visit every
	// session.
	pushing           []string
	resends, silences *ordered[ownerTimer]

	planAt   time.Time // next rebalancing round (Rebalance only)
	lastPlan time.Time
	rates    []rate // the load map (Rebalance only; leader-local)

	starts startsCount // the MaxRanges check's last count (core_limits.go)

	forgetAt time.Time // when the next Owner may be forgotten (core_admin.go); zero: none
}

// ownerSession is the Manager's side of one Owner incarnation's session.
// Sessions, sequence numbers and timers are leader-local (docs/design.md rule 8).
type ownerSession struct {
	id, addr  string
	inc       uint64
	since     keyspace.LGN // OwnerRecord.Since: entries at or below it are orphans
	mySeq     uint64       // Seq of the last LeaseResponse sent
	peerSeq   uint64       // highest LeaseRequest Seq heard
	lastHeard time.Time
	member    bool
	push      bool      // send a LeaseResponse at the next flush
	resendAt  time.Time // zero: no race resend pending
	sent      keyspace.RangeSet
	capacity  float64
	draining  bool // moving every range away (replicated)
	wantDrain bool // the Owner asked to drain; the gate may hold it back
	// handing lists the planned moves in progress off this Owner, by the
	// piece of the table they move.
	handing map[keyspace.Range]handing
	// fresh holds the grants not yet acknowledged, with the Seq of the
	// first message that listed each (0: none yet). Every message lists
	// them as grants until a request acknowledges one of those messages:
	// messages may be lost or overtaken, and an Owner that saw a grant only
	// as a renewal would refuse it and lose what a migration carried.
	fresh map[keyspace.LGN]uint64
	// The last load report: requests per second in all, and the hot keys
	// with their rates (leader-local, like sessions; the rates per range
	// go to the namespace's load map).
	rate     float64
	reported time.Time // when the last load report of this session arrived
	// grantedAt is when each lease granted since the last load report
	// was granted (Rebalance only): a report counts such a lease's range
	// for part of its window only.
	grantedAt map[keyspace.LGN]time.Time
	hot       []protocol.KeyLoad // Requests holds the rate

	// The compact forms (HeldAsAcked, RenewHeld). sentLeases is the lease
	// list of message mySeq (when mySeq is not seqBase): what a request
	// that says HeldAsAcked and acknowledges it holds. peerHeld is the Held
	// of request peerSeq, expanded (nil when not known): a message whose
	// list renews exactly it, and is not empty, is sent as RenewHeld.
	sentLeases []protocol.Lease
	peerHeld   []protocol.Lease
}

// handing is one planned move: the holder was asked to hand the state of a
// piece over to the next Owner's run by the deadline.
type handing struct {
	to       string
	inc      uint64
	deadline time.Time
}

// NewCore returns the core of a Manager that starts at now with no state.
// It knows nothing of leases a previous incarnation granted, so it reserves
// the whole key space for one ManagerLease before granting anything
// (C§2.3.1).
func NewCore(cfg CoreConfig, now time.Time) *Core {
	return Resume(cfg, NewState(cfg.Timing.LogRetention), 0, now)
}

// Resume returns the core of a Manager that takes over st at now as a new
// leader (docs/design.md rules 8 and 10); its sessions number their messages from base,
// which must exceed every sequence number an earlier leader of st used. It works on a copy; st is not
// changed. Owners keep their leases: the table, LGNs and incarnations carry
// over. What a deposed leader promised is not known, so every range is
// reserved until now + ManagerLease unless its holder renews or releases it
// (the second failover rule), and each owner's first request in the new
// session releases nothing, since it may have been sent before the owner
// heard the old leader's last grant. A Replica passes term << 32 (plus a
// count of takeovers within the term), so an Owner orders a new leader's
// messages after an old one's.
func Resume(cfg CoreConfig, st *State, base uint64, now time.Time) *Core {
	return resume(cfg, faults.Set{}, st, base, now)
}

// resume is Resume with the rules broken (core_broken.go) set.
func resume(cfg CoreConfig, broken faults.Set, st *State, base uint64, now time.Time) *Core {
	if cfg.Policy == nil {
		cfg.Policy = assign.ConsistentHash{}
	}
	cfg.Epoch = max(cfg.Epoch, 1)
	c := &Core{cfg: cfg, broken: broken, st: st.Clone(), ns: map[string]*namespace{}, seqBase: base, lastNow: now}
	if c.st.epoch == 0 {
		c.apply(now, Change{Op: OpEpoch, Epoch: cfg.Epoch})
	}
	c.rng = rand.New(rand.NewPCG(cfg.Seed, c.st.epoch^base))
	for _, name := range append([]string{DefaultNamespace}, cfg.Namespaces...) {
		if c.st.ns[name] == nil {
			c.apply(now, Change{Op: OpNamespace, NS: name})
		}
	}
	for _, name := range c.st.Namespaces() {
		s := c.st.ns[name]
		n := &namespace{name: name, s: s, res: newReservations(), owners: map[string]*ownerSession{}, members: true,
			handovers: newOrdered(cmpHandoverEnd), resends: newOrdered(cmpOwnerTimer), silences: newOrdered(cmpOwnerTimer)}
		if base == 0 || !broken.NoTakeoverReservation {
			n.res.set(keyspace.Full, now.Add(cfg.Timing.ManagerLease))
		}
		for _, id := range sortedOwnerIDs(s.owners) {
			r := s.owners[id]
			n.owners[id] = &ownerSession{id: id, addr: r.Addr, inc: r.Incarnation, member: r.Member,
				capacity: r.Capacity, draining: r.Draining, since: r.Since, mySeq: c.seqBase, lastHeard: now}
			c.heard(n, n.owners[id])
			if !r.Member {
				c.forgetTimer(n, n.owners[id])
			}
		}
		if cfg.Rebalance != nil && len(s.desired) > 0 {
			// Carry on from it. The next round waits for the Owners' load
			// reports: without them it would balance by key space.
			c.setDesired(now, n, slices.Clone(s.desired))
			n.members, n.planAt = false, now.Add(c.rebalanceEvery())
		}
		c.ns[name] = n
	}
	c.flush(now)
	for _, n := range c.ns {
		n.membersAt = time.Time{} // starting is no membership change: the first one is planned at once
	}
	return c
}

// Epoch returns the Manager's epoch.
func (c *Core) Epoch() uint64 { return c.st.epoch }

// apply records a change in the working state and in the Round.
func (c *Core) apply(now time.Time, ch Change) {
	if err := c.st.apply(now, ch); err != nil {
		panic(fmt.Sprintf("manager: core made an invalid change %+v: %v", ch, err))
	}
	c.out.Changes = append(c.out.Changes, ch)
}

// set records a lease-table change.
func (c *Core) set(now time.Time, n *namespace, r keyspace.Range, e leasetable.Entry) {
	c.apply(now, Change{Op: OpSet, NS: n.name, Range: r, Entry: e})
}

// record saves the replicated part of an owner session.
func (c *Core) record(now time.Time, n *namespace, o *ownerSession) {
	rec := OwnerRecord{Addr: o.addr, Incarnation: o.inc, Member: o.member, Capacity: o.capacity, Draining: o.draining, Since: o.since}
	if n.s.owners[o.id] != rec {
		c.apply(now, Change{Op: OpOwner, NS: n.name, Owner: o.id, Record: rec})
	}
	if !o.member {
		c.forgetTimer(n, o)
	}
}

// Ready returns the messages to send since the last call and forgets them.
func (c *Core) Ready() Round {
	r := c.out
	c.out = Round{}
	return r
}

// Table returns a namespace's lease table, for reading only.
func (c *Core) Table(ns string) *leasetable.Table { return c.st.Table(ns) }

// State returns the working state, for reading only.
func (c *Core) State() *State { return c.st }

// Desired returns a namespace's desired assignment, for reading only.
func (c *Core) Desired(ns string) assign.Assignment {
	if n := c.ns[ns]; n != nil {
		return n.desired
	}
	return nil
}

// Members returns the IDs of a namespace's live owners, sorted.
func (c *Core) Members(ns string) []string {
	var out []string
	if n := c.ns[ns]; n != nil {
		for id, o := range n.owners {
			if o.member {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (c *Core) namespace(name string) (*namespace, error) {
	if n := c.ns[name]; n != nil {
		return n, nil
	}
	return nil, errUnknownNamespace(name)
}

func errUnknownNamespace(name string) error {
	return fmt.Errorf("%w %q", ErrUnknownNamespace, name)
}

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
	o := n.owners[req.Owner]
	if err := c.checkLimits(n, o, req); err != nil {
		return err
	}
	if o == nil {
		o = &ownerSession{id: req.Owner, addr: req.Addr, inc: req.Incarnation, mySeq: c.seqBase}
		n.owners[req.Owner] = o
		c.record(now, n, o)
	}
	switch {
	case req.Incarnation < o.inc:
		c.stats.StaleDropped++
		return nil // from a dead run of this owner
	case req.Incarnation > o.inc:
		c.stats.OwnerRestarts++
		// The owner restarted: its old run's ranges are orphans, kept in
		// the table until their reservations end (core_orphans.go).
		if c.broken.FreeAtRestart {
			c.loseOwner(now, n, o)
		}
		*o = ownerSession{id: req.Owner, addr: req.Addr, inc: req.Incarnation, member: o.member, since: n.s.lgn, mySeq: c.seqBase}
		c.record(now, n, o)
	}
	if req.Seq <= o.peerSeq {
		c.stats.StaleDropped++
		return nil // duplicate or overtaken
	}
	o.peerSeq = req.Seq
	o.lastHeard = now
	// The compact form is expanded here, before anything reads Held: from
	// here on a request means what its complete form would.
	held, heldKnown := c.expandHeld(o, req)
	o.peerHeld = held // nil when not known
	if req.AckEpoch == c.st.epoch {
		// The owner has seen a message at or after AckSeq, and each of
		// those listed the grants first sent by then.
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
	o.wantDrain = req.Draining
	if req.Draining && !o.draining {
		_ = c.drain(now, n, o) // refused while the gate is full: asked again at each request
	}
	fresh := o.mySeq == c.seqBase // nothing sent yet in this session
	heard := fresh || (req.AckEpoch == c.st.epoch && req.AckSeq == o.mySeq)
	if !heard && !c.noRaceFilter() {
		// The owner sent this before it processed our latest message: it
		// raced (C§2.3.2, Figure 7). Drop it and resend ours after a random
		// backoff.
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
		return nil
	}
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
	return nil
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
		min(n.wakeAt())
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
	}
	c.flush(now)
	for _, name := range c.Namespaces() { // after the flush, which frees what expired
		c.forgetDead(now, c.ns[name])
	}
}

// flush recomputes what changed and queues the messages it calls for.
func (c *Core) flush(now time.Time) {
	for _, name := range c.Namespaces() { // in order, so a run replays exactly
		n := c.ns[name]
		due := n.members && !now.Before(n.membersAt)
		switch {
		case c.cfg.Rebalance != nil && (due || !now.Before(n.planAt)):
			c.plan(now, n, due)
		case due:
			c.setDesired(now, n, c.cfg.Policy.Assign(n.activeMembers()))
		}
		if due {
			n.members = false
			n.membersAt = now.Add(c.membershipEvery())
		}
		if wake := n.wakeAt(); len(n.dirty) > 0 || (!wake.IsZero() && !now.Before(wake)) {
			c.stats.Expiries += c.reconcile(now, n)
		}
		var ids []string
		for _, id := range n.pushing {
			if o := n.owners[id]; o != nil && o.push {
				ids = append(ids, id)
			}
		}
		n.pushing = nil
		current := c.resendCurrent(n)
		for e, ok := n.resends.first(); ok && !e.at.After(now); e, ok = n.resends.first() {
			n.resends.deleteAt(pos{})
			if current(e) {
				ids = append(ids, e.id) // a resend due
			}
		}
		slices.Sort(ids) // deterministic order
		for _, id := range slices.Compact(ids) {
			c.sendTo(now, n, n.owners[id])
		}
	}
}

// membershipEvery is CoreConfig.MembershipEvery with its default.
func (c *Core) membershipEvery() time.Duration {
	if e := c.cfg.MembershipEvery; e != 0 {
		return e
	}
	return min(time.Second, c.cfg.Timing.Renew/4)
}

// loseOwner frees every range of an owner incarnation in the table at once,
// reservations left as they are: the rule for a new incarnation before
// orphans (core_orphans.go), kept as the broken rule faults.FreeAtRestart.
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
				c.set(now, n, q, leasetable.Entry{})
				n.res.set(q, time.Time{})
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

// grant gives piece g to o with a fresh LGN, reserved from now; from, when
// not zero, is the LGN whose state the grant carries (a migration).
func (c *Core) grant(now time.Time, n *namespace, o *ownerSession, g keyspace.Range, from keyspace.LGN) {
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
}

// recordLoad keeps an accepted request's load report as rates: the
// Owner's in all, and, for load-aware rebalancing, each range's in the
// namespace's load map.
func (c *Core) recordLoad(n *namespace, o *ownerSession, req *protocol.LeaseRequest) {
	secs := req.Window.Seconds()
	var total uint64
	var report []rate
	for _, l := range req.Load {
		total += l.Requests
		report = append(report, rate{l.Range, float64(l.Requests) / secs})
	}
	if c.cfg.Rebalance != nil {
		from := c.lastNow.Add(-req.Window)
		n.recordRates(fullWindow(n, o, report, from, c.lastNow))
		for lgn, at := range o.grantedAt {
			if !at.After(from) {
				delete(o.grantedAt, lgn) // no later window begins before it
			}
		}
	}
	o.rate = float64(total) / secs
	o.reported = c.lastNow
	o.hot = o.hot[:0]
	for _, k := range req.HotKeys {
		o.hot = append(o.hot, protocol.KeyLoad{Key: k.Key, Requests: uint64(float64(k.Requests) / secs)})
	}
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
				c.set(now, n, p, leasetable.Entry{})
				expired++
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
					if o == nil || !o.sent.OverlapsRange(p) {
						break
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
// earliest end of a pending reservation or handover deadline (zero: none).
func (n *namespace) wakeAt() time.Time {
	t := n.res.nextEnd()
	if h, ok := n.handovers.first(); ok && (t.IsZero() || h.at.Before(t)) {
		t = h.at
	}
	return t
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
	until := now.Add(c.cfg.Timing.ManagerLease)
	var leases []protocol.Lease
	var handovers []protocol.Handover
	if o.member {
		wants := n.wants[o.id]
		if o.draining {
			// Given nothing new, even while the desired assignment still
			// names it (its drain waits to be planned).
			wants = nil
		}
		// Grants stop where the message would list more leases than an
		// Owner accepts (wire.MaxLeases): the rest stays free for others.
		room := maxOwnerLeases - len(o.sentLeases)
		if !n.s.table.HasFree() {
			wants = nil // nothing to grant (the steady state): no need to look
		}
	grants:
		for _, d := range wants {
			for _, s := range n.s.table.Overlapping(d) {
				if s.Entry.Owner != "" {
					continue
				}
				free, _ := n.res.free(s.Range, now)
				for _, g := range free.Ranges() {
					if room <= 0 {
						break grants
					}
					c.grant(now, n, o, g, 0)
					room--
				}
			}
		}
		handing := map[keyspace.Range]handing{}
		// What is listed is reserved until `until`: adjacent pieces as one
		// range (extend is pointwise, so this is the same), which is one
		// reservation segment already when they were renewed together
		// last time, and not a split and a join per piece.
		held := n.heldByRun(o)
		leases = make([]protocol.Lease, 0, len(held)+len(o.fresh)) // pieces: one a segment, usually
		reserve := make([]keyspace.Range, 0, len(held))
		for _, s := range held {
			n.eachDesired(s.Range, func(p keyspace.Range, want string) {
				switch {
				case want == o.id:
				case c.handover(now, n, o, p, want, handing):
					h, to := handing[p], n.owners[want]
					handovers = append(handovers, protocol.Handover{Range: p, LGN: s.Entry.LGN, To: want, Addr: to.addr,
						Incarnation: to.inc, Within: h.deadline.Sub(now)})
				case o.sent.OverlapsRange(p):
					c.stats.Recalls++ // omitted now, listed last time
					return
				default:
					return
				}
				// Grants (made here, or by a migration) are listed as
				// grants, new leases, until acknowledged.
				_, grant := o.fresh[s.Entry.LGN]
				leases = append(leases, protocol.Lease{Range: p, LGN: s.Entry.LGN, Grant: grant, Migrated: grant && s.Entry.Migrated})
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
	}
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
	if c.renewsHeld(o, leases) {
		// A steady-state renewal: the owner expands it with the Held of
		// its request AckSeq, and gets exactly this list.
		msg.Leases, msg.RenewHeld = nil, true
	}
	c.out.Owners = append(c.out.Owners, OwnerMessage{To: o.id, Msg: msg})
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

// nextLGN issues a fresh lease generation number: every grant gets one, so
// every loss shows as an LGN change (C§2.3, P§4.1).
func (c *Core) nextLGN(n *namespace) keyspace.LGN {
	if c.broken.ReuseLGN {
		return reusedLGN(n)
	}
	return n.s.lgn + 1 // recorded by the Set that grants it
}

// backoff draws the random wait before a resend (C§2.3.2).
func (c *Core) backoff() time.Duration {
	t := c.cfg.Timing
	if t.BackoffMax <= t.BackoffMin {
		return t.BackoffMin
	}
	return t.BackoffMin + time.Duration(c.rng.Int64N(int64(t.BackoffMax-t.BackoffMin)))
}
