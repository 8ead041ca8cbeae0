// Package thinlookup is a Lookup that speaks the sync protocol to the
// Manager without keeping a copy of the lease table: the deterministic core
// that the simulation's thin Lookups (internal/sim, Config.ThinLookups) and
// the loopback benchmark's (cmd/leasehold-bench) both run, so that a
// benchmark's thousands of Lookups load the Manager as full ones would
// without the memory and time of thousands of copies.
package thinlookup

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// Core follows lookup.Core's rules for what it sends and when — a
// SyncRequest when its freshness is Sync old (at the retry pace of Sync/4
// while unanswered, and at least every LookupPollMax), carrying its epoch
// and LSN, and saying that it takes heartbeats, which vouch for freshness
// as they do for a full Lookup (docs/protocol.md, "Heartbeats"). It applies
// a delta or snapshot by moving its LSN, asks again on a gap (at most every
// Sync/4 until answered) or on a new epoch without a snapshot, and adopts
// the Manager's Sync, SyncTimeout and MaxDrift from the answers that carry
// them. The Manager receives the requests a full Lookup would send at the
// same instants and sends the same updates.
//
// Like lookup.Core it starts no goroutines, never reads a clock (every
// method takes now) and is not safe for concurrent use.
type Core struct {
	ns     string
	timing protocol.Timing
	// ownDrift is the configured MaxDrift; timing.MaxDrift is the one in
	// force, the larger of it and the Manager's (protocol.JudgingDrift).
	ownDrift float64

	epoch    uint64
	lsn      keyspace.LSN
	nextID   uint64
	nextSync time.Time
	fresh    time.Time            // the freshness lookup.Core would give its copy (zero: none yet)
	pending  map[uint64]time.Time // unanswered requests and when they were sent
	// sent holds when recent requests were sent, answered or not, for the
	// pushes and heartbeats that vouch for freshness by naming one; bounded
	// as lookup.Core's is (maxSent).
	sent     map[uint64]time.Time
	lastPoll time.Time // when the last request was sent (zero: none yet)
	repaired time.Time // when a gap last made it ask (zero: none outstanding)
	out      []*protocol.SyncRequest
}

// maxSent is lookup.Core's bound on the requests whose send times it keeps.
const maxSent = 16

// New returns a Core for namespace ns with timings t, started at now: its
// first Tick asks for a sync.
func New(ns string, t protocol.Timing, now time.Time) *Core {
	return &Core{ns: ns, timing: t, ownDrift: t.MaxDrift, nextSync: now,
		pending: map[uint64]time.Time{}, sent: map[uint64]time.Time{}}
}

// Epoch returns the Manager epoch of the updates followed (0: none yet).
func (c *Core) Epoch() uint64 { return c.epoch }

// LSN returns the LSN the Lookup's copy would have.
func (c *Core) LSN() keyspace.LSN { return c.lsn }

// Fresh returns the freshness a full Lookup's copy would have: when the
// newest request its updates reflect was sent, or a heartbeat's vouching.
func (c *Core) Fresh() time.Time { return c.fresh }

// Timing returns the timings in force: the configured ones, with Sync and
// SyncTimeout as the Manager's answers set them, and MaxDrift the larger of
// the configured one and the Manager's.
func (c *Core) Timing() protocol.Timing { return c.timing }

// NextDeadline is the time by which Tick must be called next.
func (c *Core) NextDeadline() time.Time { return c.nextSync }

// Tick asks for a sync if one is due by now.
func (c *Core) Tick(now time.Time) {
	if !now.Before(c.nextSync) {
		c.request(now)
	}
}

// Reconnected asks for a sync at once: the transport reached a Manager
// replica anew, and the request also subscribes it to that replica's
// pushes.
func (c *Core) Reconnected(now time.Time) { c.request(now) }

// Ready returns the requests to send since the last call, in order, and
// forgets them.
func (c *Core) Ready() []*protocol.SyncRequest {
	out := c.out
	c.out = nil
	return out
}

func (c *Core) request(now time.Time) {
	c.nextID++
	c.pending[c.nextID] = now
	c.sent[c.nextID] = now
	for id, sent := range c.pending {
		if now.Sub(sent) > c.timing.SyncTimeout {
			delete(c.pending, id)
		}
	}
	if len(c.sent) > maxSent {
		delete(c.sent, c.nextID-maxSent)
	}
	c.lastPoll = now
	c.schedule()
	c.out = append(c.out, &protocol.SyncRequest{Namespace: c.ns, ID: c.nextID, Epoch: c.epoch, LSN: c.lsn,
		Heartbeats: true, MaxDrift: c.timing.MaxDrift})
}

// schedule is lookup.Core's poll rule (protocol.Timing.NextPoll): when the
// copy is Sync old, no sooner than Sync/4 after the last request, nor later
// than LookupPollMax after it.
func (c *Core) schedule() {
	if next := c.timing.NextPoll(c.lastPoll, c.fresh); !next.IsZero() {
		c.nextSync = next // else the first Tick asks
	}
}

// Step handles a SyncResponse (an answer, a push or a heartbeat) received
// at now. A response without a namespace is taken as the stream's: a
// Manager that was told names_once leaves it out after the first.
func (c *Core) Step(now time.Time, m *protocol.SyncResponse) {
	if (m.Namespace != "" && m.Namespace != c.ns) || m.Epoch < c.epoch || m.Epoch == 0 {
		return // another namespace, or from a dead Manager incarnation
	}
	if m.Sync > 0 && m.SyncTimeout > m.Sync {
		// The Manager's timings rule, as lookup.Core takes them; a response
		// that leaves them out (names_once) keeps the last ones.
		if c.timing.Sync != m.Sync || c.timing.SyncTimeout != m.SyncTimeout {
			c.timing.Sync, c.timing.SyncTimeout = m.Sync, m.SyncTimeout
			c.schedule()
		}
		c.timing.MaxDrift = protocol.JudgingDrift(c.ownDrift, m.MaxDrift)
	}
	sent, answered := c.pending[m.ID]
	delete(c.pending, m.ID)
	u := m.Update
	if m.Epoch > c.epoch {
		if !u.Snapshot {
			c.request(now) // a new Manager: it needs its snapshot
			return
		}
		c.epoch, c.lsn = m.Epoch, 0
	}
	if u.To > c.lsn {
		if !u.Snapshot && u.From > c.lsn {
			c.repair(now) // a gap: a push was lost or overtaken
			return
		}
		c.lsn = u.To
	}
	if m.Epoch != c.epoch {
		return
	}
	fresh := c.fresh
	if answered {
		c.repaired = time.Time{}
		if sent.After(fresh) {
			fresh = sent
		}
	}
	if sk, ok := c.sent[m.Request]; ok && m.Request != 0 {
		for id := range c.sent {
			if id < m.Request {
				delete(c.sent, id) // the replica has a later request: these name nothing more
			}
		}
		if f := c.timing.Vouched(sk, m.SinceRequest); f.After(fresh) {
			fresh = f
		}
	}
	if fresh != c.fresh {
		c.fresh = fresh
		c.schedule()
	}
}

// repair asks for what a gap misses, at most every Sync/4 until answered,
// as lookup.Core does.
func (c *Core) repair(now time.Time) {
	if !c.repaired.IsZero() && now.Sub(c.repaired) < c.timing.Sync/4 {
		return
	}
	c.repaired = now
	c.request(now)
}
