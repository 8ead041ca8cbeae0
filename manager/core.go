package manager

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
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

// CoreConfig configures a Core.
type CoreConfig struct {
	Timing protocol.Timing
	// Policy computes the desired assignment; nil means consistent hashing
	// with 64 virtual nodes per owner (C§2.1.2).
	Policy assign.Policy
	// Epoch names this Manager's lease table. It must grow every time the
	// Manager starts without its previous state, so Owners and Lookups can
	// tell a restarted Manager from a delayed message of a dead one. Zero,
	// which Lookups read as "no epoch yet", is taken as 1.
	Epoch uint64
	// Namespaces served besides DefaultNamespace.
	Namespaces []string
	Seed       uint64 // seeds the race-backoff jitter
	Faults     *faults.Set
}

// OwnerMessage is a LeaseResponse to deliver to the Owner named To.
type OwnerMessage struct {
	To  string
	Msg *protocol.LeaseResponse
}

// LookupMessage is a SyncResponse to deliver to the Lookup session To.
type LookupMessage struct {
	To  uint64
	Msg *protocol.SyncResponse
}

// Ready is what a Core asks its driver to send.
type Ready struct {
	Owners  []OwnerMessage
	Lookups []LookupMessage
}

// Core is the Manager's deterministic state machine (C§2.1.2, P§4.1): it
// keeps the namespaces, their owners and lease tables, computes the desired
// assignment, grants, renews, recalls and expires leases, and answers
// Lookups. It is fed messages and clock readings and returns messages; it
// starts no goroutines, opens no sockets, never reads a clock, and is not
// safe for concurrent use.
type Core struct {
	cfg     CoreConfig
	rng     *rand.Rand
	ns      map[string]*namespace
	lastNow time.Time
	out     Ready
	stats   Stats
}

// Stats counts what a Core has done since it started.
type Stats struct {
	LeaseRequests uint64 // accepted or not
	SyncRequests  uint64
	Grants        uint64 // ranges granted with a fresh LGN
	Recalls       uint64 // ranges omitted from a holder's message to move them
	Releases      uint64 // ranges freed by acknowledgement (recall or refusal)
	Expiries      uint64 // ranges freed because their reservation ran out
	OwnerRestarts uint64 // new incarnations seen
	RacesDropped  uint64 // requests dropped by the race filter (C§2.3.2)
	StaleDropped  uint64 // duplicates and messages of dead incarnations
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
}

// Owners describes a namespace's owner sessions, sorted by ID.
func (c *Core) Owners(ns string) []OwnerInfo {
	n := c.ns[ns]
	if n == nil {
		return nil
	}
	by := map[string]*OwnerInfo{}
	var out []OwnerInfo
	for id, o := range n.owners {
		by[id] = &OwnerInfo{ID: id, Addr: o.addr, Incarnation: o.inc, Member: o.member}
	}
	n.table.Each(func(s leasetable.Segment) bool {
		if i := by[s.Entry.Owner]; i != nil {
			i.Ranges++
			i.Share += s.Range.Size() / (1 << 64)
		}
		return true
	})
	for _, i := range by {
		out = append(out, *i)
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

// Lookups returns the number of Lookup sessions of a namespace.
func (c *Core) Lookups(ns string) int {
	if n := c.ns[ns]; n != nil {
		return len(n.lookups)
	}
	return 0
}

type namespace struct {
	name     string
	table    *leasetable.Table
	res      *reservations
	owners   map[string]*ownerSession
	desired  assign.Assignment
	wants    map[string][]keyspace.Range // desired ranges by owner
	lgn      keyspace.LGN                // the last LGN issued
	lookups  map[uint64]*lookupSub
	members  bool      // membership changed: recompute desired
	dirty    bool      // something changed: reconcile
	nextWake time.Time // earliest future reservation end that matters
}

// ownerSession is the Manager's side of one Owner incarnation's session.
// Sessions, sequence numbers and timers are leader-local (DESIGN.md rule 8).
type ownerSession struct {
	id, addr  string
	inc       uint64
	mySeq     uint64 // Seq of the last LeaseResponse sent
	peerSeq   uint64 // highest LeaseRequest Seq heard
	lastHeard time.Time
	member    bool
	push      bool      // send a LeaseResponse at the next flush
	resendAt  time.Time // zero: no race resend pending
	sent      keyspace.RangeSet
}

type lookupSub struct {
	lastSeen time.Time
	pushed   keyspace.LSN // the LSN the session's copy will have
}

// NewCore returns a Manager core that started at now. It knows nothing of
// leases a previous incarnation granted, so it reserves the whole key space
// for one ManagerLease before granting anything (C§2.3.1).
func NewCore(cfg CoreConfig, now time.Time) *Core {
	if cfg.Policy == nil {
		cfg.Policy = assign.ConsistentHash{}
	}
	cfg.Epoch = max(cfg.Epoch, 1)
	c := &Core{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Epoch)), ns: map[string]*namespace{}, lastNow: now}
	for _, name := range append([]string{DefaultNamespace}, cfg.Namespaces...) {
		if _, ok := c.ns[name]; ok {
			continue
		}
		n := &namespace{
			name:    name,
			table:   leasetable.New(cfg.Timing.LogRetention),
			res:     newReservations(),
			owners:  map[string]*ownerSession{},
			lookups: map[uint64]*lookupSub{},
		}
		n.res.set(keyspace.Full, now.Add(cfg.Timing.ManagerLease))
		n.nextWake = now.Add(cfg.Timing.ManagerLease)
		c.ns[name] = n
	}
	return c
}

// Epoch returns the Manager's epoch.
func (c *Core) Epoch() uint64 { return c.cfg.Epoch }

// Ready returns the messages to send since the last call and forgets them.
func (c *Core) Ready() Ready {
	r := c.out
	c.out = Ready{}
	return r
}

// Table returns a namespace's lease table, for reading only.
func (c *Core) Table(ns string) *leasetable.Table {
	if n := c.ns[ns]; n != nil {
		return n.table
	}
	return nil
}

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
	return nil, fmt.Errorf("%w %q", ErrUnknownNamespace, name)
}

func (c *Core) noRaceFilter() bool {
	return c.cfg.Faults.Has(func(f *faults.Set) bool { return f.NoRaceFilter })
}

// StepLease handles a LeaseRequest received at now. An error means the
// request was malformed or for an unknown namespace; it changed nothing.
func (c *Core) StepLease(now time.Time, req *protocol.LeaseRequest) error {
	c.lastNow = now
	c.stats.LeaseRequests++
	n, err := c.namespace(req.Namespace)
	if err != nil {
		return err
	}
	if err := validateLeaseRequest(req); err != nil {
		return err
	}
	o := n.owners[req.Owner]
	if o == nil {
		o = &ownerSession{id: req.Owner, addr: req.Addr, inc: req.Incarnation}
		n.owners[req.Owner] = o
	}
	switch {
	case req.Incarnation < o.inc:
		c.stats.StaleDropped++
		return nil // from a dead run of this owner
	case req.Incarnation > o.inc:
		c.stats.OwnerRestarts++
		// The owner restarted: its soft state is gone. Report the loss now;
		// the old run's ranges stay reserved until its leases run out, since
		// nothing proves that process is really gone.
		n.loseOwner(now, o)
		*o = ownerSession{id: req.Owner, addr: req.Addr, inc: req.Incarnation, member: o.member}
	}
	if req.Seq <= o.peerSeq {
		c.stats.StaleDropped++
		return nil // duplicate or overtaken
	}
	o.peerSeq = req.Seq
	o.lastHeard = now
	if o.member == req.Leaving {
		o.member = !req.Leaving
		n.members = true
	}
	heard := o.mySeq == 0 || (req.AckEpoch == c.cfg.Epoch && req.AckSeq == o.mySeq)
	if !heard && !c.noRaceFilter() {
		// The owner sent this before it processed our latest message: it
		// raced (C§2.3.2, Figure 7). Drop it and resend ours after a random
		// backoff.
		c.stats.RacesDropped++
		if o.resendAt.IsZero() {
			o.resendAt = now.Add(c.backoff())
		}
		return nil
	}
	c.stats.Releases += n.release(now, o, req.Held)
	o.push = true // answer every accepted request
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
	return nil
}

// StepSync handles a Lookup's SyncRequest received at now on session id.
func (c *Core) StepSync(now time.Time, id uint64, req *protocol.SyncRequest) error {
	c.lastNow = now
	c.stats.SyncRequests++
	n, err := c.namespace(req.Namespace)
	if err != nil {
		return err
	}
	sub := n.lookups[id]
	if sub == nil {
		sub = &lookupSub{}
		n.lookups[id] = sub
	}
	sub.lastSeen = now
	var u leasetable.Update
	if req.Epoch != c.cfg.Epoch {
		// The Lookup's copy is from another Manager incarnation: its LSNs
		// mean nothing here.
		u = snapshot(n.table)
	} else {
		u = n.table.Since(req.LSN)
	}
	sub.pushed = u.To
	c.out.Lookups = append(c.out.Lookups, LookupMessage{To: id, Msg: c.syncResponse(n, req.ID, u)})
	return nil
}

func snapshot(t *leasetable.Table) leasetable.Update {
	return leasetable.Update{To: t.LSN(), Snapshot: true, Segments: t.Segments()}
}

// CloseLookup forgets a Lookup session (its stream ended).
func (c *Core) CloseLookup(ns string, id uint64) {
	if n := c.ns[ns]; n != nil {
		delete(n.lookups, id)
	}
}

// NextDeadline is the local time by which Tick must be called next.
func (c *Core) NextDeadline() time.Time {
	d := c.lastNow.Add(c.cfg.Timing.Renew / 4)
	min := func(t time.Time) {
		if !t.IsZero() && t.Before(d) {
			d = t
		}
	}
	for _, n := range c.ns {
		min(n.nextWake)
		for _, o := range n.owners {
			min(o.resendAt)
			if o.member {
				min(o.lastHeard.Add(c.cfg.Timing.ManagerLease))
			}
		}
	}
	return d
}

// Tick runs the timers: owner liveness, lease expiry, deferred grants, race
// resends, lookup session expiry and log truncation.
func (c *Core) Tick(now time.Time) {
	c.lastNow = now
	t := c.cfg.Timing
	for _, n := range c.ns {
		for id, o := range n.owners {
			if o.member && !now.Before(o.lastHeard.Add(t.ManagerLease)) {
				// Silent for a whole manager lease: its leases have run out
				// too. Assign its share to the others.
				o.member = false
				n.members = true
			}
			if !o.member && now.Sub(o.lastHeard) > 10*t.ManagerLease && o.sent.Empty() {
				delete(n.owners, id)
			}
		}
		for id, l := range n.lookups {
			if now.Sub(l.lastSeen) > 2*t.SyncTimeout {
				delete(n.lookups, id)
			}
		}
		n.table.Truncate(now)
	}
	c.flush(now)
}

// flush recomputes what changed and queues the messages it calls for.
func (c *Core) flush(now time.Time) {
	for _, name := range c.Namespaces() { // in order, so a run replays exactly
		n := c.ns[name]
		if n.members {
			n.members = false
			var ms []assign.Member
			for id, o := range n.owners {
				if o.member {
					ms = append(ms, assign.Member{ID: id})
				}
			}
			slices.SortFunc(ms, func(a, b assign.Member) int { return cmp.Compare(a.ID, b.ID) })
			n.desired = c.cfg.Policy.Assign(ms)
			n.wants = map[string][]keyspace.Range{}
			for _, d := range n.desired {
				n.wants[d.Owner] = append(n.wants[d.Owner], d.Range)
			}
			n.dirty = true
		}
		if n.dirty || (!n.nextWake.IsZero() && !now.Before(n.nextWake)) {
			c.stats.Expiries += n.reconcile(now)
		}
		ids := make([]string, 0, len(n.owners))
		for id, o := range n.owners {
			if o.push || (!o.resendAt.IsZero() && !now.Before(o.resendAt)) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids) // deterministic order
		for _, id := range ids {
			c.sendTo(now, n, n.owners[id])
		}
		c.pushLookups(n)
	}
}

// loseOwner records that an owner incarnation's soft state is gone: each of
// its ranges gets a free entry, so every Lookup raises a loss notification.
// Reservations are left as they are.
func (n *namespace) loseOwner(now time.Time, o *ownerSession) {
	for _, r := range n.heldBy(o.id) {
		n.table.Set(now, r.Range, leasetable.Entry{})
	}
	n.dirty = true
}

// heldBy returns the table segments the owner holds.
func (n *namespace) heldBy(id string) []leasetable.Segment {
	var out []leasetable.Segment
	n.table.Each(func(s leasetable.Segment) bool {
		if s.Entry.Owner == id {
			out = append(out, s)
		}
		return true
	})
	return out
}

// release frees every part of the owner's table entries that its accepted
// request no longer lists: the owner dropped them after processing our
// latest message (a recall acknowledged by omission, or a refused renewal),
// and the race filter guarantees no earlier message of ours can give them
// back, so they may be granted at once (C§2.3.2).
func (n *namespace) release(now time.Time, o *ownerSession, held []protocol.Lease) (freed uint64) {
	for _, s := range n.heldBy(o.id) {
		var kept keyspace.RangeSet
		for _, h := range held {
			if h.LGN == s.Entry.LGN && h.Range.Overlaps(s.Range) {
				kept = kept.Add(h.Range)
			}
		}
		for _, p := range keyspace.NewRangeSet(s.Range).Subtract(kept).Ranges() {
			n.table.Set(now, p, leasetable.Entry{})
			n.res.set(p, time.Time{})
			n.dirty = true
			freed++
		}
	}
	return freed
}

// reconcile expires leases whose reservation ended, and marks the owners
// that need a message now: those holding a range the desired assignment
// gives elsewhere (recall), and those a free range can be granted to.
func (n *namespace) reconcile(now time.Time) (expired uint64) {
	n.dirty = false
	n.nextWake = time.Time{}
	wake := func(t time.Time) {
		if n.nextWake.IsZero() || t.Before(n.nextWake) {
			n.nextWake = t
		}
	}
	// Expiry: the reservation ran out, so the holder's own lease ran out
	// earlier (C§2.3.1).
	for _, s := range n.table.Segments() {
		if s.Entry.Owner == "" {
			continue
		}
		gone, next := n.res.free(s.Range, now)
		for _, p := range gone.Ranges() {
			n.table.Set(now, p, leasetable.Entry{})
			expired++
		}
		if !next.IsZero() {
			wake(next)
		}
	}
	for _, s := range n.table.Segments() {
		n.eachDesired(s.Range, func(p keyspace.Range, want string) {
			switch holder := s.Entry.Owner; {
			case holder != "" && holder != want:
				if o := n.owners[holder]; o != nil && o.sent.OverlapsRange(p) {
					o.push = true // recall now
				}
			case holder != "":
				if o := n.owners[holder]; o != nil && !o.sent.CoversRange(p) {
					o.push = true // renew what the last message left out
				}
			case want != "":
				free, next := n.res.free(p, now)
				if !free.Empty() {
					if o := n.owners[want]; o != nil {
						o.push = true // grant
					}
				}
				if !next.IsZero() {
					wake(next)
				}
			}
		})
	}
	return expired
}

// eachDesired calls fn for each piece of r with the owner the desired
// assignment gives it ("" when there are no members).
func (n *namespace) eachDesired(r keyspace.Range, fn func(keyspace.Range, string)) {
	if len(n.desired) == 0 {
		fn(r, "")
		return
	}
	i, _ := slices.BinarySearchFunc(n.desired, r.Start, func(s assign.Segment, k keyspace.Key) int {
		if s.Range.Last() < k {
			return -1
		}
		if s.Range.Start > k {
			return 1
		}
		return 0
	})
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
func (c *Core) sendTo(now time.Time, n *namespace, o *ownerSession) {
	until := now.Add(c.cfg.Timing.ManagerLease)
	var leases []protocol.Lease
	if o.member {
		for _, s := range n.heldBy(o.id) {
			n.eachDesired(s.Range, func(p keyspace.Range, want string) {
				switch {
				case want == o.id:
					leases = append(leases, protocol.Lease{Range: p, LGN: s.Entry.LGN})
					n.res.extend(p, until)
				case o.sent.OverlapsRange(p):
					c.stats.Recalls++ // omitted now, listed last time
				}
			})
		}
		for _, d := range n.wants[o.id] {
			for _, s := range n.table.Overlapping(d) {
				if s.Entry.Owner != "" {
					continue
				}
				free, _ := n.res.free(s.Range, now)
				for _, g := range free.Ranges() {
					lgn := c.nextLGN(n)
					n.table.Set(now, g, leasetable.Entry{Owner: o.id, Addr: o.addr, LGN: lgn})
					n.res.set(g, until)
					leases = append(leases, protocol.Lease{Range: g, LGN: lgn, Grant: true})
					c.stats.Grants++
				}
			}
		}
		slices.SortFunc(leases, func(a, b protocol.Lease) int { return keyspace.Compare(a.Range, b.Range) })
	}
	o.mySeq++
	o.push = false
	o.resendAt = time.Time{}
	o.sent = keyspace.RangeSet{}
	for _, l := range leases {
		o.sent = o.sent.Add(l.Range)
	}
	c.out.Owners = append(c.out.Owners, OwnerMessage{To: o.id, Msg: &protocol.LeaseResponse{
		Namespace:   n.name,
		Owner:       o.id,
		Incarnation: o.inc,
		Epoch:       c.cfg.Epoch,
		Seq:         o.mySeq,
		AckSeq:      o.peerSeq,
		Leases:      leases,
		OwnerLease:  c.cfg.Timing.OwnerLease,
		Renew:       c.cfg.Timing.Renew,
	}})
}

// nextLGN issues a fresh lease generation number: every grant gets one, so
// every loss shows as an LGN change (C§2.3, P§4.1).
func (c *Core) nextLGN(n *namespace) keyspace.LGN {
	if n.lgn == 0 || !c.cfg.Faults.Has(func(f *faults.Set) bool { return f.ReuseLGN }) {
		n.lgn++
	}
	return n.lgn
}

// pushLookups sends every subscribed Lookup the changes it has not been sent
// (C§2.2.1 made push: the periodic sync remains the safety net).
func (c *Core) pushLookups(n *namespace) {
	lsn := n.table.LSN()
	ids := make([]uint64, 0, len(n.lookups))
	for id, l := range n.lookups {
		if l.pushed < lsn {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		l := n.lookups[id]
		u := n.table.Since(l.pushed)
		l.pushed = u.To
		c.out.Lookups = append(c.out.Lookups, LookupMessage{To: id, Msg: c.syncResponse(n, 0, u)})
	}
}

func (c *Core) syncResponse(n *namespace, id uint64, u leasetable.Update) *protocol.SyncResponse {
	return &protocol.SyncResponse{
		Namespace: n.name, ID: id, Epoch: c.cfg.Epoch, Update: u,
		Sync: c.cfg.Timing.Sync, SyncTimeout: c.cfg.Timing.SyncTimeout,
	}
}

// backoff draws the random wait before a resend (C§2.3.2).
func (c *Core) backoff() time.Duration {
	t := c.cfg.Timing
	if t.BackoffMax <= t.BackoffMin {
		return t.BackoffMin
	}
	return t.BackoffMin + time.Duration(c.rng.Int64N(int64(t.BackoffMax-t.BackoffMin)))
}
