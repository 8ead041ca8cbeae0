package lookup

import (
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// CoreConfig configures a Core.
type CoreConfig struct {
	Namespace string
	Timing    protocol.Timing
}

// Loss is a loss notification: the soft state of every key in Ranges may be
// gone, so clients that stored state there should republish it (P§2.1).
// All is set when the Lookup could not sync for SyncTimeout and reports every
// range conservatively.
type Loss struct {
	Ranges []keyspace.Range
	All    bool
	// Owners names whose state was lost: Ranges grouped by the Owner that
	// held them in the copy (sorted by Owner). Empty when All, since the
	// copy cannot say what changed, and for a range the copy had free.
	Owners []leasetable.OwnerRanges
}

// Core is the Lookup library's deterministic state machine: a full copy of
// the lease table kept in sync with the Manager, and the loss notifications
// the changes imply (C§2.2, P§4.2). It starts no goroutines, opens no
// sockets, never reads a clock, and is not safe for concurrent use.
type Core struct {
	cfg  CoreConfig
	view *leasetable.View
	// ownDrift is the configured MaxDrift; cfg.Timing.MaxDrift is the one
	// in force, the larger of it and the Manager's (protocol.JudgingDrift).
	ownDrift float64
	// broken holds the rules the simulation breaks on purpose
	// (core_broken.go); the zero value, always outside it, breaks none.
	broken faults.Set

	epoch   uint64               // the epoch of the copy (0: none yet)
	nextID  uint64               // last SyncRequest ID used
	pending map[uint64]time.Time // unanswered requests and when they were sent
	// sent holds when recent requests were sent, answered or not, for the
	// pushes and heartbeats that vouch for freshness by naming one
	// (Request, SinceRequest). A request is forgotten once a message names
	// a later one, or when maxSent newer ones were sent.
	sent map[uint64]time.Time
	// fresh is when the newest request whose answer the copy reflects was
	// sent: the copy includes every change the Manager made before then.
	// A push or heartbeat moves it as an answer to a request sent at
	// s + SinceRequest/(1+MaxDrift) would (vouch).
	fresh    time.Time
	started  time.Time
	allLost  time.Time // when the last all-ranges notification was raised
	nextSync time.Time
	lastPoll time.Time // when the last request was sent (zero: none yet)
	polls    uint64    // requests sent
	// repairAsked is when a sync was last requested to repair a gap; until
	// it is answered, further gaps ask no more, so a burst of lost pushes
	// costs the Manager one answer, not one per push.
	repairAsked time.Time

	out    []*protocol.SyncRequest
	losses []Loss
	// applied is the last update applied to the copy, as applied.
	applied leasetable.Update
}

// NewCore returns a Core started at now; it asks for a sync at the first Tick.
func NewCore(cfg CoreConfig, now time.Time) *Core {
	return &Core{cfg: cfg, ownDrift: cfg.Timing.MaxDrift, view: leasetable.NewView(), pending: map[uint64]time.Time{},
		sent: map[uint64]time.Time{}, started: now, nextSync: now}
}

// Applied returns the last update applied to the copy, as applied: a delta
// without the changes the copy already had, and with the ends and owners a
// compact delta leaves to the copy filled in.
func (c *Core) Applied() leasetable.Update { return c.applied }

// View returns the copy of the lease table, for reading only.
func (c *Core) View() *leasetable.View { return c.view }

// Epoch returns the Manager epoch of the copy.
func (c *Core) Epoch() uint64 { return c.epoch }

// Ready returns the requests to send and the loss notifications raised since
// the last call, in order, and forgets them.
func (c *Core) Ready() ([]*protocol.SyncRequest, []Loss) {
	out, l := c.out, c.losses
	c.out, c.losses = nil, nil
	return out, l
}

// Lookup returns the owner of key according to the copy: a hint (C§3.1).
func (c *Core) Lookup(key keyspace.Key) (owner, addr string, lgn keyspace.LGN, ok bool) {
	return c.view.Lookup(key)
}

// staleAt is when the copy becomes too old to vouch for: SyncTimeout after
// the newest request it reflects, or after start if it never synced.
func (c *Core) staleAt() time.Time {
	base := c.fresh
	if base.IsZero() {
		base = c.started
	}
	if c.allLost.After(base) {
		base = c.allLost
	}
	return base.Add(c.cfg.Timing.SyncTimeout)
}

// Fresh returns when the newest sync whose answer the copy reflects was
// sent: the copy was at least that fresh then. Zero before the first.
func (c *Core) Fresh() time.Time { return c.fresh }

// Timing returns the timings in force: the configured ones, with Sync and
// SyncTimeout as the Manager's answers set them, and MaxDrift the larger of
// the configured one and the Manager's.
func (c *Core) Timing() protocol.Timing { return c.cfg.Timing }

// Polls returns the number of SyncRequests the Core has made.
func (c *Core) Polls() uint64 { return c.polls }

// NextDeadline is the local time by which Tick must be called next.
func (c *Core) NextDeadline() time.Time {
	d := c.nextSync
	if s := c.staleAt(); s.Before(d) {
		d = s
	}
	return d
}

// Tick runs the timers: the periodic sync (sooner while answers are
// missing) and the conservative notification of P§2.1.
func (c *Core) Tick(now time.Time) {
	if !now.Before(c.staleAt()) {
		// No answer for SyncTimeout: the Manager may have recorded losses
		// we cannot see. Report every range, and again every SyncTimeout
		// while cut off; keep the copy, so the diff at reconnection reports
		// what changed meanwhile.
		c.allLost = now
		c.losses = append(c.losses, Loss{Ranges: []keyspace.Range{keyspace.Full}, All: true})
	}
	if !now.Before(c.nextSync) {
		c.requestSync(now)
	}
}

// Reconnected tells the Lookup its transport reached a Manager replica anew:
// it asks for a sync now, which also subscribes it to that replica's pushes.
func (c *Core) Reconnected(now time.Time) { c.requestSync(now) }

func (c *Core) requestSync(now time.Time) {
	t := c.cfg.Timing
	c.nextID++
	c.polls++
	c.pending[c.nextID] = now
	c.sent[c.nextID] = now
	for id, sent := range c.pending {
		if now.Sub(sent) > t.SyncTimeout {
			delete(c.pending, id)
		}
	}
	if len(c.sent) > maxSent {
		delete(c.sent, c.nextID-maxSent)
	}
	c.lastPoll = now
	c.schedule()
	c.out = append(c.out, &protocol.SyncRequest{
		Namespace: c.cfg.Namespace, ID: c.nextID, Epoch: c.epoch, LSN: c.view.LSN(), Heartbeats: true,
		MaxDrift: c.cfg.Timing.MaxDrift,
	})
}

// maxSent bounds the requests whose send times are kept for heartbeats.
// Requests go out every Sync/4 at most while unanswered, so this covers
// four Syncs of them; a heartbeat naming an older one vouches for nothing.
const maxSent = 16

// schedule sets the next poll: when the copy's age reaches Sync, and no
// sooner than Sync/4 after the last request (the retry while one is
// unanswered), nor later than LookupPollMax after it. Without pushes and
// heartbeats that vouch for freshness this is a poll every Sync, answered
// or not at the retry pace, as it always was; with them, the copy stays
// young and the Lookup polls only when the Manager's heartbeats stop or
// the clocks' allowed drift has aged it by Sync (docs/protocol.md,
// "Heartbeats").
func (c *Core) schedule() {
	if next := c.cfg.Timing.NextPoll(c.lastPoll, c.fresh); !next.IsZero() {
		c.nextSync = next // else the first Tick polls (NewCore)
	}
}

// Step handles a SyncResponse (an answer or a push) received at now.
func (c *Core) Step(now time.Time, m *protocol.SyncResponse) {
	if m.Namespace != c.cfg.Namespace || m.Epoch < c.epoch || m.Epoch == 0 {
		return // another namespace, or from a dead Manager incarnation
	}
	if m.Sync > 0 && m.SyncTimeout > m.Sync {
		// The Manager's timings rule: its notification bound is the one
		// documented to the applications. A poll scheduled on our own,
		// longer interval comes forward.
		if c.cfg.Timing.Sync != m.Sync || c.cfg.Timing.SyncTimeout != m.SyncTimeout {
			c.cfg.Timing.Sync, c.cfg.Timing.SyncTimeout = m.Sync, m.SyncTimeout
			c.schedule()
		}
		// And its clock-rate bound, before this message's vouching is
		// judged: a Lookup on the default must not take a heartbeat from a
		// Manager that allows more drift for fresher than it is. Requests
		// say the MaxDrift in force, and a replica vouches only to those
		// that say at least its own (Timing.VouchesFor).
		c.cfg.Timing.MaxDrift = protocol.JudgingDrift(c.ownDrift, m.MaxDrift)
	}
	sent, answered := c.pending[m.ID]
	if m.ID != 0 {
		delete(c.pending, m.ID)
	}
	u := m.Update
	if m.Epoch > c.epoch {
		if !u.Snapshot {
			c.repair(now) // a new Manager: we need its snapshot
			return
		}
		if c.epoch != 0 {
			// The Manager lost its state: every lease we knew is gone.
			lost, by := c.view.ResetByOwner()
			c.report(lost, by, false)
		}
		c.epoch = m.Epoch
	}
	if !u.Snapshot {
		u = trim(u, c.view.LSN())
	}
	if u.To > c.view.LSN() {
		if r, err := c.view.Resolve(u); err == nil {
			u = r // a compact delta's ends and owners, for Applied
		}
		lost, by, err := c.view.ApplyByOwner(u)
		if err != nil {
			// A gap: a push was lost or overtaken. Ask for what we miss.
			c.repair(now)
			return
		}
		if u.Snapshot && c.broken.IgnoreSnapshotDiff {
			lost, by = nil, nil
		}
		c.applied = u
		c.report(lost, by, false)
	}
	if c.view.LSN() < u.To || m.Epoch != c.epoch {
		return
	}
	fresh := c.fresh
	if answered {
		c.repairAsked = time.Time{}
		fresh = later(fresh, sent)
	}
	if f, ok := c.vouched(now, m); ok {
		fresh = later(fresh, f)
	}
	if fresh != c.fresh {
		c.fresh = fresh
		c.schedule()
	}
}

// vouched returns the freshness a push or heartbeat vouches for, which the
// copy has once it holds the message's update: the replica received
// request k, sent at s_k on our clock, after s_k, and built the message
// SinceRequest later on its own clock, while our clock advanced at least
// SinceRequest/(1+MaxDrift). The message holds every change an answer to
// a request sent at s_k + SinceRequest/(1+MaxDrift) would, since that
// request could have been answered no earlier than the message was built
// (docs/protocol.md, "Heartbeats").
func (c *Core) vouched(now time.Time, m *protocol.SyncResponse) (time.Time, bool) {
	if m.Request == 0 {
		return time.Time{}, false
	}
	sk, ok := c.sent[m.Request]
	if !ok {
		return time.Time{}, false
	}
	for id := range c.sent {
		if id < m.Request {
			delete(c.sent, id) // the replica has a later request: these name nothing more
		}
	}
	switch {
	case c.broken.FreshAtReceipt:
		return now, true
	case c.broken.FreshWithoutDrift:
		return sk.Add(m.SinceRequest), true
	}
	return c.cfg.Timing.Vouched(sk, m.SinceRequest), true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// repair asks for a sync to fill a gap, unless one asked for the same
// reason is still unanswered and recent.
func (c *Core) repair(now time.Time) {
	if !c.repairAsked.IsZero() && now.Sub(c.repairAsked) < c.cfg.Timing.Sync/4 {
		return
	}
	c.repairAsked = now
	c.requestSync(now)
}

func (c *Core) report(lost []keyspace.Range, by []leasetable.OwnerRanges, all bool) {
	if len(lost) > 0 {
		c.losses = append(c.losses, Loss{Ranges: lost, All: all, Owners: by})
	}
}

// trim drops the changes of a delta the copy already has. A delta some of
// whose ranges or owners are to be read from the copy at From (FromCopy,
// OwnerFromCopy: a compact push) is left whole: the copy is past From, so it does not fit, and the
// Lookup asks again (an answer to a poll comes in the full form).
func trim(u leasetable.Update, lsn keyspace.LSN) leasetable.Update {
	if u.From >= lsn || u.To <= lsn {
		return u
	}
	for _, c := range u.Changes {
		if c.FromCopy || c.OwnerFromCopy {
			return u
		}
	}
	for len(u.Changes) > 0 && u.Changes[0].LSN <= lsn {
		u.Changes = u.Changes[1:]
	}
	u.From = lsn
	return u
}
