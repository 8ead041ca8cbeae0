package sim

import (
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// leaseID names a lease across the whole run.
type leaseID struct {
	epoch uint64
	lgn   keyspace.LGN
}

// obligation is a loss a Lookup must report before deadline.
type obligation struct {
	lease    leaseID
	at       time.Duration // when the Manager recorded the loss
	deadline time.Duration
	missing  keyspace.RangeSet // not yet covered by a notification
}

type checker struct {
	s     *Sim
	bound time.Duration

	// shadow follows the Manager's table change by change, to find every
	// unmigrated LGN change the moment it is recorded.
	shadow      *leasetable.Table
	shadowEpoch uint64

	owed     map[*node][]*obligation
	everHeld map[*node]beliefs // the keys each Owner run has believed, by lease

	mine, theirs []owner.Lease // ownerStepped's buffers, reused
	acks         []owner.Lease // acked's

	// migratedFrom names, for every migrated grant the table has shown,
	// the lease whose state it carries (Entry.MigratedFrom).
	migratedFrom map[leaseID]keyspace.LGN

	writes *writeBook // acknowledged writes (acks.go)
	// sbLast is the last write acknowledged on each key of the standby
	// application since its last recorded loss (standby.go).
	sbLast map[keyspace.Key]sbAck

	violation *Violation
	off       bool // Config.NoChecks
	noWrites  bool // Config.NoWriteCheck
}

func newChecker(s *Sim) *checker {
	return &checker{
		s:            s,
		bound:        s.cfg.Timing.NotificationBound(),
		shadow:       leasetable.New(time.Hour),
		owed:         map[*node][]*obligation{},
		everHeld:     map[*node]beliefs{},
		migratedFrom: map[leaseID]keyspace.LGN{},
	}
}

func (c *checker) fail(name, format string, args ...any) {
	if c.violation == nil {
		c.violation = &Violation{Checker: name, At: c.s.now, Detail: fmt.Sprintf(format, args...)}
	}
}

// ---- single copy and continuity ----

func (c *checker) ownerStarted(n *node) { c.everHeld[n] = beliefs{} }

// beliefs are the keys an Owner run believes (or has believed), by lease.
type beliefs map[owner.LeaseNum]keyspace.RangeSet

// add records that the run believes the keys of l.
func (b beliefs) add(l owner.Lease) {
	if s := b[l.Num]; !s.CoversRange(l.Range) {
		b[l.Num] = s.Add(l.Range)
	}
}

// regained returns the keys of l that the run believed under l's lease
// once (ever), did not believe just before this step (before), and
// believes again now: a gap in the lease on those keys.
func regained(ever, before beliefs, l owner.Lease) keyspace.RangeSet {
	e := ever[l.Num]
	if !e.OverlapsRange(l.Range) {
		return keyspace.RangeSet{}
	}
	return keyspace.NewRangeSet(l.Range).Intersect(e).Subtract(before[l.Num])
}

func (c *checker) heldNums(n *node) beliefs {
	if c.off {
		return nil
	}
	out := beliefs{}
	for _, l := range n.own.Held(n.local(c.s.now)) {
		out.add(l)
	}
	return out
}

// ownerStepped checks, after an Owner handled a Manager message, that no
// other Owner believes it holds any key this one now believes it holds: only
// such a step can start or extend a belief (single copy, P§2).
func (c *checker) ownerStepped(n *node, before beliefs) {
	if c.off {
		return
	}
	// Two buffers the checker keeps: every Owner step asks every Owner run.
	c.mine = n.own.AppendHeld(c.mine[:0], n.local(c.s.now))
	mine := c.mine
	for _, l := range mine {
		// Continuity, key by key: a key believed under a lease number again
		// after a gap would let CheckLeaseContinuous (a check of one key)
		// vouch for state another owner may have changed meanwhile. A lease
		// comes in pieces, and a run may give one piece up and take up
		// another it never believed: no key of the second had a gap.
		if gap := regained(c.everHeld[n], before, l); !gap.Empty() {
			c.fail("continuity", "%s believes lease %+v again after a gap on %v", n.name, l.Num, gap)
		}
	}
	for _, l := range mine {
		c.everHeld[n].add(l)
	}
	for _, o := range c.s.ownerRuns() {
		if o == n || !o.up {
			continue
		}
		c.theirs = o.own.AppendHeld(c.theirs[:0], o.local(c.s.now))
		theirs := c.theirs
		i, j := 0, 0
		for i < len(mine) && j < len(theirs) {
			if mine[i].Range.Overlaps(theirs[j].Range) {
				c.fail("single copy", "%s holds %v (lease %+v, until %s) while %s holds %v (lease %+v, until %s)",
					n.name, mine[i].Range, mine[i].Num, mine[i].Expiry.Format(time.StampMilli),
					o.name, theirs[j].Range, theirs[j].Num, theirs[j].Expiry.Format(time.StampMilli))
				return
			}
			if mine[i].Range.Last() < theirs[j].Range.Last() {
				i++
			} else {
				j++
			}
		}
	}
}

// ---- migration ----

// tookUp checks a migrated grant an Owner run takes up: the run must have
// received the state of the lease the grant carries on (Entry.MigratedFrom)
// for all of the granted range. If it has not, the state is lost, and the
// migrated flag keeps every Lookup from hearing of it.
func (c *checker) tookUp(n *node, g owner.Lease) {
	if c.off {
		return
	}
	c.s.stats.MigratedGrants++
	id := leaseID{g.Num.Epoch, g.Num.LGN}
	from, ok := c.migratedFrom[id]
	if !ok {
		c.fail("migration", "%s took up a migrated grant of %v (lease %+v) the table never showed", n.name, g.Range, id)
		return
	}
	var got keyspace.RangeSet
	for _, t := range n.app.pending {
		if t.from == (leaseID{id.epoch, from}) {
			if p, ok := t.r.Intersect(g.Range); ok {
				got = got.Add(p)
			}
		}
	}
	if !got.CoversRange(g.Range) {
		c.fail("migration", "%s took up %v as migrated from lease %d (now lease %+v) but received the state of only %v: "+
			"a loss no Lookup is told of", n.name, g.Range, from, id, got)
		return
	}
	c.copiedAfterWrites(n, g, leaseID{id.epoch, from})
}

// ---- recovery notification ----

// managerStepped follows the committed table: after every step of a
// replica, it compares that replica's applied table with the shadow, change
// by change, when the replica is ahead of it, and turns every unmigrated
// LGN change of an owned range into an obligation for every Lookup that is
// up. Every replica applies the same log, so LSNs agree and the shadow is
// the table of whichever replica is furthest ahead: a change becomes an
// obligation when it is first applied anywhere. (The leader's Core works
// ahead of the log, but no Lookup is told a change before it is applied.)
func (c *checker) managerStepped(n *node) {
	if c.off {
		return
	}
	st := n.rep.State()
	t := st.Table(namespace)
	if t == nil || st.Epoch() == 0 || st.Epoch() < c.shadowEpoch {
		return
	}
	if st.Epoch() != c.shadowEpoch {
		c.shadow = leasetable.New(time.Hour)
		c.shadowEpoch = st.Epoch()
	}
	if t.LSN() <= c.shadow.LSN() {
		return // a replica catching up
	}
	u := t.Since(c.shadow.LSN())
	if u.Snapshot {
		for _, seg := range u.Segments {
			c.change(seg.Range, seg.Entry)
		}
		if err := c.shadow.Restore(u.To, u.Segments); err != nil {
			panic(err)
		}
		return
	}
	for _, ch := range u.Changes {
		c.change(ch.Range, ch.Entry)
		c.shadow.Set(base, ch.Range, ch.Entry)
	}
}

func (c *checker) change(r keyspace.Range, e leasetable.Entry) {
	if e.Migrated {
		c.migratedFrom[leaseID{c.shadowEpoch, e.LGN}] = e.MigratedFrom
	}
	for _, old := range c.shadow.Overlapping(r) {
		if old.Entry.LGN != 0 && old.Entry.LGN != e.LGN && !e.Migrated {
			if traceNode == "losses" {
				fmt.Printf("%12s loss %v %s/%d -> %q/%d\n", c.s.now, old.Range, old.Entry.Owner, old.Entry.LGN, e.Owner, e.LGN)
			}
			c.lost(old.Range, leaseID{c.shadowEpoch, old.Entry.LGN})
			if p, ok := old.Range.Intersect(r); ok {
				c.sbLost(p)
			}
			c.lostWrites(old.Range, r, leaseID{c.shadowEpoch, old.Entry.LGN})
		}
	}
}

// managerCrashed: a single Manager that restarts without its storage loses
// its table, so every lease of its epoch is lost now. (A restart from the
// Raft log, or a new leader, loses nothing: the table carries over.)
func (c *checker) managerCrashed() {
	c.sbLast = nil // every key is lost with the epoch
	if c.off {
		return
	}
	for _, seg := range c.shadow.Segments() {
		if seg.Entry.LGN != 0 {
			c.lost(seg.Range, leaseID{c.shadowEpoch, seg.Entry.LGN})
		}
	}
	c.shadow = leasetable.New(time.Hour)
}

// lost makes the loss of lease id on r an obligation for every Lookup that
// is up and whose copy shows the lease on part of r: that part must be
// notified within the bound. A Lookup whose copy never showed the lease
// cannot have routed anything to it.
func (c *checker) lost(r keyspace.Range, id leaseID) {
	c.s.stats.LossEvents++
	if rl := c.s.cfg.ReadLease; rl != nil && rl.NoLosses {
		c.fail("owner liveness", "the Manager recorded the loss of lease %d (epoch %d) on %v: only replicas were faulty, with the leader and a quorum connected", id.lgn, id.epoch, r)
	}
	for _, l := range c.s.lookups {
		if !l.up || l.look.Epoch() != id.epoch {
			continue
		}
		var shown keyspace.RangeSet
		for _, seg := range l.look.View().Overlapping(r) {
			if seg.Entry.LGN == id.lgn {
				shown = shown.Add(seg.Range)
			}
		}
		if !shown.Empty() {
			c.owed[l] = append(c.owed[l], &obligation{lease: id, at: c.s.now, deadline: c.s.now + c.bound, missing: shown})
		}
	}
}

func (c *checker) lookupStarted(n *node) {
	c.owed[n] = nil
}

func (c *checker) lookupCrashed(n *node) { c.owed[n] = nil }

// lookupLosses discharges the obligations a notification covers.
func (c *checker) lookupLosses(n *node, losses []lookup.Loss) {
	if c.off {
		return
	}
	c.s.stats.LookupNotices += len(losses)
	for _, l := range losses {
		cover := keyspace.NewRangeSet(l.Ranges...)
		kept := c.owed[n][:0]
		for _, ob := range c.owed[n] {
			if !l.All {
				ob.missing = subtract(ob.missing, cover)
			}
			if l.All || ob.missing.Empty() {
				c.s.stats.Notified++
				c.s.stats.WorstDelay = max(c.s.stats.WorstDelay, c.s.now-ob.at)
				continue
			}
			kept = append(kept, ob)
		}
		c.owed[n] = kept
	}
}

// subtract is s \ cover, without allocating when cover misses s or covers it.
func subtract(s, cover keyspace.RangeSet) keyspace.RangeSet {
	some, all := false, true
	for _, r := range s.Ranges() {
		if cover.OverlapsRange(r) {
			some = true
		}
		if !cover.CoversRange(r) {
			all = false
		}
	}
	switch {
	case all:
		return keyspace.RangeSet{}
	case !some:
		return s
	}
	return s.Subtract(cover)
}

// deadlines fails any obligation past its deadline.
func (c *checker) deadlines() {
	if c.off {
		return
	}
	for _, l := range c.s.lookups {
		for _, ob := range c.owed[l] {
			if c.s.now > ob.deadline {
				c.fail("recovery notification", "%s was not told within %s of the loss of lease %+v on %v recorded at %s",
					l.name, c.bound, ob.lease, ob.missing, ob.at)
				return
			}
		}
	}
}

// ---- convergence ----

// converged checks the quiet system: one replica leads and has taken over,
// its Core's working table is its applied table (nothing is waiting to
// commit), every replica has applied that table, every key is owned, and
// by the owner the policy names, and every Lookup's copy equals the table.
func (c *checker) converged() {
	if c.off {
		return
	}
	var lead *node
	for _, m := range c.s.mgrs {
		if m.up && m.rep.Core() != nil {
			if lead != nil {
				c.fail("convergence", "%s and %s have both taken over %s after faults stopped", lead.name, m.name, c.s.cfg.SettleTime)
				return
			}
			lead = m
		}
	}
	if lead == nil {
		c.fail("convergence", "no Manager replica has taken over %s after faults stopped", c.s.cfg.SettleTime)
		return
	}
	core, st := lead.rep.Core(), lead.rep.State()
	t := st.Table(namespace)
	segs := t.Segments()
	if w := core.Table(namespace); w.LSN() != t.LSN() || !slices.Equal(w.Segments(), segs) {
		c.fail("convergence", "%s's working table (LSN %d) differs from its applied table (LSN %d)", lead.name, w.LSN(), t.LSN())
		return
	}
	for _, m := range c.s.mgrs {
		if !m.up || m == lead {
			continue
		}
		if mt := m.rep.State().Table(namespace); mt == nil || mt.LSN() != t.LSN() || !slices.Equal(mt.Segments(), segs) {
			c.fail("convergence", "%s's applied table differs from the leader %s's (LSN %d)", m.name, lead.name, t.LSN())
			return
		}
	}
	for _, seg := range segs {
		if seg.Entry.Owner == "" {
			c.fail("convergence", "%v has no owner %s after faults stopped", seg.Range, c.s.cfg.SettleTime)
			return
		}
	}
	desired := core.Desired(namespace)
	var all []string
	for _, o := range c.s.owners {
		all = append(all, o.name)
	}
	if members := core.Members(namespace); !slices.Equal(members, all) {
		c.fail("convergence", "members %v, want %v", members, all)
		return
	}
	for _, seg := range segs {
		for _, k := range []keyspace.Key{seg.Range.Start, seg.Range.Last()} {
			if want := desired.Owner(k); want != seg.Entry.Owner {
				c.fail("convergence", "key %016x is owned by %s, the policy says %s", uint64(k), seg.Entry.Owner, want)
				return
			}
		}
	}
	for _, l := range c.s.lookups {
		if l.look.Epoch() != st.Epoch() || !slices.Equal(l.look.View().Segments(), segs) {
			c.fail("convergence", "%s's copy (epoch %d, LSN %d) differs from the manager's table (epoch %d, LSN %d)",
				l.name, l.look.Epoch(), l.look.View().LSN(), st.Epoch(), t.LSN())
			return
		}
	}
}

// wireSize estimates a message's encoded size: 8-byte integers, ranges of 16
// bytes, strings with a length byte, 2 bytes for a flag that is set — close
// to the protobuf encoding.
func wireSize(msg any) int {
	flag := func(set bool) int {
		if set {
			return 2
		}
		return 0
	}
	switch m := msg.(type) {
	case *protocol.LeaseRequest:
		return 48 + len(m.Namespace) + len(m.Owner) + len(m.Addr) + 26*len(m.Held) + flag(m.HeldAsAcked)
	case *protocol.LeaseResponse:
		return 40 + len(m.Namespace) + len(m.Owner) + 27*len(m.Leases) + flag(m.RenewHeld)
	case *protocol.SyncRequest:
		return 28 + len(m.Namespace)
	case raftpb.Message:
		return m.Size()
	case refusal:
		return 16
	case *protocol.SyncResponse:
		n := 32 + len(m.Namespace)
		for _, ch := range m.Update.Changes {
			n += 36 + len(ch.Entry.Owner) + len(ch.Entry.Addr)
		}
		for _, seg := range m.Update.Segments {
			n += 28 + len(seg.Entry.Owner) + len(seg.Entry.Addr)
		}
		return n
	}
	return 0
}
