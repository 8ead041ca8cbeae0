package replica

import (
	"maps"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/wire"
)

// Quorum read leases (Moraru, Andersen, Kaminsky, SoCC 2014), adapted to
// Raft; docs/protocol.md, "Quorum read leases", gives the argument.
//
//   - A holder asks every voter for a promise, and starts its lease timer
//     when it asks (like an Owner's, C§2.3.1). Each ask names the newest
//     round whose promise from the leader came back (its acknowledgement).
//     A voter promises in its current Raft term; the leader (Raft's
//     current leader, taken over) also sends its commit index, its visible
//     bound and its voters. The holder's lease lasts Duration from the ask
//     its acknowledgement names, once promises of one term from a majority
//     of the voters, the term's leader among them, have come back, and
//     only if its voters are the leader's.
//   - The leader counts a holder as possibly serving for Duration ×
//     (1 + MaxDrift) after the promise the holder acknowledged, never
//     after one it has not heard arrived: a holder it cannot reach stops
//     counting one lease after the last promise that reached it. It counts
//     every holder for as long after it took over (promises made in
//     earlier terms) and after the voters change, and a holder that left
//     the configuration until its last promise ended (readlease_count.go).
//     The visible bound is the highest committed index every
//     possibly-serving holder has appended; the leader sends it to the
//     holders, and holds the answers of every round whose entry, or whose
//     ReadIndex proof, lies beyond it.
//   - A holder serves a read from its copy only while its lease lasts,
//     with nothing pending (its log holds no entry it has not applied),
//     with everything it shows visible (applied ≤ the bound it heard) and
//     with everything the leader had committed when it promised (applied ≥
//     that commit index).
//
// The lease messages travel as raftpb.Messages of types Raft does not use,
// so they share the replicas' transport, its partitions and its losses;
// StepRaft takes them before Raft sees them.
const (
	msgLeaseAsk     = raftpb.MessageType(wire.ReadLeaseAsk)     // Index: the round; Term: the holder's term; Commit, LogTerm: the round and term of the leader promise it acknowledges
	msgLeasePromise = raftpb.MessageType(wire.ReadLeasePromise) // Index: the round; Term: the promise's; Reject: from the leader; Commit, LogTerm, RejectHint: the leader's commit, visible bound and voters (votersKey)
	msgLeaseVisible = raftpb.MessageType(wire.ReadLeaseVisible) // Commit: the visible bound
)

func isLeaseMsg(t raftpb.MessageType) bool { return wire.IsReadLeaseType(int32(t)) }

// promise is a voter's answer to a holder's ask.
type promise struct {
	term    uint64
	leader  bool
	commit  uint64
	visible uint64
	voters  uint64 // the leader's voters (votersKey)
}

// leaseAck names the newest round whose promise from the leader came back
// to a holder: the round, when the holder asked it, and the promise's term.
type leaseAck struct {
	round uint64
	at    time.Time
	term  uint64
}

// leaseAsk is a round of asks: when the holder sent it, the leader promise
// it acknowledged, and the promises that came back.
type leaseAsk struct {
	at  time.Time
	ack leaseAck
	got map[uint64]promise
}

// readLease is a replica's read-lease state: as a holder (its lease), as
// a leader (whom it promised, its visible bound) and its counters.
type readLease struct {
	// Holder.
	round   uint64
	asks    map[uint64]*leaseAsk
	ack     leaseAck // the newest leader promise that came back
	nextAsk time.Time
	until   time.Time // the lease ends (zero: never held)
	term    uint64    // the term of the promises that made it
	floor   uint64    // the leader's commit index when it promised
	visible uint64    // the highest visible bound heard (or, on the leader, set)

	// Leader.
	promised map[uint64]time.Time            // holder → until when the leader counts it
	sent     map[uint64]map[uint64]time.Time // holder → round → when this leader promised it, in its term
	nextSend time.Time                       // resend the visible bound
	acked    uint64                          // the highest index whose round's answers were released

	// Every replica: holders that left the configuration, until when a
	// promise made before they left may last (a new leader counts them).
	gone map[uint64]time.Time

	out   []raftpb.Message
	stats ReadLeaseStats
}

// ReadLeaseStats counts a replica's read-lease activity.
type ReadLeaseStats struct {
	Asks, Promises, Leases uint64 // rounds asked, promises given, leases taken
	Reads, Refused         uint64 // lease reads served and refused
	Syncs                  uint64 // Lookup syncs a follower answered under its lease
}

// ReadLeaseStatus is what a replica knows of its read lease.
type ReadLeaseStatus struct {
	Holder  bool      // the configuration names this replica
	Until   time.Time // its lease ends (local clock); zero if never held
	Term    uint64    // the term of the promises that granted it
	Floor   uint64    // the commit index it must have applied to serve
	Visible uint64    // the highest visible bound it heard
	Applied uint64
	Serving bool // it would serve a read now
	Stats   ReadLeaseStats
}

func (r *Replica) leaseOn() bool { return r.cfg.Settings.ReadLease.On() }

func (r *Replica) leaseHolder() bool { return r.cfg.Settings.ReadLease.Holds(r.cfg.ID) }

func (r *Replica) leaseBound() time.Duration { return r.cfg.Settings.ReadLeaseBound() }

// ReadLease reports the replica's read lease at now.
func (r *Replica) ReadLease(now time.Time) ReadLeaseStatus {
	return ReadLeaseStatus{Holder: r.leaseHolder(), Until: r.rl.until, Term: r.rl.term, Floor: r.rl.floor,
		Visible: r.rl.visible, Applied: r.applied, Serving: r.leaseReadable(now), Stats: r.rl.stats}
}

// LeaseRead answers a linearizable read from the local copy: it returns the
// index of the last entry applied, and false if the replica may not serve
// now (no lease, or a write pending); the caller then reads the State.
func (r *Replica) LeaseRead(now time.Time) (uint64, bool) {
	if !r.leaseReadable(now) {
		r.rl.stats.Refused++
		return 0, false
	}
	r.rl.stats.Reads++
	return r.applied, true
}

// ReadLeaseAcked is the highest log index the leader released answers for:
// every write up to it has been acknowledged to an Owner.
func (r *Replica) ReadLeaseAcked() uint64 { return r.rl.acked }

func (r *Replica) leaseReadable(now time.Time) bool {
	if !r.leaseOn() || !r.leaseHolder() || r.rl.until.IsZero() {
		return false
	}
	if !now.Before(r.rl.until) && !r.cfg.Break.ReadLeaseServeExpired {
		return false
	}
	last, err := r.ms.LastIndex()
	if err != nil || last != r.applied {
		return false // a write this replica has appended may be visible already
	}
	return r.applied >= r.rl.floor && r.applied <= r.rl.visible
}

// majority is how many voters make a majority, 0 while the configuration
// is joint or unknown (no lease is taken then).
func (r *Replica) majority() (map[uint64]bool, int) {
	if len(r.conf.VotersOutgoing) > 0 || len(r.conf.Voters) == 0 {
		return nil, 0
	}
	voters := map[uint64]bool{}
	for _, v := range r.conf.Voters {
		voters[v] = true
	}
	return voters, len(voters)/2 + 1
}

// leaseTick runs the read-lease timers: a holder asks for promises every
// Renew; the leader recomputes its visible bound (a holder may have stopped
// counting) and resends it every Renew.
func (r *Replica) leaseTick(now time.Time) {
	if !r.leaseOn() {
		return
	}
	if r.leaseHolder() && !now.Before(r.rl.nextAsk) {
		r.askReadLease(now)
	}
	maps.DeleteFunc(r.rl.gone, func(_ uint64, t time.Time) bool { return !now.Before(t) })
	if r.leading() {
		// Forget what has ended, so that leaseDeadline names only what
		// is to come.
		maps.DeleteFunc(r.rl.promised, func(_ uint64, t time.Time) bool { return !now.Before(t) })
		r.leaseVisible(now)
		if !now.Before(r.rl.nextSend) {
			r.sendVisible()
			r.rl.nextSend = now.Add(r.cfg.Settings.ReadLease.Renew)
		}
	}
}

// leaseDeadline is the next local time leaseTick has work.
func (r *Replica) leaseDeadline() time.Time {
	if !r.leaseOn() {
		return time.Time{}
	}
	var d time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	if r.leaseHolder() {
		earlier(r.rl.nextAsk)
	}
	if r.leading() {
		earlier(r.rl.nextSend)
		// A holder stops counting: the bound may move on.
		for _, t := range r.rl.promised {
			earlier(t)
		}
	}
	return d
}

func (r *Replica) askReadLease(now time.Time) {
	r.rl.nextAsk = now.Add(r.cfg.Settings.ReadLease.Renew)
	voters, _ := r.majority()
	if voters == nil {
		return
	}
	for rd, a := range r.rl.asks {
		if now.Sub(a.at) >= r.cfg.Settings.ReadLease.Duration {
			delete(r.rl.asks, rd) // its promises could no longer extend the lease
		}
	}
	r.rl.round++
	r.rl.stats.Asks++
	r.rl.asks[r.rl.round] = &leaseAsk{at: now, ack: r.rl.ack, got: map[uint64]promise{}}
	term := r.rn.BasicStatus().Term
	for _, v := range slices.Sorted(maps.Keys(voters)) {
		m := raftpb.Message{Type: msgLeaseAsk, From: r.cfg.ID, To: v, Index: r.rl.round, Term: term,
			Commit: r.rl.ack.round, LogTerm: r.rl.ack.term}
		if v == r.cfg.ID {
			r.stepReadLease(now, m)
			continue
		}
		r.rl.out = append(r.rl.out, m)
	}
}

// stepReadLease handles a read-lease message.
func (r *Replica) stepReadLease(now time.Time, m raftpb.Message) {
	if !r.leaseOn() {
		return
	}
	switch m.Type {
	case msgLeaseAsk:
		r.givePromise(now, m)
	case msgLeasePromise:
		r.promised(now, m)
	case msgLeaseVisible:
		if r.leaseHolder() {
			r.rl.visible = max(r.rl.visible, m.Commit)
		}
	}
}

// givePromise answers holder m.From's ask with a promise in this replica's
// current term: by moving to a later term (voting there) it gives up the
// earlier term for good, which is what lets a new leader bound the
// promises made before it (docs/protocol.md). Only a replica that knows
// the term's leader promises; the leader's promise is marked as such only
// while Raft still names this replica its current leader (leading), and a
// replica Raft made leader promises nothing until it has taken over.
func (r *Replica) givePromise(now time.Time, m raftpb.Message) {
	if !r.cfg.Settings.ReadLease.Holds(m.From) {
		return
	}
	bs := r.rn.BasicStatus()
	term := bs.Term
	leader := r.leading()
	if r.cfg.Break.ReadLeaseDeposedGrant {
		leader = r.core != nil // the Core, which only the next Advance clears
	}
	switch {
	case r.cfg.Break.ReadLeaseStaleGrant && m.Term != 0 && m.Term < bs.Term:
		term = m.Term // a term this replica has left
	case bs.Lead == 0:
		return
	case bs.RaftState == raft.StateLeader && !leader:
		return // not taken over yet
	}
	p := raftpb.Message{Type: msgLeasePromise, From: r.cfg.ID, To: m.From, Index: m.Index, Term: term}
	if leader && term == bs.Term {
		p.Reject = true // from the leader
		r.leaseVisible(now)
		p.Commit, p.LogTerm, p.RejectHint = bs.Commit, r.rl.visible, votersKey(r.conf)
		r.countHolder(now, m, term)
	}
	r.rl.stats.Promises++
	if m.From == r.cfg.ID {
		r.promised(now, p)
		return
	}
	r.rl.out = append(r.rl.out, p)
}

// promised records a promise and takes the lease its round now makes. A
// promise from the leader is acknowledged in the asks that follow.
func (r *Replica) promised(now time.Time, m raftpb.Message) {
	a := r.rl.asks[m.Index]
	if a == nil || !r.leaseHolder() {
		return
	}
	a.got[m.From] = promise{term: m.Term, leader: m.Reject, commit: m.Commit, visible: m.LogTerm, voters: m.RejectHint}
	if m.Reject && m.Index > r.rl.ack.round {
		r.rl.ack = leaseAck{round: m.Index, at: a.at, term: m.Term}
	}
	voters, need := r.majority()
	if voters == nil {
		return
	}
	n, lead := 0, promise{}
	for from, p := range a.got {
		if p.term != m.Term || !voters[from] {
			continue
		}
		n++
		if p.leader {
			lead = p
		}
	}
	if n < need || !lead.leader {
		return
	}
	// The majority is one of the leader's voters, not only of this
	// holder's, which may lag the group's (docs/protocol.md, "Quorum read
	// leases", boundary 4).
	if lead.voters != votersKey(r.conf) && !r.cfg.Break.ReadLeaseConfBlind {
		return
	}
	// The leader counts this lease only from the promise this round
	// acknowledged: the lease runs from that round's ask.
	start := a.ack.at
	switch {
	case r.cfg.Break.ReadLeaseFromNewest:
		start = a.at
	case a.ack.round == 0 || a.ack.term != m.Term:
		return // no promise of this term acknowledged: the next round will be
	}
	until := start.Add(r.cfg.Settings.ReadLease.Duration)
	if !until.After(r.rl.until) {
		return
	}
	if r.rl.until.Before(now) {
		r.rl.stats.Leases++
	}
	r.rl.until, r.rl.term, r.rl.floor = until, m.Term, lead.commit
	r.rl.visible = max(r.rl.visible, lead.visible)
}

// leaseVisible recomputes the leader's visible bound: the highest
// committed index every holder that may be serving has appended. It only
// grows. The answers it releases go out with the next Ready.
func (r *Replica) leaseVisible(now time.Time) {
	if !r.leaseOn() || !r.leading() {
		return
	}
	st := r.rn.Status()
	v := st.Commit
	if !r.cfg.Break.ReadLeaseAckEarly {
		for h, until := range r.rl.promised {
			if h == r.cfg.ID || !now.Before(until) {
				continue
			}
			pr, ok := st.Progress[h]
			if !ok {
				v = 0 // not a member the leader replicates to: wait out its lease
				break
			}
			v = min(v, pr.Match)
		}
	}
	if v <= r.rl.visible {
		return
	}
	r.rl.visible = v
	r.sendVisible()
	r.release()
}

func (r *Replica) sendVisible() {
	for _, h := range r.leaseHolders() {
		if h != r.cfg.ID {
			r.rl.out = append(r.rl.out, raftpb.Message{Type: msgLeaseVisible, From: r.cfg.ID, To: h, Commit: r.rl.visible})
		}
	}
}

// leaseHeld reports whether a held round at index must still wait: the
// leader may release a round's answers only once everything up to its
// index is visible to reads.
func (r *Replica) leaseHeld(index uint64) bool {
	return r.leaseOn() && r.rl.visible < index
}

func (r *Replica) takeLeaseMsgs() []raftpb.Message {
	out := r.rl.out
	r.rl.out = nil
	return out
}

// AskReadIndex starts a ReadIndex round at now, as a follower does to serve
// Lookups; ReadIndexProof returns the local time the newest answered round
// was asked and the commit index it proved. The simulation measures the
// ReadIndex path with them.
func (r *Replica) AskReadIndex(now time.Time) { r.askRead(now) }

// ReadIndexProof: see AskReadIndex.
func (r *Replica) ReadIndexProof() (time.Time, uint64) { return r.readAt, r.readIndex }
