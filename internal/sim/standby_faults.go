package sim

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// The standby design's own faults (Config.StandbyFaults), drawn at the
// moments that matter rather than left to chance among the run's random
// ones:
//
//   - a cut of the link between a holder and its standby — both ways, or
//     one way (the holder's writes and fills lost, or the standby's
//     answers) — started as a pairing's first fill is sent, as a standby answers a
//     write (before the answer is sent, so that it is lost, or just
//     after), or as a promoted grant is sent (between the promoted Owner
//     and the old holder, whose resends then go nowhere or come in without
//     their answers). Holder and standby still reach the Manager: the
//     design's documented limit (docs/protocol.md, "Promotion": the cut
//     costs availability, not safety);
//   - a stall of a holder that has a standby in sync and a write in
//     flight, long enough for its reservation to run out and the standby
//     to be promoted while it is stalled: it resumes, handles what waited
//     with its clock jumped, and resends what was in flight;
//   - a Manager deposed between a promotion and its delivery: the replica
//     that sends a promoted grant for the first time (the single Manager,
//     or the leader) is crashed at once and restarts from its log, its
//     messages of that round to the standby dropped, delivered, or
//     delivered late (after the next leader's first answers). The
//     promotion is in the replicated state, so the next leader lists the
//     lease to the standby as a promoted grant until it is acknowledged;
//     the checker "promotion kept" holds it to that (standby_deposed.go).
//
// Each is counted (StandbyFaultStats), with what the run's random faults
// already did of the same kind: holder–standby messages lost to a random
// partition, promotions taken up while the old holder was stalled, old
// holders resuming after their range was promoted. With a zero
// StandbyFaults none is drawn and the seed's random source is not read,
// so the runs named elsewhere (the broken twins' seeds) stay as they were.

// StandbyFaults configures the targeted standby faults (Config.Standbys
// only); the zero value draws none.
type StandbyFaults struct {
	// FillCutOneIn cuts the holder–standby link at one pairing's first
	// fill in FillCutOneIn, AckCutOneIn at one standby answer in
	// AckCutOneIn, PromotionCutOneIn at one promoted grant's first send in
	// PromotionCutOneIn (0: never).
	FillCutOneIn, AckCutOneIn, PromotionCutOneIn int
	// StallHolderEvery stalls, on average this often, a holder with a
	// standby in sync and a write in flight, past its reservation.
	StallHolderEvery time.Duration
	// DeposeOneIn crashes the Manager replica that sends a promoted grant
	// for the first time, at one such grant in DeposeOneIn.
	DeposeOneIn int
}

// StandbyFaultStats counts the standby faults of a run.
type StandbyFaultStats struct {
	// Targeted cuts, by the moment they started at and by direction.
	FillCuts, AckCuts, AckLostCuts, PromotionCuts int
	BothWays, HolderToStandby, StandbyToHolder    int
	// Holder–standby messages (writes, answers, fills) lost to a targeted
	// cut, and to a random partition.
	PairMsgsCut, PairMsgsPartitioned int
	// HolderStalls counts the targeted stalls; PromotedWhileStalled the
	// promoted grants taken up while the old holder was stalled (any
	// stall); ResumedAfterPromotion the old holders that resumed after
	// their range was promoted.
	HolderStalls, PromotedWhileStalled, ResumedAfterPromotion int
	// Deposals counts the Managers crashed as they sent a promoted grant
	// (DeposedDropped, DeposedLate of them with the message dropped or
	// delivered late); of those grants, DeposedTakenUp were taken up by
	// their Owner, DeposedFreed left the table while its run lived without
	// it, DeposedOwnerGone were not taken up before the run ended.
	// DeposedRegranted counts those its run heard listed as a grant by a
	// later Manager run (a new leader, or the crashed replica restarted
	// from its log), DeposedRegrantedTakenUp those of them taken up from
	// such a message (standby_deposed.go).
	Deposals, DeposedDropped, DeposedLate, DeposedTakenUp, DeposedFreed, DeposedOwnerGone int
	DeposedRegranted, DeposedRegrantedTakenUp                                             int
	// StandbyHandoverWrites counts the keys a migrated grant took up with
	// a write in the state handed over (Config.Migration with standbys).
	StandbyHandoverWrites int
}

func (a *StandbyFaultStats) add(b StandbyFaultStats) {
	a.FillCuts += b.FillCuts
	a.AckCuts += b.AckCuts
	a.AckLostCuts += b.AckLostCuts
	a.PromotionCuts += b.PromotionCuts
	a.BothWays += b.BothWays
	a.HolderToStandby += b.HolderToStandby
	a.StandbyToHolder += b.StandbyToHolder
	a.PairMsgsCut += b.PairMsgsCut
	a.PairMsgsPartitioned += b.PairMsgsPartitioned
	a.HolderStalls += b.HolderStalls
	a.PromotedWhileStalled += b.PromotedWhileStalled
	a.ResumedAfterPromotion += b.ResumedAfterPromotion
	a.Deposals += b.Deposals
	a.DeposedDropped += b.DeposedDropped
	a.DeposedLate += b.DeposedLate
	a.DeposedTakenUp += b.DeposedTakenUp
	a.DeposedFreed += b.DeposedFreed
	a.DeposedOwnerGone += b.DeposedOwnerGone
	a.DeposedRegranted += b.DeposedRegranted
	a.DeposedRegrantedTakenUp += b.DeposedRegrantedTakenUp
	a.StandbyHandoverWrites += b.StandbyHandoverWrites
}

// sbFaultState is a run's state of the standby faults.
type sbFaultState struct {
	cuts     map[[2]int]time.Duration // (from, to) node positions → end of the cut
	fillSeen map[protocol.SGN]bool    // pairings whose fill was sent
	// stallArmed: the next holder to send a write under a pairing in
	// sync is stalled (StallHolderEvery).
	stallArmed bool
	promoSen   map[keyspace.LGN]bool    // promoted grants' LGNs seen sent
	holderOf   map[owner.LeaseNum]*node // the Owner run that took each lease up
	holderIn   map[owner.LeaseNum]uint64
	resumeOf   map[*node]uint64 // old holders stalled when promoted → their run
	deposed    []deposedGrant
	fate       sbFate              // the last deposed promoted grant's message's fate
	heard      map[*node][2]uint64 // Owner run → its incarnation and the highest Seq it heard (standby_deposed.go)
}

// deposedGrant is a promoted grant whose Manager was crashed as it sent it.
type deposedGrant struct {
	to  *node
	inc uint64
	num owner.LeaseNum
	r   keyspace.Range
	// The crashed replica's run, and whether the Owner run has heard the
	// lease listed as a grant since (standby_deposed.go).
	mgr                  *node
	mgrInc               uint64
	seenGrant, regranted bool
}

// sbLinkCut reports whether a message from one Owner to another is lost to
// a targeted cut.
func (s *Sim) sbLinkCut(from, to *node) bool {
	if s.sbf.cuts == nil || from.kind != ownerNode || to.kind != ownerNode {
		return false
	}
	end, ok := s.sbf.cuts[[2]int{from.pos, to.pos}]
	if ok && s.now >= end {
		delete(s.sbf.cuts, [2]int{from.pos, to.pos})
		return false
	}
	return ok
}

// sbCutPair cuts holder h and standby sb apart, both ways, holder to
// standby and standby to holder in turn from the seed on (so that a sweep
// draws each), for a time drawn at random: up to an OwnerLease and a
// ManagerLease, past a lease's end.
func (s *Sim) sbCutPair(h, sb *node) {
	t := s.cfg.Timing
	end := s.now + s.uniform(t.Renew/4, t.OwnerLease+t.ManagerLease)
	if s.sbf.cuts == nil {
		s.sbf.cuts = map[[2]int]time.Duration{}
	}
	set := func(a, b *node) {
		k := [2]int{a.pos, b.pos}
		s.sbf.cuts[k] = max(s.sbf.cuts[k], end)
	}
	st := &s.stats.SBFaults
	switch (uint64(st.BothWays+st.HolderToStandby+st.StandbyToHolder) + s.cfg.Seed) % 3 {
	case 0:
		st.BothWays++
		set(h, sb)
		set(sb, h)
	case 1:
		st.HolderToStandby++
		set(h, sb)
	default:
		st.StandbyToHolder++
		set(sb, h)
	}
	s.trace(h, "cut from standby %s until %s", sb.name, end)
	s.trace(sb, "cut from holder %s until %s", h.name, end)
}

// sbOnSend draws the faults a message starts and counts holder–standby
// messages lost to cuts; it reports whether msg is to be dropped (it was
// taken over: a deposed Manager's message, dropped or delivered late).
func (s *Sim) sbOnSend(from, to *node, msg any) bool {
	if !s.cfg.Standbys {
		return false
	}
	f := s.cfg.StandbyFaults
	if m, ok := msg.(*protocol.LeaseResponse); ok {
		if from.kind == managerNode && s.faulting {
			if s.sbFateShared(from, to, m) {
				return true
			}
			return s.sbPromotionSent(from, to, m)
		}
		return false
	}
	_, fill := msg.(fillMsg)
	_, ack := msg.(replAck)
	_, write := msg.(replMsg)
	if !fill && !ack && !write {
		return false
	}
	switch {
	case !s.faulting:
	case fill && f.FillCutOneIn > 0 && !s.sbf.fillSeen[msg.(fillMsg).p.SGN]:
		if s.sbf.fillSeen == nil {
			s.sbf.fillSeen = map[protocol.SGN]bool{}
		}
		s.sbf.fillSeen[msg.(fillMsg).p.SGN] = true
		if s.rng.IntN(f.FillCutOneIn) == 0 {
			s.stats.SBFaults.FillCuts++
			s.sbCutPair(from, to)
		}
	case ack && f.AckCutOneIn > 0 && s.rng.IntN(f.AckCutOneIn) == 0:
		if st := &s.stats.SBFaults; (uint64(st.AckLostCuts+st.AckCuts)+s.cfg.Seed)%2 == 0 { // in turn
			s.stats.SBFaults.AckLostCuts++
			s.sbCutPair(to, from) // before the answer: lost if the standby's side is cut
		} else {
			s.stats.SBFaults.AckCuts++
			s.at(s.now, func() { s.sbCutPair(to, from) }) // just after it
		}
	}
	if write && s.sbf.stallArmed && s.faulting {
		s.sbStallWriter(from, msg.(replMsg))
	}
	switch {
	case from.part != to.part:
		s.stats.SBFaults.PairMsgsPartitioned++
	case s.sbLinkCut(from, to):
		s.stats.SBFaults.PairMsgsCut++
	}
	return false
}

// sbPromotionSent draws the faults of a promoted grant's first send from
// Manager replica mgr to Owner run o: a cut between o and the old holder,
// and the replica's crash. It reports whether the message is taken over.
func (s *Sim) sbPromotionSent(mgr, o *node, m *protocol.LeaseResponse) bool {
	f := s.cfg.StandbyFaults
	var first []protocol.Lease
	for _, l := range m.Leases {
		if l.Grant && l.Promoted && !s.sbf.promoSen[l.LGN] {
			if s.sbf.promoSen == nil {
				s.sbf.promoSen = map[keyspace.LGN]bool{}
			}
			s.sbf.promoSen[l.LGN] = true
			first = append(first, l)
		}
	}
	if len(first) == 0 {
		return false
	}
	if f.PromotionCutOneIn > 0 && s.rng.IntN(f.PromotionCutOneIn) == 0 {
		if h := s.sbOldHolder(o, first[0].Range); h != nil {
			s.stats.SBFaults.PromotionCuts++
			s.sbCutPair(h, o)
		}
	}
	if f.DeposeOneIn == 0 || !mgr.up || !o.up || o.stalled || s.rng.IntN(f.DeposeOneIn) != 0 {
		return false
	}
	st := &s.stats.SBFaults
	st.Deposals++
	for _, l := range first {
		s.sbf.deposed = append(s.sbf.deposed, deposedGrant{to: o, inc: o.inc, num: owner.LeaseNum{Epoch: m.Epoch, LGN: l.LGN}, r: l.Range,
			mgr: mgr, mgrInc: mgr.inc})
	}
	s.trace(o, "its promoted grants %v are sent by %s, crashed as it sends them", first, mgr.name)
	t := s.cfg.Timing
	s.at(s.now, func() {
		s.crash(mgr)
		s.at(s.now+s.uniform(0, t.ManagerLease), func() { s.restart(mgr) })
	})
	switch (uint64(st.Deposals) + s.cfg.Seed) % 3 { // in turn, from the seed on
	case 1:
		st.DeposedDropped++
		s.sbf.fate = sbFate{mgr: mgr, inc: mgr.inc, to: o, at: s.now, mode: 1}
		return s.sbFateShared(mgr, o, m)
	case 2:
		st.DeposedLate++
		s.sbf.fate = sbFate{mgr: mgr, inc: mgr.inc, to: o, at: s.now, mode: 2}
		return s.sbFateShared(mgr, o, m)
	}
	return false
}

// sbFate is what befell the message of a deposed Manager replica's
// promoted grant: dropped (mode 1) or delivered late (2).
type sbFate struct {
	mgr, to *node
	inc     uint64
	at      time.Duration
	mode    int
}

// sbFateShared gives message m from replica mgr to Owner run o the fate of
// the deposed promoted grant's message if it is of the same replica run
// to the same Owner at the same instant (the same round: a pairing made
// after the grant sends a second message listing it), and reports whether
// it did: the Owner hears nothing of that run after the promotion, or
// hears it late, not from its next message.
func (s *Sim) sbFateShared(mgr, o *node, m *protocol.LeaseResponse) bool {
	f := s.sbf.fate
	if f.mode == 0 || f.mgr != mgr || f.inc != mgr.inc || f.to != o || f.at != s.now {
		return false
	}
	s.stats.Messages++
	if f.mode == 1 {
		s.stats.Dropped++
		return true
	}
	// Read from the old stream after the next leader's first answers.
	t := s.cfg.Timing
	s.push(&event{at: s.now + t.ManagerLease + s.uniform(0, t.Renew), kind: evDeliver, from: mgr.pos, to: o.pos, msg: m, gen: mgr.inc, toInc: o.inc})
	return true
}

// sbOldHolder is the holder of the lease Owner run o is standby for on r,
// by o's pairings.
func (s *Sim) sbOldHolder(o *node, r keyspace.Range) *node {
	for _, p := range o.own.StandbyFor() {
		if p.Range.Overlaps(r) {
			if h := s.byOwner[p.Peer]; h != nil && h.up {
				return h
			}
		}
	}
	return nil
}

// sbStallHolder arms the stall of the next holder that sends a write to
// a standby in sync (Config.StandbyFaults.StallHolderEvery).
func (s *Sim) sbStallHolder() { s.sbf.stallArmed = true }

// sbStallWriter stalls holder h, which is sending write m, past its
// reservation if m's pairing is in sync: its range is promoted while it
// is stalled, and it resumes with the write in flight, resending it.
func (s *Sim) sbStallWriter(h *node, m replMsg) {
	p, ok := h.own.StandbyOf(h.local(s.now), m.key)
	if !ok || !p.InSync || h.stalled || h.ghost {
		return
	}
	if sb := s.byOwner[p.Peer]; sb == nil || !sb.up || sb.stalled || sb.draining || sb.inc != p.Incarnation {
		return
	}
	s.sbf.stallArmed = false
	t := s.cfg.Timing
	s.stats.SBFaults.HolderStalls++
	d := 2*t.ManagerLease + t.Renew + s.uniform(0, t.OwnerLease)
	s.at(s.now, func() { s.stall(h, d) })
}

// sbResuming reports whether n is an old holder stalled past its
// reservation whose range was promoted meanwhile, still to resume: the
// random crashes spare it, so that it does resume with its writes in
// flight, the fault its stall was for (a crash would end the run that
// holds them).
func (s *Sim) sbResuming(n *node) bool {
	inc, ok := s.sbf.resumeOf[n]
	return ok && inc == n.inc && n.stalled
}

// sbFaultStep follows an Owner run's step for the counts: an old holder
// resuming after its range was promoted, and the deposed Managers' grants
// left untaken.
func (s *Sim) sbFaultStep(n *node) {
	if !n.up || n.stalled {
		return
	}
	if inc, ok := s.sbf.resumeOf[n]; ok {
		delete(s.sbf.resumeOf, n)
		if inc == n.inc {
			s.stats.SBFaults.ResumedAfterPromotion++
			s.trace(n, "resumed after its range was promoted")
		}
	}
	if len(s.sbf.deposed) == 0 {
		return
	}
	st := &s.stats.SBFaults
	keep := s.sbf.deposed[:0]
	for _, d := range s.sbf.deposed {
		switch {
		case d.to != n:
			keep = append(keep, d)
		case d.inc != n.inc:
			st.DeposedOwnerGone++
		case s.sbInTable(d) == 0:
			st.DeposedFreed++
			s.trace(n, "deposed promoted grant %v on %v left the table untaken", d.num, d.r)
		default:
			keep = append(keep, d)
		}
	}
	s.sbf.deposed = keep
}

// sbGranted follows the grants Owner run n takes up, for the counts: who
// holds each lease, a promoted grant taken up while the old holder is
// stalled, and the deposed Managers' grants taken up.
func (s *Sim) sbGranted(n *node, ch owner.OwnershipChange) {
	st := &s.stats.SBFaults
	for _, g := range ch.Granted {
		if s.sbf.holderOf == nil {
			s.sbf.holderOf, s.sbf.holderIn = map[owner.LeaseNum]*node{}, map[owner.LeaseNum]uint64{}
		}
		s.sbf.holderOf[g.Num], s.sbf.holderIn[g.Num] = n, n.inc
		if i := slices.IndexFunc(s.sbf.deposed, func(d deposedGrant) bool { return d.to == n && d.inc == n.inc && d.num == g.Num }); i >= 0 {
			st.DeposedTakenUp++
			if s.sbf.deposed[i].regranted {
				st.DeposedRegrantedTakenUp++
			}
			s.sbf.deposed = slices.Delete(s.sbf.deposed, i, i+1)
		}
		if !g.Promoted {
			continue
		}
		from, ok := s.chk.migratedFrom[leaseID{g.Num.Epoch, g.Num.LGN}]
		if !ok {
			continue
		}
		old := owner.LeaseNum{Epoch: g.Num.Epoch, LGN: from}
		if h := s.sbf.holderOf[old]; h != nil && h.up && h.stalled && s.sbf.holderIn[old] == h.inc {
			st.PromotedWhileStalled++
			if s.sbf.resumeOf == nil {
				s.sbf.resumeOf = map[*node]uint64{}
			}
			s.sbf.resumeOf[h] = h.inc
			s.trace(h, "its lease %v promoted to %s while stalled", old, n.name)
		}
	}
}

// sbInTable reports whether the furthest replica's table still has d's
// lease on part of its range (1), no longer has it (0), or is not known
// now (-1: no replica is up).
func (s *Sim) sbInTable(d deposedGrant) int {
	st := s.furthest()
	switch {
	case st == nil:
		return -1
	case st.Epoch() != d.num.Epoch:
		return 0
	}
	for _, seg := range st.Table(namespace).Overlapping(d.r) {
		if seg.Entry.LGN == d.num.LGN {
			return 1
		}
	}
	return 0
}
