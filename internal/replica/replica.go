package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/protocol"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// NotLeaderError refuses a request a replica cannot serve: an Owner's
// request on any replica but a leader that has taken over, or a Lookup's on
// a replica that has lost touch with the leader. Leader is the leader's
// address when known.
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "manager: not the leader (leader unknown)"
	}
	return "manager: not the leader (leader at " + e.Leader + ")"
}

// Peer names one Manager replica: its Raft ID and the address where it
// serves Owners, Lookups, other replicas and operators.
type Peer struct {
	ID   uint64
	Addr string
	// ReadReplica is true for a read replica: a learner never promoted
	// (readreplica.go).
	ReadReplica bool
}

// ReplicaConfig configures a Replica.
type ReplicaConfig struct {
	ID uint64
	// Settings are the replica's: its Core's, its Feed's and its Raft
	// node's (manager.Config holds the same). NewReplica fills in their
	// defaults but does not validate them, so that the simulation can run
	// timings that break the protocol's rules.
	Settings Settings
	// Storage holds the Raft log the replica restarts from; the driver
	// loads it from the data directory (or starts it empty).
	Storage *raft.MemoryStorage
	// Bootstrap, when Storage is empty, founds a new group of these
	// replicas (every founding member is started with the same list). An
	// empty Bootstrap with empty Storage waits to be added to an existing
	// group by its leader.
	Bootstrap []Peer
	Logger    raft.Logger
	// Break selects protocol rules to break on purpose, for the
	// simulation's broken twins (broken.go); the zero value breaks
	// none.
	Break faults.Set
}

// Replica is one member of the replicated Manager (C§2.1.1, docs/design.md rule
// 8): a Raft node whose state machine is the State, a Feed serving Lookups
// from the applied State, and, on the leader, the Core that runs the lease
// logic. Like the Core it is deterministic: it starts no goroutines, opens
// no sockets and never reads a clock; its driver persists, sends and
// answers what Ready returns, then calls Advance (Drive, driver.go).
//
// The two failover rules live here and in Resume:
//   - every Core round that changes the State is proposed as one entry and
//     its Owner messages are held until that entry commits in the term it
//     was proposed in; a round that changes nothing (renewals) is held
//     until a ReadIndex round started after it confirms the replica still
//     leads and every earlier round has committed. Either way no response
//     that grants or renews leaves a deposed leader;
//   - a new leader takes over (Resume) only once it has applied an entry of
//     its own term, and then reserves every range for a ManagerLease.
type Replica struct {
	cfg      ReplicaConfig
	rn       *raft.RawNode
	ms       *raft.MemoryStorage
	st       *lease.State // applied
	feed     *Feed
	core     *lease.Core // leader only, after takeover
	coreTerm uint64
	resumes  uint64 // takeovers within coreTerm
	lead     uint64
	role     raft.StateType
	applied  uint64
	snapshot uint64 // index of the last snapshot
	conf     raftpb.ConfState
	termSeen bool // an entry of the current term was applied

	prop    uint64                // proposals made
	pending map[uint64]*heldRound // rounds whose batch has not committed, by batch Seq
	// held is every round whose Owner messages wait for their proof, in
	// the order they were made; they are sent in that order.
	held []*heldRound

	nextTick     time.Time
	nextFeedTick time.Time
	owners       []lease.OwnerMessage // released, for the next Ready
	peerChanges  []Peer               // for the next Ready
	compacted    raftpb.Snapshot      // taken by Advance, for the next Ready
	stats        ReplicaStats

	// A follower serves Lookups on the proof of a ReadIndex round: the
	// leader had committed no further than readIndex when asked at readAt.
	started   time.Time
	reads     map[string]time.Time // rounds asked and not answered: context → when
	readSeq   uint64
	nextRead  time.Time
	readIndex uint64
	readAt    time.Time

	// Membership, on the leader (membership.go): when each other replica
	// was last heard from, the learners being caught up with the time
	// they must be promoted by, and whether a conf change is in flight.
	heard       map[uint64]time.Time
	learners    map[uint64]time.Time
	confPending bool
	confApplied bool   // a change of the members was applied since the last Advance
	foreign     uint64 // raft messages dropped: their sender is not a member

	rl readLeases // quorum read leases (readlease.go)
}

// heldRound is a Core round's Owner messages, held until it is proven
// that the replica still led when the round was made: by the commit of
// the round's entry, or, for a round that changed nothing, by a ReadIndex
// round (ctx) and the application of everything committed when it was
// asked (index).
type heldRound struct {
	msgs  []lease.OwnerMessage
	ctx   string // the ReadIndex context; "" for a round with an entry
	index uint64
	ok    bool // committed, or the ReadIndex round answered
}

// ReplicaStats counts a replica's Raft activity.
type ReplicaStats struct {
	Proposals, Applied, Takeovers, Snapshots uint64
	Confirmations                            uint64 // rounds sent on a ReadIndex proof, with no entry
	Dropped                                  uint64 // owner messages never sent: their batch did not commit in time
}

// NewReplica returns a replica that starts at now.
func NewReplica(cfg ReplicaConfig, now time.Time) (*Replica, error) {
	if cfg.ID == 0 {
		return nil, errors.New("manager: replica ID 0")
	}
	cfg.Settings.SetDefaults()
	if cfg.Storage == nil {
		cfg.Storage = raft.NewMemoryStorage()
	}
	r := &Replica{cfg: cfg, ms: cfg.Storage, st: lease.NewState(cfg.Settings.Lease.Timing.LogRetention),
		pending: map[uint64]*heldRound{}, nextTick: now.Add(cfg.Settings.RaftTick),
		started: now, reads: map[string]time.Time{},
		heard: map[uint64]time.Time{}, learners: map[uint64]time.Time{}}
	snap, err := r.ms.Snapshot()
	if err != nil {
		return nil, err
	}
	if !raft.IsEmptySnap(snap) {
		if r.st, err = lease.DecodeState(snap.Data, cfg.Settings.Lease.Timing.LogRetention); err != nil {
			return nil, err
		}
		r.applied, r.snapshot, r.conf = snap.Metadata.Index, snap.Metadata.Index, snap.Metadata.ConfState
	}
	r.feed = NewFeed(r.st, cfg.Settings.Lease.Timing)
	r.feed.SetPushEvery(cfg.Settings.PushEvery)
	r.feed.SetServes(r.vouches)
	r.feed.unserved = cfg.Break.HeartbeatUnserved
	rc := &raft.Config{
		ID:              cfg.ID,
		ElectionTick:    cfg.Settings.ElectionTicks,
		HeartbeatTick:   1,
		Storage:         r.ms,
		Applied:         r.applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		CheckQuorum:     true,
		PreVote:         true,
		Logger:          cfg.Logger,
	}
	if rc.Logger == nil {
		rc.Logger = quietLogger{}
	}
	if r.rn, err = raft.NewRawNode(rc); err != nil {
		return nil, err
	}
	r.rl = newReadLeases(r)
	first, _ := r.ms.FirstIndex()
	last, _ := r.ms.LastIndex()
	if last < first && r.applied == 0 && len(cfg.Bootstrap) > 0 {
		var peers []raft.Peer
		for _, p := range cfg.Bootstrap {
			peers = append(peers, raft.Peer{ID: p.ID, Context: []byte(p.Addr)})
		}
		if err := r.rn.Bootstrap(peers); err != nil {
			return nil, err
		}
	}
	r.campaignAlone()
	return r, nil
}

// ID returns the replica's Raft ID.
func (r *Replica) ID() uint64 { return r.cfg.ID }

// State returns the applied state, for reading only.
func (r *Replica) State() *lease.State { return r.st }

// Core returns the leader's core, nil unless this replica leads and has
// taken over.
func (r *Replica) Core() *lease.Core { return r.core }

// Feed returns the Lookup feed.
func (r *Replica) Feed() *Feed { return r.feed }

// Foreign counts the raft messages dropped because their sender is not a
// member of the group.
func (r *Replica) Foreign() uint64 { return r.foreign }

// Stats returns the counters.
func (r *Replica) Stats() ReplicaStats { return r.stats }

// Leader returns the leader's ID and address as this replica knows them.
func (r *Replica) Leader() (uint64, string) { return r.lead, r.st.Peers()[r.lead] }

// Status returns Raft's view of the group.
func (r *Replica) Status() raft.Status { return r.rn.Status() }

// Commit is the highest log index this replica knows committed (Status
// without the copy of the leader's progress).
func (r *Replica) Commit() uint64 { return r.rn.BasicStatus().Commit }

// StepRaft handles a message from another replica. Once the replica knows
// its group, a message from a replica outside it is dropped (ErrNotMember):
// a removed replica, or a stranger, could otherwise depose the leader with
// a higher term. A replica that knows no group yet (one started to join)
// takes messages from anyone, so the leader that adds it can reach it.
func (r *Replica) StepRaft(now time.Time, m raftpb.Message) error {
	if len(r.st.Peers()) > 0 {
		if _, ok := r.st.Peers()[m.From]; !ok {
			r.foreign++
			return fmt.Errorf("%w: replica %d", ErrNotMember, m.From)
		}
	}
	r.heard[m.From] = now
	if isLeaseMsg(m.Type) {
		r.rl.step(now, m)
		return nil
	}
	return r.rn.Step(m)
}

// ReportSnapshot tells Raft whether the snapshot (MsgSnap) sent to replica
// id arrived, as the transport learns it: until it is told, the leader
// sends that replica nothing more.
func (r *Replica) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	r.rn.ReportSnapshot(id, status)
}

// ReportUnreachable tells Raft that a message to replica id could not be
// delivered, so the leader probes it instead of streaming to it.
func (r *Replica) ReportUnreachable(id uint64) { r.rn.ReportUnreachable(id) }

// StepLease handles an Owner's LeaseRequest. Only a leader that has taken
// over answers; any other replica returns a *NotLeaderError.
func (r *Replica) StepLease(now time.Time, req *protocol.LeaseRequest) error {
	if !r.leading() {
		return r.notLeader()
	}
	return r.core.StepLease(now, req)
}

// StepSync handles a Lookup's SyncRequest. A replica answers while it is a
// leader that has taken over; a read-lease holder whose lease lets it serve
// a lease read now, from its own applied copy with no message to anyone (a
// lease read: docs/protocol.md, "Quorum read leases"); or a follower that
// has applied everything its leader had committed less than an election
// timeout ago (a ReadIndex round). Its answers then lag the newest
// committed table by at most StaleBound. Any other replica refuses, naming
// the leader.
func (r *Replica) StepSync(now time.Time, id uint64, req *protocol.SyncRequest) error {
	switch r.syncPath(now) {
	case syncRefused:
		return r.notLeader()
	case syncLease:
		r.rl.stats.Syncs++
	}
	return r.feed.StepSync(now, id, req)
}

// Serving reports whether the replica answers Lookups at now.
func (r *Replica) Serving(now time.Time) bool { return r.syncPath(now) != syncRefused }

// vouches reports whether the Feed's pushes and heartbeats built at now may
// vouch for a Lookup's freshness: a poll received now would be answered at
// once. A leader must still lead in Raft's own state (leading), which a
// Tick's CheckQuorum may have changed before the Ready that takes the Core
// away.
func (r *Replica) vouches(now time.Time) bool { return r.syncPath(now) != syncRefused }

// How a replica answers a Lookup's sync.
const (
	syncRefused   = iota
	syncLeader    // a leader that has taken over
	syncLease     // a holder, under its read lease
	syncReadIndex // a follower, on a ReadIndex proof less than an election timeout old
)

// syncPath says how the replica would answer a sync at now: the leader's
// own table first, then the read lease (no round to anyone), then the
// ReadIndex proof.
func (r *Replica) syncPath(now time.Time) int {
	switch {
	case r.leading():
		return syncLeader
	case r.rl.readable(now):
		return syncLease
	case r.role == raft.StateFollower && r.lead != 0 && r.st.Epoch() != 0 &&
		!r.readAt.IsZero() && now.Sub(r.readAt) < r.electionTimeout() && r.applied >= r.readIndex:
		return syncReadIndex
	case r.cfg.Break.ReadReplicaStale && r.role == raft.StateFollower && r.lead != 0 && r.st.Epoch() != 0 && r.ReadReplica():
		return syncReadIndex // broken: no proof
	}
	return syncRefused
}

// askRead starts a ReadIndex round: the leader answers, after a heartbeat
// round confirms it still leads, with its commit index. Hearing heartbeats
// is no such proof: a follower whose log lags (a lost append, a snapshot
// in transit, a restart) hears them all the same. A follower asks three
// times per election timeout, so one lost round does not stop it serving.
func (r *Replica) askRead(now time.Time) {
	for ctx, at := range r.reads {
		if now.Sub(at) >= r.electionTimeout() {
			delete(r.reads, ctx) // its answer could no longer make us serve
		}
	}
	r.readSeq++
	ctx := fmt.Appendf(nil, "%d/%d/%d", r.cfg.ID, r.started.UnixNano(), r.readSeq) // unique at the leader
	r.reads[string(ctx)] = now
	r.rn.ReadIndex(ctx)
	r.nextRead = now.Add(r.electionTimeout() / 3)
}

func (r *Replica) electionTimeout() time.Duration {
	return time.Duration(r.cfg.Settings.ElectionTicks) * r.cfg.Settings.RaftTick
}

// StaleBound is how far behind the newest committed table a serving
// replica's answers may be, on its own clock: a follower's, by the age of
// its last ReadIndex proof; a deposed leader's, until CheckQuorum deposes
// it, at most two election timeouts after it lost its majority — while a
// new leader needs one to be elected, so it commits nothing for the first.
//
// With read leases, a holder serving on its lease shows everything visible
// to reads, which lags the newest commit by up to the read-lease bound
// (docs/protocol.md, "Quorum read leases"); StaleBound is the larger.
func (r *Replica) StaleBound() time.Duration {
	if r.rl.on() {
		return max(r.electionTimeout(), r.rl.bound())
	}
	return r.electionTimeout()
}

func (r *Replica) notLeader() error {
	_, addr := r.Leader()
	return &NotLeaderError{Leader: addr}
}

// Drain starts draining Owner id of namespace ns (Core.Drain); only a
// leader that has taken over accepts.
func (r *Replica) Drain(now time.Time, ns, id string) error {
	if !r.leading() {
		return r.notLeader()
	}
	return r.core.Drain(now, ns, id)
}

// CloseLookup forgets a Lookup session.
func (r *Replica) CloseLookup(ns string, id uint64) { r.feed.Close(ns, id) }

// NextDeadline is the local time by which Tick must be called next.
func (r *Replica) NextDeadline() time.Time {
	var d time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	if !r.alone() {
		earlier(r.nextTick)
	}
	earlier(r.nextFeedTick) // Lookup sessions expire, change logs are truncated
	if r.core != nil {
		earlier(r.core.NextDeadline())
	}
	earlier(r.feed.NextDeadline()) // a coalesced push round
	earlier(r.rl.deadline())
	if d.IsZero() {
		d = r.nextTick
	}
	return d
}

// alone reports whether this replica leads a group with no other member,
// voter or learner, and no change of members under way. Raft's ticks then
// change nothing: no heartbeat has anyone to go to, a quorum is this
// replica alone (CheckQuorum always finds it), no election can be called,
// and a ReadIndex round or a proposal completes without them. Tick skips
// them, so an idle lone Manager wakes for its own timers only; they resume
// with the first change of members, and every timing bound that involves
// another replica is unchanged.
func (r *Replica) alone() bool {
	c := &r.conf
	return r.role == raft.StateLeader && !r.confPending && len(c.Voters) == 1 && c.Voters[0] == r.cfg.ID &&
		len(c.Learners) == 0 && len(c.VotersOutgoing) == 0 && len(c.LearnersNext) == 0
}

// Tick runs Raft's ticks due by now and the Core's and Feed's timers. The
// Lookup messages of a push round it runs go out with the next Ready.
func (r *Replica) Tick(now time.Time) {
	if r.alone() {
		r.nextTick = now.Add(r.cfg.Settings.RaftTick) // where they resume from
	}
	for ticks := 0; !now.Before(r.nextTick); ticks++ {
		if ticks < 4*r.cfg.Settings.ElectionTicks { // a long pause is not a storm of ticks
			r.rn.Tick()
		}
		r.nextTick = r.nextTick.Add(r.cfg.Settings.RaftTick)
		if !now.Before(r.nextTick) && ticks >= 4*r.cfg.Settings.ElectionTicks {
			r.nextTick = now.Add(r.cfg.Settings.RaftTick)
		}
	}
	r.feed.PushDue(now)
	if !now.Before(r.nextFeedTick) {
		r.feed.Tick(now)
		r.nextFeedTick = now.Add(time.Second)
	}
	if r.core != nil && !now.Before(r.core.NextDeadline()) {
		r.core.Tick(now)
	}
	if r.role == raft.StateFollower && r.lead != 0 && !now.Before(r.nextRead) {
		r.askRead(now)
	}
	r.promote(now)
	r.rl.tick(now)
	r.flush(now)
}

// flush proposes the Core's latest changes as one entry and holds its Owner
// messages until that entry commits (the first failover rule). Ready calls
// it, so a round of steps is one entry; Tick and a takeover call it too.
// A Core whose replica Raft has deposed since the last Advance proposes
// nothing: a follower forwards proposals to its leader, whose own Core was
// built without this round. Advance drops the Core and its round.
func (r *Replica) flush(now time.Time) {
	if !r.leading() {
		return
	}
	rd := r.core.Ready()
	if len(rd.Changes) == 0 && len(rd.Owners) == 0 {
		return
	}
	if len(rd.Changes) == 0 && !r.cfg.Break.AnswerBeforeCommit {
		r.confirm(rd.Owners)
		return
	}
	r.prop++
	b := batch{Node: r.cfg.ID, Term: r.coreTerm, Seq: r.prop, Changes: rd.Changes}
	if err := r.rn.Propose(encodeBatch(b)); err != nil {
		// The working state now holds changes the log never will: drop
		// the Core and take over again once what is in flight has applied.
		r.stats.Dropped += uint64(len(rd.Owners))
		r.core = nil
		return
	}
	r.stats.Proposals++
	if r.cfg.Break.AnswerBeforeCommit {
		r.owners = append(r.owners, rd.Owners...)
		return
	}
	h := &heldRound{msgs: rd.Owners}
	r.pending[b.Seq] = h
	r.held = append(r.held, h)
}

// confirm holds the messages of a round that changed nothing — renewals,
// the bulk of a Manager's work — until a ReadIndex round started now
// proves this replica still leads (a heartbeat round to a quorum, no log
// entry and no disk write). That is as strong as the commit of an entry
// proposed now, which is what the first failover rule asks: no response
// leaves a replica that a new leader may already have replaced. Rounds are
// sent in the order they were made, so the messages also wait for every
// earlier round's commit (one may repeat an earlier round's grant).
func (r *Replica) confirm(msgs []lease.OwnerMessage) {
	r.readSeq++
	ctx := fmt.Sprintf("o/%d/%d/%d", r.cfg.ID, r.started.UnixNano(), r.readSeq) // unique at this replica
	r.held = append(r.held, &heldRound{msgs: msgs, ctx: ctx})
	r.rn.ReadIndex([]byte(ctx))
}

// release sends the held rounds that are proven, in the order they were
// made, up to the first that is not.
func (r *Replica) release() {
	for len(r.held) > 0 {
		h := r.held[0]
		if !h.ok || r.applied < h.index || r.rl.withholds(h.index) {
			return
		}
		r.rl.acked = max(r.rl.acked, h.index)
		r.held = r.held[1:]
		r.owners = append(r.owners, h.msgs...)
		if h.ctx != "" {
			r.stats.Confirmations++
		}
	}
}

// Ready returns everything the replica asks its driver to do now, and
// false if there is nothing: it first proposes the Core's latest round
// (flush), so the steps since the last call are in it. The driver does it
// in the order Ready's fields are listed, then calls Advance; Drive is that
// loop. The Ready must be handed to Advance before Ready is called again.
func (r *Replica) Ready(now time.Time) (Ready, bool) {
	r.flush(now)
	var rd Ready
	if r.rn.HasReady() {
		rr := r.rn.Ready()
		rd.raft = &rr
		rd.HardState, rd.Entries, rd.Snapshot = rr.HardState, rr.Entries, rr.Snapshot
		rd.Messages, rd.CommittedEntries = rr.Messages, rr.CommittedEntries
	}
	rd.Compacted, r.compacted = r.compacted, raftpb.Snapshot{}
	rd.Peers, r.peerChanges = r.peerChanges, nil
	rd.Owners, r.owners = r.owners, nil
	rd.Lookups = r.feed.Ready()
	if lm := r.rl.take(); len(lm) > 0 {
		rd.Messages = append(slices.Clip(rd.Messages), lm...)
	}
	ok := rd.raft != nil || len(rd.Messages) > 0 || !raft.IsEmptySnap(rd.Compacted) || len(rd.Peers) > 0 || len(rd.Owners) > 0 || len(rd.Lookups) > 0
	return rd, ok
}

// Advance tells the replica that rd has been persisted, sent and answered
// (Drive has also recorded it in the MemoryStorage), and applies it at now: it installs a snapshot, applies the committed
// entries to the State, takes over or steps down as leadership changes,
// and queues for the next Ready what that releases (Owner messages whose
// proof arrived, pushes to Lookups, replicas added or removed, a snapshot
// it took).
func (r *Replica) Advance(now time.Time, rd Ready) error {
	if rd.raft == nil {
		return nil
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		st, err := lease.DecodeState(rd.Snapshot.Data, r.cfg.Settings.Lease.Timing.LogRetention)
		if err != nil {
			return err
		}
		before := r.st.Peers()
		r.st = st
		r.feed.Rebase(st)
		r.applied, r.snapshot, r.conf = rd.Snapshot.Metadata.Index, rd.Snapshot.Metadata.Index, rd.Snapshot.Metadata.ConfState
		for _, id := range slices.Sorted(maps.Keys(st.Peers())) {
			r.peerChanges = append(r.peerChanges, Peer{ID: id, Addr: st.Peers()[id], ReadReplica: st.ReadReplica(id)})
		}
		r.rl.membersChanged(now, before)
	}
	if ss := rd.raft.SoftState; ss != nil {
		r.lead, r.role = ss.Lead, ss.RaftState
	}
	for _, rs := range rd.raft.ReadStates {
		for _, h := range r.held {
			if h.ctx != "" && h.ctx == string(rs.RequestCtx) {
				h.ok, h.index = true, rs.Index
			}
		}
		if at, ok := r.reads[string(rs.RequestCtx)]; ok {
			delete(r.reads, string(rs.RequestCtx))
			if at.After(r.readAt) {
				r.readAt, r.readIndex = at, rs.Index
			}
		}
	}
	term := r.rn.BasicStatus().Term
	if r.role != raft.StateLeader || term != r.coreTerm {
		r.stepDown()
	}
	if term != r.coreTerm && r.role == raft.StateLeader {
		r.coreTerm, r.resumes, r.termSeen = term, 0, false
	}
	for _, e := range rd.CommittedEntries {
		if err := r.apply(now, e); err != nil {
			return err
		}
	}
	r.rn.Advance(*rd.raft)
	r.campaignAlone()
	if r.role == raft.StateLeader && r.core == nil && r.termSeen && len(r.pending) == 0 {
		// The second failover rule: take over only with every committed
		// entry applied, and reserve everything (Resume).
		r.resumes++
		r.core = lease.ResumeBroken(r.cfg.Settings.Lease, r.cfg.Break, r.st, r.coreTerm<<32|r.resumes<<24, now)
		r.stats.Takeovers++
		r.rl.takeover(now)
		r.flush(now)
	}
	r.rl.raiseVisible(now)
	r.release()
	r.feed.Changed(now)
	// A snapshot is also taken when a change of the members is applied
	// after the log was compacted: a replica just added is sent the
	// snapshot, not the log, and Raft throws away a snapshot whose
	// configuration does not name the replica that receives it — one
	// taken before the change would keep the learner from ever catching up.
	confSnap := r.confApplied && r.snapshot > 0 && r.applied > r.snapshot
	r.confApplied = false
	if r.applied-r.snapshot >= r.cfg.Settings.SnapshotEntries || confSnap {
		snap, err := r.ms.CreateSnapshot(r.applied, &r.conf, r.st.Encode())
		if err != nil {
			return err
		}
		if err := r.ms.Compact(r.applied); err != nil {
			return err
		}
		r.snapshot = r.applied
		r.stats.Snapshots++
		r.compacted = snap
	}
	return nil
}

// campaignAlone starts an election at once in a group of one: it needs no
// election timeout to know it leads. (Raft refuses while configuration
// changes are unapplied; Advance calls it again.)
func (r *Replica) campaignAlone() {
	if r.role == raft.StateLeader {
		return
	}
	st := r.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.Lead != 0 {
		return
	}
	voters := r.rn.Status().Config.Voters.IDs()
	if _, self := voters[r.cfg.ID]; self && len(voters) == 1 {
		_ = r.rn.Campaign() // only fails for a learner
	}
}

func (r *Replica) stepDown() {
	r.confPending = false
	clear(r.learners)
	for _, h := range r.held {
		r.stats.Dropped += uint64(len(h.msgs))
	}
	clear(r.pending)
	r.held = nil
	r.core = nil
}

// apply applies committed entry e: to the State (applyEntry), to Raft's
// configuration, and to the rounds waiting for their entry to commit.
func (r *Replica) apply(now time.Time, e raftpb.Entry) error {
	if e.Index <= r.applied {
		return nil
	}
	r.applied = e.Index
	r.stats.Applied++
	if e.Type == raftpb.EntryNormal && e.Term == r.coreTerm && r.role == raft.StateLeader {
		r.termSeen = true
	}
	var before map[uint64]string
	if e.Type == raftpb.EntryConfChange {
		before = maps.Clone(r.st.Peers())
	}
	a, err := applyEntry(r.st, now, e)
	if err != nil {
		return err
	}
	if a.cc != nil {
		r.conf = *r.rn.ApplyConfChange(*a.cc)
		r.confApplied = true
		r.confPending = false
		r.rl.membersChanged(now, before) // count every holder for a lease again, and those that left
	}
	if a.peer != nil {
		r.peerChanges = append(r.peerChanges, *a.peer)
	}
	if b := a.batch; b != nil {
		if h, ok := r.pending[b.Seq]; ok && b.Node == r.cfg.ID && b.Term == r.coreTerm {
			delete(r.pending, b.Seq)
			h.ok, h.index = true, e.Index
		}
	}
	return nil
}

// quietLogger drops Raft's debug and info chatter and keeps warnings.
type quietLogger struct{}

func (quietLogger) Debug(...any)                   {}
func (quietLogger) Debugf(string, ...any)          {}
func (quietLogger) Info(...any)                    {}
func (quietLogger) Infof(string, ...any)           {}
func (quietLogger) Warning(...any)                 {}
func (quietLogger) Warningf(string, ...any)        {}
func (quietLogger) Error(v ...any)                 {}
func (quietLogger) Errorf(string, ...any)          {}
func (quietLogger) Fatal(v ...any)                 { panic(fmt.Sprint(v...)) }
func (quietLogger) Fatalf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
func (quietLogger) Panic(v ...any)                 { panic(fmt.Sprint(v...)) }
func (quietLogger) Panicf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
