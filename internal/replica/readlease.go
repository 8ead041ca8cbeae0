package replica

import (
	"maps"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/faults"
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

// readLeases is a replica's quorum read leases, a type of its own with its
// own verbs (ask, givePromise, gotPromise, raiseVisible, withholds): its
// state as a holder (its lease), as a leader (whom it promised, its visible
// bound) and its counters. It sees the Replica only through leaseView, and
// sends by appending to out, which the Replica's Ready takes.
type readLeases struct {
	id     uint64        // this replica
	cfg    ReadLease     // Settings.ReadLease
	boundD time.Duration // Settings.ReadLeaseBound
	brk    faults.Set    // the rules broken on purpose (ReadLease*)
	v      leaseView

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

// leaseView is what read leases need of their Replica: its Raft status
// (and, on the leader, its followers' progress), whether it leads with a
// Core taken over (and whether it holds a Core at all, for the
// ReadLeaseDeposedGrant twin), its voters and members, what it has applied
// and whether that is all it has appended, and the release of held rounds
// once the visible bound moves.
type leaseView struct {
	status   func() raft.BasicStatus
	progress func() raft.Status
	leading  func() bool
	hasCore  func() bool
	conf     func() raftpb.ConfState
	peers    func() map[uint64]string
	reader   func(id uint64) bool // a read replica (readreplica.go)
	applied  func() (applied uint64, all bool)
	release  func()
}

// newReadLeases returns r's read leases, seeing r through a leaseView.
func newReadLeases(r *Replica) readLeases {
	return readLeases{id: r.cfg.ID, cfg: r.cfg.Settings.ReadLease, boundD: r.cfg.Settings.ReadLeaseBound(), brk: r.cfg.Break,
		v: leaseView{
			status:   r.rn.BasicStatus,
			progress: r.rn.Status,
			leading:  r.leading,
			hasCore:  func() bool { return r.core != nil },
			conf:     func() raftpb.ConfState { return r.conf },
			peers:    func() map[uint64]string { return r.st.Peers() },
			reader:   func(id uint64) bool { return r.st.ReadReplica(id) },
			applied: func() (uint64, bool) {
				last, err := r.ms.LastIndex()
				return r.applied, err == nil && last == r.applied
			},
			release: r.release,
		},
		asks: map[uint64]*leaseAsk{}, promised: map[uint64]time.Time{},
		sent: map[uint64]map[uint64]time.Time{}, gone: map[uint64]time.Time{}}
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

func (l *readLeases) on() bool { return l.cfg.On() }

func (l *readLeases) holder() bool { return l.holds(l.id) }

// holds reports whether replica id holds read leases: ReadLease.All names
// every voter and learner being caught up, but no read replica (readreplica.go:
// no write waits for one), and ReadLease.Holders names whom it names.
func (l *readLeases) holds(id uint64) bool {
	return l.cfg.Holds(id) && (!l.cfg.All || !l.v.reader(id))
}

func (l *readLeases) bound() time.Duration { return l.boundD }

// ReadLease reports the replica's read lease at now.
func (r *Replica) ReadLease(now time.Time) ReadLeaseStatus {
	return ReadLeaseStatus{Holder: r.rl.holder(), Until: r.rl.until, Term: r.rl.term, Floor: r.rl.floor,
		Visible: r.rl.visible, Applied: r.applied, Serving: r.rl.readable(now), Stats: r.rl.stats}
}

// LeaseRead answers a linearizable read from the local copy: it returns the
// index of the last entry applied, and false if the replica may not serve
// now (no lease, or a write pending); the caller then reads the State.
func (r *Replica) LeaseRead(now time.Time) (uint64, bool) {
	if !r.rl.readable(now) {
		r.rl.stats.Refused++
		return 0, false
	}
	r.rl.stats.Reads++
	return r.applied, true
}

// ReadLeaseAcked is the highest log index the leader released answers for:
// every write up to it has been acknowledged to an Owner.
func (r *Replica) ReadLeaseAcked() uint64 { return r.rl.acked }

func (l *readLeases) readable(now time.Time) bool {
	if !l.on() || !l.holder() || l.until.IsZero() {
		return false
	}
	if !now.Before(l.until) && !l.brk.ReadLeaseServeExpired {
		return false
	}
	applied, ok := l.v.applied()
	if !ok {
		return false // a write this replica has appended may be visible already
	}
	return applied >= l.floor && applied <= l.visible
}

// majority is how many voters make a majority, 0 while the configuration
// is joint or unknown (no lease is taken then).
func (l *readLeases) majority() (map[uint64]bool, int) {
	if len(l.v.conf().VotersOutgoing) > 0 || len(l.v.conf().Voters) == 0 {
		return nil, 0
	}
	voters := map[uint64]bool{}
	for _, v := range l.v.conf().Voters {
		voters[v] = true
	}
	return voters, len(voters)/2 + 1
}

// tick runs the read-lease timers: a holder asks for promises every
// Renew; the leader recomputes its visible bound (a holder may have stopped
// counting) and resends it every Renew.
func (l *readLeases) tick(now time.Time) {
	if !l.on() {
		return
	}
	if l.holder() && !now.Before(l.nextAsk) {
		l.ask(now)
	}
	maps.DeleteFunc(l.gone, func(_ uint64, t time.Time) bool { return !now.Before(t) })
	if l.v.leading() {
		// Forget what has ended, so that deadline names only what
		// is to come.
		maps.DeleteFunc(l.promised, func(_ uint64, t time.Time) bool { return !now.Before(t) })
		l.raiseVisible(now)
		if !now.Before(l.nextSend) {
			l.sendVisible()
			l.nextSend = now.Add(l.cfg.Renew)
		}
	}
}

// deadline is the next local time tick has work.
func (l *readLeases) deadline() time.Time {
	if !l.on() {
		return time.Time{}
	}
	var d time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	if l.holder() {
		earlier(l.nextAsk)
	}
	if l.v.leading() {
		earlier(l.nextSend)
		// A holder stops counting: the bound may move on.
		for _, t := range l.promised {
			earlier(t)
		}
	}
	return d
}

func (l *readLeases) ask(now time.Time) {
	l.nextAsk = now.Add(l.cfg.Renew)
	voters, _ := l.majority()
	if voters == nil {
		return
	}
	for rd, a := range l.asks {
		if now.Sub(a.at) >= l.cfg.Duration {
			delete(l.asks, rd) // its promises could no longer extend the lease
		}
	}
	l.round++
	l.stats.Asks++
	l.asks[l.round] = &leaseAsk{at: now, ack: l.ack, got: map[uint64]promise{}}
	term := l.v.status().Term
	for _, v := range slices.Sorted(maps.Keys(voters)) {
		m := raftpb.Message{Type: msgLeaseAsk, From: l.id, To: v, Index: l.round, Term: term,
			Commit: l.ack.round, LogTerm: l.ack.term}
		if v == l.id {
			l.step(now, m)
			continue
		}
		l.out = append(l.out, m)
	}
}

// step handles a read-lease message.
func (l *readLeases) step(now time.Time, m raftpb.Message) {
	if !l.on() {
		return
	}
	switch m.Type {
	case msgLeaseAsk:
		l.givePromise(now, m)
	case msgLeasePromise:
		l.gotPromise(now, m)
	case msgLeaseVisible:
		if l.holder() {
			l.visible = max(l.visible, m.Commit)
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
func (l *readLeases) givePromise(now time.Time, m raftpb.Message) {
	if !l.holds(m.From) {
		return
	}
	bs := l.v.status()
	term := bs.Term
	leader := l.v.leading()
	if l.brk.ReadLeaseDeposedGrant {
		leader = l.v.hasCore() // the Core, which only the next Advance clears
	}
	switch {
	case l.brk.ReadLeaseStaleGrant && m.Term != 0 && m.Term < bs.Term:
		term = m.Term // a term this replica has left
	case bs.Lead == 0:
		return
	case bs.RaftState == raft.StateLeader && !leader:
		return // not taken over yet
	}
	p := raftpb.Message{Type: msgLeasePromise, From: l.id, To: m.From, Index: m.Index, Term: term}
	if leader && term == bs.Term {
		p.Reject = true // from the leader
		l.raiseVisible(now)
		p.Commit, p.LogTerm, p.RejectHint = bs.Commit, l.visible, votersKey(l.v.conf())
		l.countHolder(now, m, term)
	}
	l.stats.Promises++
	if m.From == l.id {
		l.gotPromise(now, p)
		return
	}
	l.out = append(l.out, p)
}

// gotPromise records a promise and takes the lease its round now makes. A
// promise from the leader is acknowledged in the asks that follow.
func (l *readLeases) gotPromise(now time.Time, m raftpb.Message) {
	a := l.asks[m.Index]
	if a == nil || !l.holder() {
		return
	}
	a.got[m.From] = promise{term: m.Term, leader: m.Reject, commit: m.Commit, visible: m.LogTerm, voters: m.RejectHint}
	if m.Reject && m.Index > l.ack.round {
		l.ack = leaseAck{round: m.Index, at: a.at, term: m.Term}
	}
	voters, need := l.majority()
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
	if lead.voters != votersKey(l.v.conf()) && !l.brk.ReadLeaseConfBlind {
		return
	}
	// The leader counts this lease only from the promise this round
	// acknowledged: the lease runs from that round's ask.
	start := a.ack.at
	switch {
	case l.brk.ReadLeaseFromNewest:
		start = a.at
	case a.ack.round == 0 || a.ack.term != m.Term:
		return // no promise of this term acknowledged: the next round will be
	}
	until := start.Add(l.cfg.Duration)
	if !until.After(l.until) {
		return
	}
	if l.until.Before(now) {
		l.stats.Leases++
	}
	l.until, l.term, l.floor = until, m.Term, lead.commit
	l.visible = max(l.visible, lead.visible)
}

// raiseVisible recomputes the leader's visible bound: the highest
// committed index every holder that may be serving has appended. It only
// grows. The answers it releases go out with the next Ready.
func (l *readLeases) raiseVisible(now time.Time) {
	if !l.on() || !l.v.leading() {
		return
	}
	st := l.v.progress()
	v := st.Commit
	if !l.brk.ReadLeaseAckEarly {
		for h, until := range l.promised {
			if h == l.id || !now.Before(until) {
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
	if v <= l.visible {
		return
	}
	l.visible = v
	l.sendVisible()
	l.v.release()
}

func (l *readLeases) sendVisible() {
	for _, h := range l.holders() {
		if h != l.id {
			l.out = append(l.out, raftpb.Message{Type: msgLeaseVisible, From: l.id, To: h, Commit: l.visible})
		}
	}
}

// withholds reports whether a held round at index must still wait: the
// leader may release a round's answers only once everything up to its
// index is visible to reads.
func (l *readLeases) withholds(index uint64) bool {
	return l.on() && l.visible < index
}

func (l *readLeases) take() []raftpb.Message {
	out := l.out
	l.out = nil
	return out
}

// AskReadIndex starts a ReadIndex round at now, as a follower does to serve
// Lookups; ReadIndexProof returns the local time the newest answered round
// was asked and the commit index it proved. The simulation measures the
// ReadIndex path with them.
func (r *Replica) AskReadIndex(now time.Time) { r.askRead(now) }

// ReadIndexProof: see AskReadIndex.
func (r *Replica) ReadIndexProof() (time.Time, uint64) { return r.readAt, r.readIndex }
