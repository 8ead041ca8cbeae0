// The Core: the leader's lease logic over its working copy of the State,
// its Owner sessions and namespaces, and the Round it asks its replica to
// record and send (docs/design.md rule 8: the Owners' messages go only
// after the Changes are recorded).

package lease

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
	ErrUnknownNamespace = errors.New("lease: unknown namespace")
	ErrBadMessage       = errors.New("lease: malformed message")
)

// ErrUnknownOwner refuses to drain an Owner that is not a live member.
var ErrUnknownOwner = errors.New("lease: no live owner")

// ErrLimit refuses a request that would take a namespace past one of the
// Manager's limits (MaxOwners, MaxRanges); its message names the limit
// and the flag that sets it.
var ErrLimit = errors.New("lease: limit reached")

// ErrGateFull refuses a drain while DrainGate Owners are draining.
var ErrGateFull = errors.New("lease: the maintenance gate is full")

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
	cfg     Settings
	broken  faults.Set // rules broken on purpose (broken.go); none outside the simulation
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
	stats protocol.Stats
}

// Stats returns the counters.
func (c *Core) Stats() protocol.Stats { return c.stats }

// Owners describes a namespace's owner sessions, sorted by ID.
func (c *Core) Owners(ns string) []protocol.OwnerInfo {
	out := c.Sessions(ns)
	if len(out) == 0 {
		return out
	}
	by := make(map[string]*protocol.OwnerInfo, len(out))
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
	for _, rec := range c.ns[ns].s.standbys {
		if i := by[rec.Owner]; i != nil {
			i.StandbyRanges++
			if rec.InSync {
				i.StandbyInSync++
			}
		}
	}
	return out
}

// Sessions describes the owner sessions of a namespace as Owners does, by
// ID, without what the table gives them (Ranges and Share are zero): it
// does not walk the table.
func (c *Core) Sessions(ns string) []protocol.OwnerInfo {
	n := c.ns[ns]
	if n == nil {
		return nil
	}
	out := make([]protocol.OwnerInfo, 0, len(n.owners))
	for id, o := range n.owners {
		out = append(out, protocol.OwnerInfo{ID: id, Addr: o.addr, Incarnation: o.inc, Member: o.member,
			Load: o.rate, Capacity: o.capacity, Draining: o.draining, HotKeys: o.hot, Zone: o.zone})
	}
	slices.SortFunc(out, func(a, b protocol.OwnerInfo) int { return cmp.Compare(a.ID, b.ID) })
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

	starts startsCount // the MaxRanges check's last count (limits.go)

	forgetAt time.Time // when the next Owner may be forgotten (core_admin.go); zero: none

	// The standbys (standby.go): pair reruns the pairing at the next
	// flush (the table or an Owner changed), and namedAt is when each
	// pairing not yet in sync was named, by the holder's LGN (for the fill
	// time; leader-local).
	pair    bool
	namedAt map[keyspace.LGN]time.Time
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
	// as a renewal would refuse it and lose what a migration carried. A
	// promoted grant's is replicated too (promote_state.go): a new leader
	// starts its sessions with them.
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

	zone string // the Owner's failure domain (replicated)
}

// Epoch returns the Manager's epoch.
func (c *Core) Epoch() uint64 { return c.st.epoch }

// apply records a change in the working state and in the Round.
func (c *Core) apply(now time.Time, ch Change) {
	if err := c.st.apply(now, ch); err != nil {
		panic(fmt.Sprintf("lease: core made an invalid change %+v: %v", ch, err))
	}
	c.out.Changes = append(c.out.Changes, ch)
}

// set records a lease-table change.
func (c *Core) set(now time.Time, n *namespace, r keyspace.Range, e leasetable.Entry) {
	c.apply(now, Change{Op: OpSet, NS: n.name, Range: r, Entry: e})
	n.pair = true
}

// record saves the replicated part of an owner session.
func (c *Core) record(now time.Time, n *namespace, o *ownerSession) {
	rec := OwnerRecord{Addr: o.addr, Incarnation: o.inc, Member: o.member, Capacity: o.capacity, Draining: o.draining, Since: o.since, Zone: o.zone}
	if n.s.owners[o.id] != rec {
		c.apply(now, Change{Op: OpOwner, NS: n.name, Owner: o.id, Record: rec})
		n.pair = true
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
		if wake := n.wakeAt(now); len(n.dirty) > 0 || (!wake.IsZero() && !now.Before(wake)) {
			c.stats.Expiries += c.reconcile(now, n)
		}
		c.pairStandbys(now, n)
		c.sendPushed(now, n)
		// The sends grant: pair the new leases with standbys now, so
		// the holders hear of them in the next message, not a renewal
		// later.
		if n.pair && c.cfg.standbys(n.name) > 0 {
			c.pairStandbys(now, n)
			c.sendPushed(now, n)
		}
	}
}

// sendPushed sends the messages flush has queued: to the sessions pushed,
// and the race resends due.
func (c *Core) sendPushed(now time.Time, n *namespace) {
	var ids []string
	for _, id := range n.pushing {
		o := n.owners[id]
		switch {
		case o == nil || !o.push:
		case o.peerSeq == 0 && n.promotionPending(o) && !c.broken.PromotionPushEarly:
			// A session that has not heard its Owner (a new leader's)
			// sends no promoted grant: promote_state.go.
			o.push = false
		default:
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

// membershipEvery is Settings.MembershipEvery with its default.
func (c *Core) membershipEvery() time.Duration {
	if e := c.cfg.MembershipEvery; e != 0 {
		return e
	}
	return min(time.Second, c.cfg.Timing.Renew/4)
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
