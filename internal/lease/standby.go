// Standby Owners (docs/design.md rules 22 and 23): in a namespace with
// standbys, every lease is paired with a standby on another zone, under a
// fresh standby number (SGN) each time the pairing changes; a standby
// that is lost is dropped and replaced; a standby's report that its copy
// is filled is recorded. Promotion is in promote.go (rule 21).

package lease

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// standbyOK reports whether rec's standby is still the live run that was
// named: a member, not draining, of the incarnation recorded, not the
// holder. A pairing whose standby is not is dropped, and never promoted.
func (n *namespace) standbyOK(rec StandbyRecord) bool {
	o := n.owners[rec.Owner]
	return rec.Owner != "" && rec.Owner != rec.Holder && o != nil && o.inc == rec.Incarnation && o.member && !o.draining
}

// recordStandby records a pairing (rule 8: before any message names it),
// and has both Owners told.
func (c *Core) recordStandby(now time.Time, n *namespace, rec StandbyRecord) {
	c.apply(now, Change{Op: OpStandby, NS: n.name, Standby: &rec})
	for _, id := range []string{rec.Holder, rec.Owner} {
		if o := n.owners[id]; o != nil {
			n.push(o)
		}
	}
}

// nextSGN issues a fresh standby number.
func (n *namespace) nextSGN() protocol.SGN { return n.s.sgn + 1 }

// pairStandbys brings the pairings in line with the table and the Owners,
// when either changed since it last ran: it forgets the pairings of
// leases that ended, drops those whose standby is lost (a fresh SGN and no
// standby, so the holder learns it and no promotion can use it), and, in a
// namespace with standbys, names a standby for every lease of a live
// holder that has none (rule 22).
func (c *Core) pairStandbys(now time.Time, n *namespace) {
	on := c.cfg.standbys(n.name) > 0
	if !n.pair || (!on && len(n.s.standbys) == 0 && len(n.s.promoted) == 0) {
		n.pair = false
		return
	}
	n.pair = false
	type lease struct {
		holder string
		span   keyspace.Range
	}
	leases := map[keyspace.LGN]*lease{}
	var order []keyspace.LGN
	n.s.table.Each(func(s leasetable.Segment) bool {
		if s.Entry.Owner == "" {
			return true
		}
		if l := leases[s.Entry.LGN]; l != nil {
			l.span.End = s.Range.End
		} else {
			leases[s.Entry.LGN] = &lease{holder: s.Entry.Owner, span: s.Range}
			order = append(order, s.Entry.LGN)
		}
		return true
	})
	c.forgetPromoted(now, n, func(lgn keyspace.LGN) bool { return leases[lgn] != nil })
	load := map[string]int{} // pairings per standby
	var act []keyspace.LGN   // the pairings to forget or drop, in LGN order
	for lgn, rec := range n.s.standbys {
		switch {
		case leases[lgn] == nil || (rec.Owner != "" && !n.standbyOK(rec)):
			act = append(act, lgn)
		case rec.Owner != "":
			load[rec.Owner]++
		}
	}
	slices.Sort(act)
	for _, lgn := range act {
		rec := n.s.standbys[lgn]
		switch {
		case leases[rec.LGN] == nil:
			// The lease ended (released, expired, handed over, promoted):
			// its pairing goes, and the standby stops accepting its writes.
			c.recordStandby(now, n, StandbyRecord{LGN: rec.LGN})
			if o := n.owners[rec.Owner]; o != nil {
				n.push(o)
			}
			delete(n.namedAt, rec.LGN)
		case rec.Owner != "" && !n.standbyOK(rec):
			c.stats.StandbysLost++
			old := n.owners[rec.Owner]
			c.recordStandby(now, n, StandbyRecord{LGN: rec.LGN, Range: rec.Range, Holder: rec.Holder, SGN: n.nextSGN()})
			if old != nil {
				n.push(old)
			}
			delete(n.namedAt, rec.LGN)
		}
	}
	if !on {
		return
	}
	slices.Sort(order)
	for _, lgn := range order {
		l := leases[lgn]
		if rec, ok := n.s.standbys[lgn]; ok && rec.Owner != "" {
			continue
		}
		h := n.owners[l.holder]
		if h == nil || !h.member || lgn <= h.since {
			continue // a dead holder's or an earlier run's lease: it expires
		}
		s := c.pickStandby(n, h, load)
		if s == nil {
			continue // no other live Owner: asked again when one comes
		}
		load[s.id]++
		c.stats.StandbysNamed++
		c.recordStandby(now, n, StandbyRecord{LGN: lgn, Range: l.span, Holder: l.holder, SGN: n.nextSGN(),
			Owner: s.id, Addr: s.addr, Incarnation: s.inc, Zone: s.zone})
		if n.namedAt == nil {
			n.namedAt = map[keyspace.LGN]time.Time{}
		}
		n.namedAt[lgn] = now
	}
}

// pickStandby chooses the standby of a lease of h (rule 22): a live
// member that is not draining and is not h, first among those of another
// zone than h's, and among them the one with the fewest pairings, then
// the smallest ID. nil: there is none.
func (c *Core) pickStandby(n *namespace, h *ownerSession, load map[string]int) *ownerSession {
	var best *ownerSession
	better := func(a, b *ownerSession) bool { // a better than b
		if sa, sb := a.zone == h.zone, b.zone == h.zone; sa != sb {
			return !sa
		}
		if c := cmp.Compare(load[a.id], load[b.id]); c != 0 {
			return c < 0
		}
		return a.id < b.id
	}
	for _, o := range n.owners {
		if o == h || !o.member || o.draining {
			continue
		}
		if best == nil || better(o, best) {
			best = o
		}
	}
	return best
}

// learnInSync records a standby's reports that its copy is filled (rule
// 23): only for the pairing that names this run under the SGN reported,
// and only for the pieces each report names that the lease still has. A
// fill covers the pieces its holder held when it copied them, not the
// whole lease: a piece the holder had dropped (recalled, and listed again
// before its omission reached us) was not copied, and stays out of sync.
// A report for a pairing since dropped or renamed is ignored: the copy it
// speaks of is not the one the pairing needs.
func (c *Core) learnInSync(now time.Time, n *namespace, o *ownerSession, reports []protocol.StandbySync) {
	for _, r := range reports {
		rec, ok := n.s.standbys[r.LGN]
		if !ok || rec.SGN != r.SGN || rec.Owner != o.id || rec.Incarnation != o.inc || !n.standbyOK(rec) {
			continue
		}
		synced := keyspace.NewRangeSet(rec.Synced...)
		var add keyspace.RangeSet
		if c.broken.InSyncWholeLease {
			add = keyspace.NewRangeSet(rec.Range) // the whole lease, as the mark once was
		} else {
			add = n.leasePieces(rec).Intersect(keyspace.NewRangeSet(r.Range))
		}
		if add.Empty() || synced.Union(add).Equal(synced) {
			continue
		}
		first := !rec.InSync
		rec.InSync, rec.Synced = true, synced.Union(add).Ranges()
		c.recordStandby(now, n, rec)
		if !first {
			continue
		}
		c.stats.StandbysFilled++
		if at, ok := n.namedAt[r.LGN]; ok {
			c.stats.LastFill = now.Sub(at)
			c.stats.FillTime += c.stats.LastFill
			delete(n.namedAt, r.LGN)
		}
	}
}

// leasePieces returns the pieces the table gives rec's lease now.
func (n *namespace) leasePieces(rec StandbyRecord) keyspace.RangeSet {
	var ps []keyspace.Range
	for _, seg := range n.heldBy(rec.Holder) {
		if seg.Entry.LGN == rec.LGN {
			ps = append(ps, seg.Range)
		}
	}
	return keyspace.NewRangeSet(ps...)
}

// syncedCovers reports whether rec's standby is recorded in sync on the
// whole of p.
func (rec StandbyRecord) syncedCovers(p keyspace.Range) bool {
	return rec.InSync && keyspace.NewRangeSet(rec.Synced...).CoversRange(p)
}

// pairingInSync reports whether rec's standby is in sync on every piece
// the lease has now (pieces: the holder's, by LGN): what the holder is
// told (its standby would be promoted whole if it were lost now).
func pairingInSync(rec StandbyRecord, pieces map[keyspace.LGN][]keyspace.Range) bool {
	ps := pieces[rec.LGN]
	if !rec.InSync || len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if !rec.syncedCovers(p) {
			return false
		}
	}
	return true
}

// standbyLists returns what a message to o says of standbys: for each
// lease it lists, its pairing (rule 24: the holder keeps the one of the
// largest SGN); and every pairing that names o's run as the standby.
func (c *Core) standbyLists(n *namespace, o *ownerSession, leases []protocol.Lease) (standbys, standbyFor []protocol.Standby) {
	if len(n.s.standbys) == 0 {
		return nil, nil
	}
	var pieces map[keyspace.LGN][]keyspace.Range // o's, for the pairings' in-sync marks: read once
	for i, l := range leases {
		if i > 0 && leases[i-1].LGN == l.LGN {
			continue
		}
		if rec, ok := n.s.standbys[l.LGN]; ok && rec.Holder == o.id && !slices.ContainsFunc(standbys, func(s protocol.Standby) bool { return s.LGN == l.LGN }) {
			if pieces == nil && rec.InSync {
				pieces = map[keyspace.LGN][]keyspace.Range{}
				for _, seg := range n.heldBy(o.id) {
					pieces[seg.Entry.LGN] = append(pieces[seg.Entry.LGN], seg.Range)
				}
			}
			standbys = append(standbys, protocol.Standby{Range: rec.Range, LGN: rec.LGN, SGN: rec.SGN, Owner: rec.Owner,
				Addr: rec.Addr, Incarnation: rec.Incarnation, InSync: pairingInSync(rec, pieces)})
		}
	}
	for _, rec := range n.s.standbys { // the map, not the sorted list: this is every message
		if rec.Owner != o.id || rec.Incarnation != o.inc {
			continue
		}
		s := protocol.Standby{LGN: rec.LGN, SGN: rec.SGN, Owner: rec.Holder}
		if h := n.owners[rec.Holder]; h != nil {
			s.Addr, s.Incarnation = h.addr, h.inc
		}
		// One entry per piece the lease still has: a piece recalled
		// from it is no longer the holder's to write (rule 24). Each says
		// whether that piece is recorded in sync (rule 23).
		for _, seg := range n.heldBy(rec.Holder) {
			if seg.Entry.LGN == rec.LGN {
				s.Range, s.InSync = seg.Range, rec.syncedCovers(seg.Range)
				standbyFor = append(standbyFor, s)
			}
		}
	}
	slices.SortFunc(standbyFor, func(a, b protocol.Standby) int { return keyspace.Compare(a.Range, b.Range) })
	return standbys, standbyFor
}

// Standbys returns a namespace's pairings of holder and standby, for
// status.
func (c *Core) Standbys(ns string) []protocol.StandbyInfo { return c.st.Standbys(ns) }
