package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// Standby Owners (Config.Standbys; docs/design.md rules 21-24): the
// application each Owner runs, and the checker that no acknowledged write
// is lost without a loss notification covering it.
//
// The application is a register per key over sbKeys keys, each write a
// fresh number (sbVal). A holder takes a write on a key it holds when it
// has none in flight on that key (sbTries keys drawn at each step): it applies it to its own copy, sends it
// to the lease's standby tagged with the holder, lease and SGN (sbWrite),
// and acknowledges it only when the standby's answer comes back and
// CheckReplicated still holds; with no standby it acknowledges at once. It
// resends a write not answered every Renew/2, without looking at its lease
// — a holder resuming from a stall resends what was in flight, as a real
// transport would — and gives it up after two OwnerLeases or once the
// pairing changed. When it is paired with a standby not in sync it sends
// the standby its copy of the lease's keys (the fill), again every Renew
// until the pairing is in sync. A standby stores a write or a fill only if
// CheckStandbyWrite accepts it; it applies a write from the lease it last
// stored a key under only if newer, and one from another lease at once (a
// new holder's writes replace an old one's); a fill only where newer. A
// standby that stored a fill reports the pairing in sync. A fresh grant
// (neither promoted nor migrated) starts its keys empty; a promoted grant
// serves from the copy kept as standby.
//
// The checker keeps, per key, the last write acknowledged since the last
// loss of the key the Manager recorded (a loss every Lookup is told of,
// which the recovery-notification checker holds to its bound). Before an
// Owner applies a write, and when it takes up a promoted grant, its copy
// of the key must hold that write or a later one: otherwise an
// acknowledged write is gone and no notification covers it.

// sbKeys is how many keys the application writes, spread evenly over the
// key space.
const sbKeys = 32

// sbTries is how many keys, drawn at random, an Owner run tries to write
// at each step: it writes those it holds with no write in flight.
const sbTries = 2

func sbKey(i int) keyspace.Key { return keyspace.Key(uint64(i)<<59 | 0x5eed) }

// sbVal is a key's value in one Owner run's copy: the write's number and
// the lease it was written under.
type sbVal struct {
	id    uint64
	lease owner.LeaseNum
}

// sbApp is an Owner run's standby application.
type sbApp struct {
	store map[keyspace.Key]sbVal
	out   map[keyspace.Key]*sbWrite // writes in flight to the standby
	fills map[owner.Pairing]time.Duration
}

// sbWrite is a write in flight to the standby.
type sbWrite struct {
	id       uint64
	p        owner.Pairing
	first    time.Duration
	lastSent time.Duration
}

// replMsg is a write sent by holder run fromInc to its standby.
type replMsg struct {
	key     keyspace.Key
	val     sbVal
	holder  string
	sgn     protocol.SGN
	fromInc uint64
}

// replAck is the standby's answer: it stored the write.
type replAck struct {
	key   keyspace.Key
	id    uint64
	toInc uint64
}

// fillMsg is the holder's copy of a lease's keys, for a new standby, and
// the pieces of the lease it covers: those the holder held when it copied
// them (docs/design.md rule 23).
type fillMsg struct {
	p      owner.Pairing
	holder string
	data   map[keyspace.Key]sbVal
	pieces []keyspace.Range
}

func (a *app) standby() *sbApp {
	if a.sb == nil {
		a.sb = &sbApp{store: map[keyspace.Key]sbVal{}, out: map[keyspace.Key]*sbWrite{}, fills: map[owner.Pairing]time.Duration{}}
	}
	return a.sb
}

// sbChanged handles an Owner run's upcalls for standbys: fresh grants
// start empty, promoted ones are checked, new pairings are filled.
func (s *Sim) sbChanged(n *node, ch owner.OwnershipChange) {
	a := n.app.standby()
	for _, g := range ch.Granted {
		for i := range sbKeys {
			k := sbKey(i)
			if !g.Range.Contains(k) {
				continue
			}
			switch {
			case g.Promoted:
				s.trace(n, "promoted %v: key %#x holds %d", g, uint64(k), a.store[k].id)
				// A grant taken up already expired (a stalled run handling
				// an old message) serves nothing: CheckLeaseNow refuses it.
				if num, ok := n.own.CheckLeaseNow(n.local(s.now), k); ok && num == g.Num {
					s.stats.Promotions++
					s.chk.sbServes(n, k, "took up a promoted grant")
				}
			case !g.Migrated:
				delete(a.store, k)
			}
		}
	}
	for _, p := range ch.Paired {
		if p.Peer != "" && !p.InSync {
			a.fills[p] = -1 // send at the next step
			if s.cfg.FillOnPaired {
				s.sbFillOnPaired(n, a, p) // standby_fill.go
			}
		}
	}
}

// sbStep is the application's work at each step of Owner run n: resend
// or give up writes in flight, send fills, take new writes.
func (s *Sim) sbStep(n *node) {
	if !n.up || n.stalled {
		return
	}
	a, now, t := n.app.standby(), n.local(s.now), s.cfg.Timing
	for i := range sbKeys { // in key order, not the map's: the run is a function of its seed
		k := sbKey(i)
		w := a.out[k]
		if w == nil {
			continue
		}
		cur, ok := n.own.StandbyOf(now, k)
		switch {
		case s.now-w.first > 2*t.OwnerLease || (ok && (cur.SGN != w.p.SGN || cur.Lease != w.p.Lease)):
			delete(a.out, k)
		case s.now-w.lastSent >= t.Renew/2:
			w.lastSent = s.now
			s.sbSend(n, k, w)
		}
	}
	fills := slices.SortedFunc(maps.Keys(a.fills), func(x, y owner.Pairing) int {
		return cmp.Or(cmp.Compare(x.Lease.LGN, y.Lease.LGN), cmp.Compare(x.SGN, y.SGN), cmp.Compare(x.Peer, y.Peer))
	})
	for _, p := range fills {
		sent := a.fills[p]
		cur, ok := n.own.StandbyOf(now, p.Range.Start)
		if !ok || cur.Lease != p.Lease || cur.SGN != p.SGN {
			// The range's first key may be elsewhere: look at the lease's keys.
			cur, ok = s.sbPairingOf(n, now, p.Lease)
		}
		if !ok || cur.SGN != p.SGN || cur.Peer != p.Peer || cur.InSync {
			delete(a.fills, p)
			continue
		}
		if sent >= 0 && s.now-sent < t.Renew {
			continue
		}
		a.fills[p] = s.now
		data := map[keyspace.Key]sbVal{}
		for i := range sbKeys {
			k := sbKey(i)
			if num, held := n.own.CheckLeaseNow(now, k); held && num == p.Lease {
				if v, ok := a.store[k]; ok {
					data[k] = v
				}
			}
		}
		if to := s.byOwner[p.Peer]; to != nil {
			s.send(n, to, fillMsg{p: p, holder: n.name, data: data, pieces: sbPieces(n, now, p.Lease)})
		}
	}
	for range sbTries {
		k := sbKey(s.rng.IntN(sbKeys))
		if a.out[k] != nil {
			continue
		}
		p, held := n.own.StandbyOf(now, k)
		if !held || s.sbFrozen(n, now, k, p.Lease) {
			continue
		}
		s.sbWrite(n, k, p)
	}
}

// sbPieces returns the pieces of lease num that Owner run n holds at now:
// those a fill copied the keys of, which it names (rule 23).
func sbPieces(n *node, now time.Time, num owner.LeaseNum) []keyspace.Range {
	var pieces []keyspace.Range
	for _, l := range n.own.Held(now) {
		if l.Num == num {
			pieces = append(pieces, l.Range)
		}
	}
	return pieces
}

// sbPairingOf returns the pairing of lease num, through any key of it.
func (s *Sim) sbPairingOf(n *node, now time.Time, num owner.LeaseNum) (owner.Pairing, bool) {
	for i := range sbKeys {
		if p, ok := n.own.StandbyOf(now, sbKey(i)); ok && p.Lease == num {
			return p, true
		}
	}
	return owner.Pairing{}, false
}

// sbWrite takes a write on key k, held through pairing p.
func (s *Sim) sbWrite(n *node, k keyspace.Key, p owner.Pairing) {
	a := n.app.standby()
	s.chk.sbServes(n, k, "took a write")
	s.sbNext++
	v := sbVal{id: s.sbNext, lease: p.Lease}
	a.store[k] = v
	s.stats.StandbyWrites++
	now := n.local(s.now)
	if p.Peer == "" {
		if n.own.CheckReplicated(now, k, p) {
			s.chk.sbAcked(n, k, v.id)
		}
		return
	}
	s.trace(n, "write %d on %#x under %v via %+v", v.id, uint64(k), p.Lease, p)
	w := &sbWrite{id: v.id, p: p, first: s.now, lastSent: s.now}
	a.out[k] = w
	s.sbSend(n, k, w)
	if s.broken().AckBeforeStandby {
		s.chk.sbAcked(n, k, v.id)
	}
}

func (s *Sim) sbSend(n *node, k keyspace.Key, w *sbWrite) {
	if to := s.byOwner[w.p.Peer]; to != nil {
		s.send(n, to, replMsg{key: k, val: sbVal{id: w.id, lease: w.p.Lease}, holder: n.name, sgn: w.p.SGN, fromInc: n.inc})
	}
}

// sbDeliver handles a standby message from another Owner run; it reports
// whether msg was one.
func (s *Sim) sbDeliver(n, from *node, msg any) bool {
	now := n.local(s.now)
	a := n.app.standby()
	switch m := msg.(type) {
	case replMsg:
		if err := n.own.CheckStandbyWrite(now, m.key, m.holder, m.val.lease, m.sgn); err != nil {
			s.trace(n, "refused: %v", err)
			s.stats.StandbyRefused++
			return true
		}
		s.sbTrace(n, m.key, m.val)
		if cur, ok := a.store[m.key]; !ok || cur.lease != m.val.lease || cur.id < m.val.id {
			a.store[m.key] = m.val
		}
		s.send(n, from, replAck{key: m.key, id: m.val.id, toInc: m.fromInc})
	case replAck:
		if m.toInc != n.inc {
			return true
		}
		w := a.out[m.key]
		if w == nil || w.id != m.id {
			return true
		}
		delete(a.out, m.key)
		s.trace(n, "replAck %d on %#x from %s: replicated %v", w.id, uint64(m.key), from.name, n.own.CheckReplicated(now, m.key, w.p))
		if !s.broken().AckBeforeStandby && n.own.CheckReplicated(now, m.key, w.p) {
			s.chk.sbAcked(n, m.key, w.id)
		}
	case fillMsg:
		// Every key of the fill must be the standby's to store under the
		// pairing (the range's first key, for an empty fill).
		keys := slices.Sorted(maps.Keys(m.data))
		if len(keys) == 0 {
			keys = []keyspace.Key{m.p.Range.Start}
		}
		for _, k := range keys {
			if err := n.own.CheckStandbyWrite(now, k, m.holder, m.p.Lease, m.p.SGN); err != nil {
				s.stats.StandbyRefused++
				return true
			}
		}
		for k, v := range m.data {
			if cur, ok := a.store[k]; !ok || cur.id < v.id {
				a.store[k] = v
			}
		}
		s.stats.Fills++
		s.trace(n, "fill from %s %+v: %v", m.holder, m.p, m.data)
		n.own.InSync(now, m.p.Lease, m.p.SGN, m.pieces)
	default:
		return false
	}
	return true
}

// sbTrace traces a write a standby stores.
func (s *Sim) sbTrace(n *node, k keyspace.Key, v sbVal) {
	if traceNode == n.name {
		s.trace(n, "standby stores key %#x write %d under %v", uint64(k), v.id, v.lease)
	}
}

// sbCrashPair crashes a holder and its standby together, and restarts
// both (Config.StandbyPairCrashEvery).
func (s *Sim) sbCrashPair() {
	h := s.pickUp(s.owners)
	if h == nil {
		return
	}
	now := h.local(s.now)
	for i := range sbKeys {
		p, ok := h.own.StandbyOf(now, sbKey(i))
		if !ok || p.Peer == "" {
			continue
		}
		sb := s.byOwner[p.Peer]
		if sb == nil || !sb.up {
			continue
		}
		if s.sbResuming(h) || s.sbResuming(sb) {
			return
		}
		s.stats.PairCrashes++
		for _, n := range []*node{h, sb} {
			s.crash(n)
			s.at(s.now+s.uniform(0, 3*s.cfg.Timing.ManagerLease), func() { s.restart(n) })
		}
		return
	}
}

// sbCrashZone crashes every Owner of one zone at once, and restarts
// them (Config.StandbyZoneCrashEvery): the Manager notices each death
// apart, as their last requests were, and acts on the first before the
// second.
func (s *Sim) sbCrashZone() {
	n := s.pickUp(s.owners)
	if n == nil {
		return
	}
	zone := s.sbZone(n)
	s.stats.ZoneCrashes++
	for _, o := range s.owners {
		if o.up && s.sbZone(o) == zone && !s.sbResuming(o) {
			s.crash(o)
			s.at(s.now+s.cfg.Timing.ManagerLease+s.uniform(0, 2*s.cfg.Timing.ManagerLease), func() { s.restart(o) })
		}
	}
}

// The checker's part.

// sbAck is the last write acknowledged on a key since its last recorded
// loss.
type sbAck struct {
	id uint64
	at time.Duration
	by string
}

// sbAcked records that Owner run n acknowledged write id on k.
func (c *checker) sbAcked(n *node, k keyspace.Key, id uint64) {
	if c.off {
		return
	}
	c.s.stats.StandbyAcks++
	if c.sbLast == nil {
		c.sbLast = map[keyspace.Key]sbAck{}
	}
	if c.sbLast[k].id < id {
		c.sbLast[k] = sbAck{id: id, at: c.s.now, by: n.name}
	}
}

// sbServes checks that Owner run n, about to serve k, holds the last
// write acknowledged on it since its last recorded loss.
func (c *checker) sbServes(n *node, k keyspace.Key, doing string) {
	if c.off || c.sbLast == nil {
		return
	}
	last, ok := c.sbLast[k]
	if !ok {
		return
	}
	if have := n.app.standby().store[k]; have.id < last.id {
		c.fail("acknowledged writes", "%s (incarnation %d) %s on key %#x holding write %d, but %s acknowledged write %d on it at %v and no loss of the key was recorded since: "+
			"an acknowledged write is lost without a notification", n.name, n.inc, doing, uint64(k), have.id, last.by, last.id, last.at)
	}
}

// sbLost forgets the acknowledged writes on the keys of r: their loss is
// recorded, and every Lookup is told.
func (c *checker) sbLost(r keyspace.Range) {
	for k := range c.sbLast {
		if r.Contains(k) {
			delete(c.sbLast, k)
		}
	}
}

func (s *Sim) sbZone(n *node) string {
	return fmt.Sprintf("zone-%d", n.idx%max(s.cfg.Zones, 1))
}

// standbySetting is the Manager's Standbys setting for Config.Standbys.
func (s *Sim) standbySetting() map[string]int {
	if !s.cfg.Standbys {
		return nil
	}
	return map[string]int{namespace: 1}
}
