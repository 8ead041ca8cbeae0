package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
	"github.com/leasehold/leasehold/rebalance"
)

const namespace = protocol.DefaultNamespace

// base is the virtual wall time every local clock is offset from.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type kind int

const (
	managerNode kind = iota
	ownerNode
	lookupNode
)

type node struct {
	kind   kind
	idx    int // index among nodes of its kind
	pos    int // index in Sim.nodes
	name   string
	up     bool
	inc    uint64 // runs so far
	rate   float64
	offset time.Duration
	gen    uint64 // timer generation: a timer event of an older one is stale
	part   int    // partition group; nodes in different groups cannot talk

	// A Manager replica, and its Raft log: the storage survives a crash
	// (a data directory), unless Config.ManagerLosesState.
	rep     *replica.Replica
	store   *raft.MemoryStorage
	rid     uint64   // its Raft ID: idx+1, or a new one once replaced (members.go)
	joining bool     // started empty to be added to the group, not founding it
	inbox   []*event // Raft messages delivered, not yet stepped (step.go)
	waking  bool     // a stepInbox is scheduled
	hadCore bool     // rep had taken over after its last step
	plans   uint64   // rebalancing rounds its Core had planned after its last step
	forgot  uint64   // Owners its Core had forgotten after its last step

	// Owners and Lookups talk to one replica at a time, as their runtimes
	// do: the target. A message from another replica finds no stream open.
	target int       // index in Sim.mgrs
	heard  time.Time // local time the target last sent something (or was chosen)

	own     *owner.Core
	look    *lookup.Core
	thin    *thinLookup // instead of look, with Config.ThinLookups
	session uint64      // the Lookup's session with the Manager

	app      app  // an Owner's application (app.go)
	draining bool // an Owner shutting down gracefully (Config.DrainEvery)

	// A stalled node is alive but answers nothing: what reaches it waits in
	// stallQ until it resumes (stall.go). A ghost is an earlier run of an
	// Owner still running beside the run that took its ID (ghost.go).
	stalled bool
	stallQ  []func()
	ghost   bool
}

// refusal is a replica's answer to a client it will not serve (a
// *replica.NotLeaderError): the client's stream ends, and the refusal names
// the leader the replica knows, by index in Sim.mgrs (-1: none).
type refusal struct{ leader int }

// local is the node's clock reading at virtual real time t.
func (n *node) local(t time.Duration) time.Time {
	return base.Add(n.offset + time.Duration(float64(t)*n.rate))
}

// real is the earliest virtual real time at which the node's clock reads at
// least l.
func (n *node) real(l time.Time) time.Duration {
	return time.Duration(math.Ceil(float64(l.Sub(base)-n.offset) / n.rate))
}

type evKind int

const (
	evDeliver evKind = iota
	evTimer
	evFunc
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	to   int
	from int
	msg  any
	gen  uint64 // for a timer: the node's timer generation; for a MsgSnap: the sender's run
	// toInc is, for a message from a Manager replica to a Lookup, the
	// Lookup's incarnation when it was sent: the stream it goes on closes
	// with that process.
	toInc uint64
	fn    func()
}

// queue is the event queue: a binary min-heap ordered by (at, seq), a
// total order, so events pop in the same order whatever the heap's shape.
// Each slot carries its event's key, so that sifting compares without
// following a pointer: with hundreds of thousands of events queued, those
// pointer chases (cache misses) were most of the heap's time.
type queue []qitem

type qitem struct {
	at  time.Duration
	seq uint64
	e   *event
}

func (a qitem) less(b qitem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *queue) push(e *event) {
	*q = append(*q, qitem{e.at, e.seq, e})
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *queue) pop() *event {
	h := *q
	top := h[0].e
	n := len(h) - 1
	h[0] = h[n]
	h[n] = qitem{}
	h = h[:n]
	*q = h
	q.down(0)
	return top
}

func (q queue) down(i int) {
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q[r].less(q[l]) {
			m = r
		}
		if !q[m].less(q[i]) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

// init restores the heap order after the slice was changed at will.
func (q queue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// Sim is one simulated run.
type Sim struct {
	cfg         Config
	sizes       sizes
	compacts    compactPushes
	rng         *rand.Rand
	now         time.Duration
	q           queue
	seq         uint64
	end         time.Duration // the run's last instant
	compactAt   int           // compact the queue when it grows to this many events
	compactions int
	nodes       []*node
	mgrs        []*node // the Manager replicas, ID i+1 at index i
	peers       []replica.Peer
	byAddr      map[string]int   // replica address → index in mgrs
	byRID       map[uint64]*node // Raft ID → replica
	tick        time.Duration    // the replicas' Raft tick
	owners      []*node
	ghosts      []*node // earlier runs of Owners still running (ghost.go)
	lookups     []*node
	byOwner     map[string]*node
	bySess      map[uint64]*node
	faulting    bool
	epoch       uint64
	nextPart    int
	chk         *checker
	stats       Stats
	stopped     bool               // Control.Stop was called
	hot         []rebalance.HotKey // Config.Workload's hottest keys, requests/s

	// Control.OnTableLSN and OnLookupLSN.
	onTable  func(keyspace.LSN)
	onLookup func(int, keyspace.LSN)
	tableLSN keyspace.LSN

	// Quorum read leases (readlease.go).
	lc     leaseCheck
	live   liveCheck                  // write liveness (liveness.go)
	mem    memberships                // membership changes (members.go)
	oneWay map[[2]int]bool            // replica index pairs (from, to) cut one way
	asked  map[ownerSeq]time.Duration // Owner requests in flight, for Config.OwnerLatency
	// Config.WriteLatency: when the leader appended each entry not yet
	// acknowledged, and the highest acknowledged.
	proposed map[uint64]time.Duration
	ackedTo  uint64
}

// replicated reports whether the Manager is a group of several replicas.
func (s *Sim) replicated() bool { return len(s.mgrs) > 1 }

// Stats describes a run.
type Stats struct {
	Virtual         time.Duration
	Events          int
	OwnerCrashes    int
	LookupCrashes   int
	ManagerRestarts int // Manager replica crashes (each restarts)
	LeaderCrashes   int // of them, crashes of the leader
	Partitions      int
	// LeaderIsolations counts the partitions that left the leader without
	// a majority of the replicas on its side.
	LeaderIsolations int
	Takeovers        int // a replica became leader and took over (Resume)
	Messages         int // delivered or not
	Dropped          int
	Duplicated       int
	LeaseMessages    int   // Owner ↔ Manager
	LeaseBytes       int64 // Owner ↔ Manager, estimated wire size
	SyncBytes        int64 // Lookup ↔ Manager, estimated wire size
	// CompactPushes counts the pushes full Lookups read in the compact
	// form (compactPushes), FromCopyChanges the changes of those made for
	// the copy they reached whose End the copy gave, and
	// OwnerFromCopyChanges those whose Owner it gave.
	CompactPushes        int
	FromCopyChanges      int
	OwnerFromCopyChanges int
	RaftMessages         int // between replicas
	// RaftBatches counts the batches of more than one Raft message a
	// replica stepped between two drives (step.go), LongestBatch the
	// longest.
	RaftBatches, LongestBatch int
	Snapshots                 int // Raft snapshots taken (log compactions)
	SnapshotsSent             int // MsgSnap: a replica too far behind was sent the State whole
	Refusals                  int // NotLeader answers to Owners and Lookups
	// Planned moves (Config.Migration): handovers the Owners were asked
	// for, those whose state arrived and was acknowledged, those the
	// application gave up, the migrated grants taken up (each checked to
	// carry the state it names), and the messages between Owners.
	Handovers        int
	HandoversDone    int
	HandoversGivenUp int
	MigratedGrants   int
	Transfers        int
	Drains           int // graceful Owner restarts begun (Config.DrainEvery)
	Plans            int // rebalancing rounds planned (Config.Rebalance)
	OwnersForgotten  int // Owner records the leaders forgot (no member, owed nothing)
	LossEvents       int // unmigrated LGN changes recorded by the Manager
	Notified         int // (loss, lookup) pairs notified in time
	WorstDelay       time.Duration
	Bound            time.Duration
	Segments         int // lease-table segments at the end
	ViewBytes        int // a Lookup's copy at the end

	// Stalls counts the nodes stalled (Config.StallEvery), LeaderStalls
	// those that were the leader; Duplicates the second processes started
	// with a live Owner's ID (Config.DuplicateEvery); LateHandovers the
	// handovers an Owner reported done at or after its deadline.
	Stalls, LeaderStalls, Duplicates, LateHandovers int
	// Deposals counts the leaders stalled past an election with a holder
	// cut off from their successor (ReadLeaseConfig.DeposeEvery).
	Deposals      int
	LookupNotices int // loss notifications the Lookups raised
	// LookupPolls counts the SyncRequests the Lookups sent; Heartbeats the
	// pushes with an empty delta that vouch for freshness, and Vouching
	// the other pushes that do (docs/protocol.md, "Heartbeats").
	LookupPolls, Heartbeats, Vouching int
}

// MessagesPerOwnerMinute is the Owner ↔ Manager message rate per owner.
func (s Stats) MessagesPerOwnerMinute(owners int) float64 {
	return float64(s.LeaseMessages) / float64(owners) / s.Virtual.Minutes()
}

// Result is the outcome of a run.
type Result struct {
	Seed      uint64
	Violation *Violation // the first checker violation, if any
	Stats     Stats
	Leases    LeaseStats // with Config.ReadLease

	compactions int // times the event queue dropped dead timers (tests)
}

// Violation is a broken guarantee, with when and how.
type Violation struct {
	Checker string // "single copy", "continuity", "recovery notification", "convergence"
	At      time.Duration
	Detail  string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s violated at %s: %s", v.Checker, v.At, v.Detail)
}

// Run runs cfg to the end or to the first violation.
func Run(cfg Config) Result {
	if cfg.ThinLookups && !cfg.NoChecks {
		panic("sim: ThinLookups requires NoChecks: the checkers read every Lookup's copy")
	}
	if !cfg.Unvalidated {
		if err := cfg.Timing.Validate(); err != nil {
			panic(err)
		}
	}
	if cfg.SettleTime == 0 {
		cfg.SettleTime = ConvergenceBound(cfg.Timing)
	}
	defer seedRaftRand(cfg.Seed)()
	s := &Sim{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x1ea5e401d)),
		byOwner: map[string]*node{},
		bySess:  map[uint64]*node{},
		byAddr:  map[string]int{},
		byRID:   map[uint64]*node{},
		tick:    raftTick(cfg.Timing),
		epoch:   1,
		end:     cfg.FaultTime + cfg.SettleTime,
	}
	s.compactAt = s.queueFloor()
	s.chk = newChecker(s)
	s.chk.off = cfg.NoChecks
	s.chk.noWrites = cfg.NoWriteCheck
	if cfg.Workload != nil {
		s.hot = cfg.Workload.Top(hotKeys, cfg.Rate)
	}
	for i := range max(cfg.Managers, 1) {
		n := s.addNode(managerNode, i, fmt.Sprintf("manager-%d", i+1))
		s.mgrs = append(s.mgrs, n)
		s.peers = append(s.peers, replica.Peer{ID: uint64(i + 1), Addr: n.name})
		n.rid = uint64(i + 1)
		s.byRID[n.rid] = n
		s.byAddr[n.name] = i
	}
	for i := range cfg.Owners {
		n := s.addNode(ownerNode, i, fmt.Sprintf("owner-%02d", i))
		s.owners = append(s.owners, n)
		s.byOwner[n.name] = n
	}
	for i := range cfg.Lookups {
		s.lookups = append(s.lookups, s.addNode(lookupNode, i, fmt.Sprintf("lookup-%02d", i)))
	}
	s.faulting = true
	for _, n := range s.nodes {
		if cfg.StartSpread > 0 && n.kind != managerNode {
			s.at(s.uniform(0, cfg.StartSpread), func() {
				if !n.up {
					s.start(n)
				}
			})
			continue
		}
		s.start(n)
	}
	if s.replicated() {
		s.chk.bound += stalePart(cfg.Timing, s.mgrs[0].rep.StaleBound())
	}
	s.scheduleFaults()
	s.at(cfg.FaultTime, s.stopFaults)
	end := cfg.FaultTime + cfg.SettleTime
	s.scheduleLeases(end)
	if !cfg.NoChecks {
		s.every(s.chk.bound/8, end, s.chk.deadlines)
	}
	if cfg.Script != nil {
		cfg.Script(&Control{s: s, end: end})
	}
	for len(s.q) > 0 && s.chk.violation == nil && !s.stopped {
		e := s.q.pop()
		if e.at > end {
			break
		}
		s.now = e.at
		s.stats.Events++
		s.handle(e)
	}
	s.now = end
	if s.chk.violation == nil {
		s.chk.deadlines()
	}
	if s.chk.violation == nil {
		s.chk.converged()
	}
	s.stats.Virtual = end
	s.stats.Bound = s.chk.bound
	if t := s.furthest(); t != nil {
		s.stats.Segments = t.Table(namespace).Len()
	}
	for _, l := range s.lookups {
		if l.up && l.look != nil {
			s.stats.ViewBytes = l.look.View().Bytes()
			break
		}
	}
	s.lc.stats.MaxAcked = s.lc.maxAcked
	if s.leasesOn() && s.cfg.ReadLease.History != nil {
		s.cfg.ReadLease.History(s.lc.history)
	}
	return Result{Seed: cfg.Seed, Violation: s.chk.violation, Stats: s.stats, Leases: s.lc.stats, compactions: s.compactions}
}

// raftTick is the replicas' Raft tick: a tenth of the renewal period, at
// most 100 ms. The server's default is the smaller of 100 ms and Renew/20:
// the same in production, half this in the fast profile, where twice the
// ticks would cost the simulation more than they test. With 10 ticks to an
// election, a leader's failure is noticed within 1–2 s in production and
// 0.5–1 s in the fast profile, inside an OwnerLease.
func raftTick(t protocol.Timing) time.Duration {
	return min(t.Renew/10, 100*time.Millisecond)
}

// electionTicks is Settings.ElectionTicks, the production default.
const electionTicks = 10

// snapshotEntries is Settings.SnapshotEntries unless
// Config.SnapshotEntries says otherwise.
const snapshotEntries = 10

// stalePart is what a replicated Manager adds to the notification bound:
// StaleBound × (1 + 2·MaxDrift), for an election timeout E (StaleBound).
//
// The single Manager's bound rests on this: an answer to a request sent
// after the loss was recorded carries the loss. With replicas, a Lookup may
// be answered by a replica whose applied table lags the newest committed
// one; if every answer to a request sent S after a change carries it, the
// argument goes through with the change recorded S later, and the bound
// grows by S (in real time):
//
//   - a follower serves only while applied ≥ the index of a ReadIndex round
//     it asked less than E ago on its clock: everything committed before it
//     asked is in its answers, so S ≤ E·(1+MaxDrift);
//   - a leader that has taken over serves until CheckQuorum deposes it: at
//     most 2E on its clock after it lost its majority at real time I. A
//     newer leader is elected only after a follower counted E on its own
//     clock without hearing from it, so it records nothing before I plus
//     E/(1+MaxDrift) in the deposed leader's clock: S ≤ 2E − E/(1+d) =
//     E(1+2d)/(1+d), at most E(1+2d) on any clock.
//
// A change becomes an obligation when it is first applied anywhere, which
// is after it committed.
func stalePart(t protocol.Timing, stale time.Duration) time.Duration {
	return time.Duration(float64(stale) * (1 + 2*t.MaxDrift))
}

// furthest returns the applied State of the replica whose table is
// furthest ahead: every replica applies the same log, so LSNs agree and the
// furthest table is the committed one.
func (s *Sim) furthest() *lease.State {
	var best *lease.State
	for _, m := range s.mgrs {
		if m.rep == nil || m.rep.State().Table(namespace) == nil {
			continue
		}
		st := m.rep.State()
		if best == nil || st.Epoch() > best.Epoch() ||
			(st.Epoch() == best.Epoch() && st.Table(namespace).LSN() > best.Table(namespace).LSN()) {
			best = st
		}
	}
	return best
}

// leader returns the replica that leads: the one that has taken over (of
// two, the one of the later term: the other is deposed and does not know
// it yet), else one Raft calls leader, else nil.
func (s *Sim) leader() *node {
	var best *node
	var term uint64
	for _, m := range s.mgrs {
		if !m.up || m.rep.Core() == nil {
			continue
		}
		if t := m.rep.Status().Term; best == nil || t > term {
			best, term = m, t
		}
	}
	if best != nil {
		return best
	}
	for _, m := range s.mgrs {
		if m.up && s.leads(m) {
			return m
		}
	}
	return nil
}

// leads reports whether the replica believes it is Raft's leader.
func (s *Sim) leads(n *node) bool {
	if n.rep == nil {
		return false
	}
	id, _ := n.rep.Leader()
	return id == n.rep.ID()
}

// clock reads the real clock that times Manager calls, if anyone listens.
func (s *Sim) clock() time.Time {
	switch {
	case s.cfg.Probe == nil:
		return time.Time{}
	case s.cfg.Stopwatch != nil:
		return s.cfg.Stopwatch()
	}
	return time.Now()
}

// work reports the leader's work that took took.
func (s *Sim) work(n *node, took time.Duration) {
	if s.cfg.Probe != nil && s.leads(n) {
		s.cfg.Probe.ManagerWork(s.now, took)
	}
}

func (s *Sim) addNode(k kind, idx int, name string) *node {
	n := &node{kind: k, idx: idx, pos: len(s.nodes), name: name, rate: 1}
	s.nodes = append(s.nodes, n)
	return n
}

// at schedules fn at virtual time t.
func (s *Sim) at(t time.Duration, fn func()) {
	s.push(&event{at: t, kind: evFunc, fn: fn})
}

// every runs fn every d until end.
func (s *Sim) every(d, end time.Duration, fn func()) {
	var tick func()
	tick = func() {
		fn()
		if s.now+d <= end {
			s.at(s.now+d, tick)
		}
	}
	s.at(d, tick)
}

func (s *Sim) push(e *event) {
	s.seq++
	e.seq = s.seq
	s.q.push(e)
	if len(s.q) >= s.compactAt {
		s.compact()
	}
}

// minCompact is the queue length below which compact is not worth it
// (Config.queueFloor replaces it in tests).
const minCompact = 1 << 16

// compact drops the timer events that can no longer fire: every step of a
// node sets a new timer (after) and leaves its previous one in the queue,
// to be popped and ignored when its time comes (handle: its gen is old).
// With 100,000 Lookups, each pushed a change every few hundred
// milliseconds while their timers lie a poll (30 s) ahead, those dead
// timers were millions of events, and the heap's work on them most of the
// run's time. The events that stay keep their (at, seq), which alone orders
// the queue, so the run pops the same live events in the same order as
// without compaction. A dropped timer that the run would have popped (at
// or before its end) still counts in Stats.Events, which stays the same.
// It runs when the queue has doubled since the last compaction, so its
// cost is amortised over the pushes.
func (s *Sim) queueFloor() int {
	if s.cfg.queueFloor > 0 {
		return s.cfg.queueFloor
	}
	return minCompact
}

func (s *Sim) compact() {
	s.compactions++
	q := s.q[:0]
	for _, it := range s.q {
		e := it.e
		if e.kind == evTimer && e.gen != s.nodes[e.to].gen {
			if e.at <= s.end {
				s.stats.Events++
			}
			continue
		}
		q = append(q, it)
	}
	clear(s.q[len(q):])
	s.q = q
	s.q.init()
	s.compactAt = max(2*len(s.q), s.queueFloor())
}

func (s *Sim) handle(e *event) {
	switch e.kind {
	case evFunc:
		e.fn()
	case evTimer:
		n := s.nodes[e.to]
		if !n.up || e.gen != n.gen || n.stalled {
			return // a stalled node ticks when it resumes
		}
		s.tickNode(n)
	case evDeliver:
		n, from := s.nodes[e.to], s.nodes[e.from]
		if !n.up || from.part != n.part || s.cut(from, n) {
			s.stats.Dropped++
			s.snapshotDone(e, false)
			return
		}
		if from.kind == managerNode && n.kind != managerNode && from.idx != n.target {
			// The client has moved to another replica: the stream this
			// came on is closed.
			s.stats.Dropped++
			return
		}
		if from.kind == managerNode && n.kind == lookupNode && e.toInc != n.inc {
			// Sent on a stream of the Lookup's previous process, which
			// closed when it crashed: a push or heartbeat on it names a
			// request of that process's session, not of this one. (Lease
			// messages to an Owner's previous process are delivered: the
			// lease protocol is built for a network that delivers stale
			// messages, and its incarnations filter them, C§2.3.2.)
			s.stats.Dropped++
			return
		}
		if n.stalled {
			n.stallQ = append(n.stallQ, func() { s.deliver(n, e) })
			return
		}
		s.deliver(n, e)
	}
}

func (s *Sim) tickNode(n *node) {
	now := n.local(s.now)
	switch n.kind {
	case managerNode:
		t0 := s.clock()
		n.rep.Tick(now) // after sends the coalesced push round it runs
		s.work(n, s.clock().Sub(t0))
	case ownerNode:
		s.checkTarget(n, now, s.cfg.Timing.OwnerQuiet())
		n.own.Tick(now)
	case lookupNode:
		s.checkTarget(n, now, s.cfg.Timing.LookupQuiet())
		if n.thin != nil {
			n.thin.tick(now)
		} else {
			n.look.Tick(now)
		}
	}
	s.after(n)
}

// checkTarget moves a client that has heard nothing from its replica for
// quiet on to the next one, as the runtimes do when a stream breaks. An
// Owner hears an answer every Renew and a Lookup every Sync, so a client
// moves on at its first timer after an answer failed to come: an Owner
// whose leader died reaches the next leader within about 3×Renew of its
// last answer (one hop may be a refusal naming the leader), inside its
// OwnerLease of 4×Renew.
func (s *Sim) checkTarget(n *node, now time.Time, quiet time.Duration) {
	if s.cfg.Break != nil && s.cfg.Break.NoStreamLiveness {
		return // the stream stays open, whether answers come or not
	}
	if s.replicated() && now.Sub(n.heard) > quiet {
		s.retarget(n, now, -1)
	}
}

// retarget points a client at the leader a refusal named, or else at the
// next replica.
func (s *Sim) retarget(n *node, now time.Time, leader int) {
	if leader >= 0 && leader != n.target {
		n.target = leader
	} else {
		n.target = (n.target + 1) % len(s.mgrs)
	}
	n.heard = now
	s.trace(n, "now talks to %s", s.mgrs[n.target].name)
}

// traceNode names a node whose messages are printed to stdout as the run
// goes (the -sim.trace flag of the tests, for replaying one seed). It is set
// before any run starts and only read afterwards.
var traceNode string

func (s *Sim) trace(n *node, format string, args ...any) {
	if traceNode != "" && n.name == traceNode {
		fmt.Printf("%12s %s: %s\n", s.now, n.name, fmt.Sprintf(format, args...))
	}
}

func (s *Sim) deliver(n *node, e *event) {
	now := n.local(s.now)
	from := s.nodes[e.from]
	if m, ok := e.msg.(*protocol.SyncResponse); ok && traceNode != "" && n.look != nil {
		s.trace(n, "recv id=%d epoch=%d snap=%v from=%d to=%d changes=%d viewLSN=%d", m.ID, m.Epoch, m.Update.Snapshot, m.Update.From, m.Update.To, len(m.Update.Changes), n.look.View().LSN())
	}
	if m, ok := e.msg.(refusal); ok {
		// The replica will not serve this client: follow its hint. The
		// request it refused is lost; the core resends on its own timers.
		s.trace(n, "refused by %s (leader %d)", from.name, m.leader)
		s.retarget(n, now, m.leader)
		return
	}
	switch n.kind {
	case managerNode:
		if s.cfg.Probe != nil && s.leads(n) {
			s.cfg.Probe.ManagerTraffic(s.now, s.sizes.of(e.msg), false)
		}
		if m, ok := e.msg.(raftpb.Message); ok {
			if m.To != n.rid {
				// To the process this one replaced (members.go): its
				// connections closed with it.
				s.stats.Dropped++
				s.snapshotDone(e, false)
				return
			}
			s.queueRaft(n, e) // stepped in batches, as the server does (step.go)
			return
		}
		var err error
		t0 := s.clock()
		switch m := e.msg.(type) {
		case *protocol.LeaseRequest:
			s.trace(n, "recv req from %s seq=%d", m.Owner, m.Seq)
			err = n.rep.StepLease(now, m)
		case *protocol.SyncRequest:
			if s.cfg.NoHeartbeats {
				c := *m
				c.Heartbeats = false
				m = &c
			}
			before := s.leaseSyncs(n)
			if err = n.rep.StepSync(now, from.session, m); err == nil {
				s.leaseSynced(n, before)
			}
		}
		s.work(n, s.clock().Sub(t0))
		if nl := (*replica.NotLeaderError)(nil); errors.As(err, &nl) {
			leader, ok := s.byAddr[nl.Leader]
			if !ok {
				leader = -1
			}
			s.trace(n, "refuse %s (leader %q)", from.name, nl.Leader)
			s.send(n, from, refusal{leader: leader})
		} else if errors.Is(err, replica.ErrNoEpoch) {
			// The first leader, before its first entry commits: the
			// server answers Unavailable, and the client tries elsewhere.
			s.send(n, from, refusal{leader: -1})
		} else if err != nil {
			panic(fmt.Sprintf("%s rejected a well-formed message: %v", n.name, err))
		}
	case ownerNode:
		if from.kind == ownerNode {
			s.appDeliver(n, from, e.msg)
			break
		}
		n.heard = now
		m := e.msg.(*protocol.LeaseResponse)
		s.noteOwnerAnswer(n, m)
		s.trace(n, "recv resp from %s epoch=%d seq=%d ack=%d inc=%d leases=%d renewHeld=%v (my inc=%d)", from.name, m.Epoch, m.Seq, m.AckSeq, m.Incarnation, len(m.Leases), m.RenewHeld, n.inc)
		before := s.chk.heldNums(n)
		n.own.Step(now, m)
		s.chk.ownerStepped(n, before)
	case lookupNode:
		n.heard = now
		m := e.msg.(*protocol.SyncResponse)
		if n.thin == nil {
			m = s.compacts.of(m, s.broken().MarkFromCopyBlind) // as the Manager pushes to a Lookup that says compact_changes
		}
		if n.thin != nil {
			n.thin.step(now, m)
		} else {
			before := n.look.View().LSN()
			fits := m != e.msg && m.Epoch == n.look.Epoch() && m.Namespace == namespace && m.Update.From == before
			n.look.Step(now, m)
			if m != e.msg {
				s.stats.CompactPushes++
				if fits {
					// Made for exactly this copy: it must apply.
					if n.look.View().LSN() != m.Update.To {
						s.chk.fail("compact fit", "%s refused a compact push %d..%d made for its copy at LSN %d (epoch %d)",
							n.name, m.Update.From, m.Update.To, before, m.Epoch)
					}
					for _, c := range m.Update.Changes {
						if c.FromCopy {
							s.stats.FromCopyChanges++
						}
						if c.OwnerFromCopy {
							s.stats.OwnerFromCopyChanges++
						}
					}
				}
			}
			if s.onLookup != nil && n.look.View().LSN() != before {
				s.onLookup(n.idx, n.look.View().LSN())
			}
		}
	}
	s.after(n)
}

// after sends what the node's core asks for, hands its upcalls to the
// checkers, and sets its timer.
func (s *Sim) after(n *node) {
	var deadline time.Time
	switch n.kind {
	case managerNode:
		deadline = s.afterReplica(n)
	case ownerNode:
		out, changes := n.own.Ready()
		for _, m := range out {
			s.trace(n, "send req to %s seq=%d ackE=%d ackS=%d held=%d heldAsAcked=%v inc=%d", s.mgrs[n.target].name, m.Seq, m.AckEpoch, m.AckSeq, len(m.Held), m.HeldAsAcked, m.Incarnation)
		}
		s.ownerChanged(n, changes)
		s.chk.acked(n)
		for _, m := range out {
			s.send(n, s.mgrs[n.target], m)
		}
		deadline = n.own.NextDeadline()
	case lookupNode:
		if n.thin != nil {
			for _, m := range n.thin.ready() {
				s.send(n, s.mgrs[n.target], m)
			}
			deadline = n.thin.nextDeadline()
			break
		}
		out, losses := n.look.Ready()
		for _, l := range losses {
			s.trace(n, "loss all=%v %d ranges", l.All, len(l.Ranges))
		}
		for _, m := range out {
			s.trace(n, "send sync to %s id=%d lsn=%d epoch=%d", s.mgrs[n.target].name, m.ID, m.LSN, m.Epoch)
		}
		s.chk.lookupLosses(n, losses)
		for _, m := range out {
			s.send(n, s.mgrs[n.target], m)
		}
		deadline = n.look.NextDeadline()
	}
	if s.chk.violation != nil {
		return
	}
	n.gen++
	t := s.now
	if deadline.After(n.local(s.now)) {
		t = n.real(deadline)
		for n.local(t).Before(deadline) { // float rounding
			t++
		}
	}
	s.push(&event{at: t, kind: evTimer, to: n.pos, gen: n.gen})
}

// afterReplica drives a replica as its server does after every step:
// replica.Drive, with the node as its network and its MemoryStorage, kept
// across restarts, as its durable log. It returns the replica's next
// deadline.
func (s *Sim) afterReplica(n *node) time.Time {
	r := n.rep
	now := n.local(s.now)
	t0 := s.clock()
	if err := replica.Drive(r, replicaDriver{s, n, now}); err != nil {
		panic(fmt.Sprintf("%s: %v", n.name, err))
	}
	deadline := r.NextDeadline()
	s.work(n, s.clock().Sub(t0))
	if core := r.Core() != nil; core != n.hadCore {
		n.hadCore, n.plans, n.forgot = core, 0, 0
		if core {
			s.stats.Takeovers++
			s.trace(n, "took over")
		}
	}
	if c := r.Core(); c != nil && c.Stats().Plans > n.plans {
		s.stats.Plans += int(c.Stats().Plans - n.plans)
		n.plans = c.Stats().Plans
	}
	if c := r.Core(); c != nil && c.Stats().Forgotten > n.forgot {
		s.stats.OwnersForgotten += int(c.Stats().Forgotten - n.forgot)
		n.forgot = c.Stats().Forgotten
	}
	if traceNode == n.name {
		st := r.Status()
		lsn := keyspace.LSN(0)
		if t := r.State().Table(namespace); t != nil {
			lsn = t.LSN()
		}
		s.trace(n, "term=%d lead=%d state=%s commit=%d applied=%d lsn=%d core=%v serving=%v", st.Term, st.Lead, st.RaftState, st.Commit, st.Applied, lsn, r.Core() != nil, r.Serving(now))
	}
	s.chk.managerStepped(n)
	s.leaseAcked(n)
	s.observeLive(n)
	if s.onTable != nil {
		if t := r.State().Table(namespace); t != nil && t.LSN() > s.tableLSN {
			s.tableLSN = t.LSN()
			s.onTable(t.LSN())
		}
	}
	return deadline
}

// replicaDriver is a replica's runtime in the simulation (replica.Driver).
type replicaDriver struct {
	s   *Sim
	n   *node
	now time.Time
}

func (d replicaDriver) Now() time.Time { return d.now }

// Persist has nothing to write: the replica's MemoryStorage, which
// replica.Drive fills before Send, is the log a restarted replica finds.
func (d replicaDriver) Persist(rd *replica.Ready) error {
	if !raft.IsEmptySnap(rd.Compacted) {
		d.s.stats.Snapshots++
	}
	return nil
}

// Send puts the replica's messages on the network; every replica's
// address is known from the start, so Peers needs nothing.
func (d replicaDriver) Send(rd *replica.Ready) {
	s, n := d.s, d.n
	for _, m := range rd.Messages {
		if m.Type == raftpb.MsgSnap {
			s.stats.SnapshotsSent++
		}
		if to := s.byRID[m.To]; to != nil && to != n {
			s.send(n, to, m)
		}
	}
	s.sendManaged(n, rd.Owners, rd.Lookups)
}

// sendManaged sends a replica's messages to Owners and Lookups.
func (s *Sim) sendManaged(n *node, owners []lease.OwnerMessage, lookups []replica.LookupMessage) {
	for _, m := range owners {
		if to := s.byOwner[m.To]; to != nil {
			s.send(n, to, m.Msg)
		}
	}
	for _, m := range lookups {
		if to := s.bySess[m.To]; to != nil {
			s.send(n, to, m.Msg)
		}
	}
}

// send puts a message on the network: partitions and drops lose it, delays
// reorder it, and it may arrive twice.
func (s *Sim) send(from, to *node, msg any) {
	s.stats.Messages++
	size := s.sizes.of(msg)
	if from.kind == managerNode && s.cfg.Probe != nil && s.leads(from) {
		s.cfg.Probe.ManagerTraffic(s.now, size, true)
	}
	switch {
	case from.kind == managerNode && to.kind == managerNode:
		s.stats.RaftMessages++
	case from.kind == ownerNode && to.kind == ownerNode:
		s.stats.Transfers++
	case from.kind == ownerNode || to.kind == ownerNode:
		s.stats.LeaseMessages++
		s.stats.LeaseBytes += int64(size)
	default:
		s.stats.SyncBytes += int64(size)
	}
	if _, ok := msg.(refusal); ok {
		s.stats.Refusals++
	}
	switch m := msg.(type) {
	case *protocol.SyncRequest:
		s.stats.LookupPolls++
	case *protocol.SyncResponse:
		if m.Request != 0 && m.ID == 0 {
			if len(m.Update.Changes) == 0 && !m.Update.Snapshot {
				s.stats.Heartbeats++
			} else {
				s.stats.Vouching++
			}
		}
	}
	s.noteOwnerMsg(from, to, msg)
	e := &event{at: s.now + s.delay() + s.linkDelay(from, to), kind: evDeliver, from: from.pos, to: to.pos, msg: msg, gen: from.inc, toInc: to.inc}
	if from.part != to.part || s.cut(from, to) || (s.faulting && s.rng.Float64() < s.cfg.DropRate) {
		s.stats.Dropped++
		if isSnapshot(msg) {
			// The sender's transport learns the stream failed.
			s.at(e.at, func() { s.snapshotDone(e, false) })
		}
		return
	}
	copies := 1
	if s.faulting && s.rng.Float64() < s.cfg.DupRate && !isSnapshot(msg) {
		copies = 2
		s.stats.Duplicated++
	}
	for range copies {
		c := *e
		c.at = s.now + s.delay() + s.linkDelay(from, to)
		s.push(&c)
	}
}

func isSnapshot(msg any) bool {
	m, ok := msg.(raftpb.Message)
	return ok && m.Type == raftpb.MsgSnap
}

// snapshotDone reports to the sender of a MsgSnap whether it arrived, as a
// server's transport does (RawNode.ReportSnapshot): until it is told, Raft
// sends that replica nothing more. A restarted sender is not told.
func (s *Sim) snapshotDone(e *event, ok bool) {
	m, snap := e.msg.(raftpb.Message)
	from := s.nodes[e.from]
	if !snap || m.Type != raftpb.MsgSnap || !from.up || from.inc != e.gen {
		return
	}
	if from.stalled {
		from.stallQ = append(from.stallQ, func() { s.snapshotDone(e, ok) })
		return
	}
	status := raft.SnapshotFailure
	if ok {
		status = raft.SnapshotFinish
	}
	from.rep.ReportSnapshot(m.To, status)
	s.after(from)
}

func (s *Sim) delay() time.Duration {
	c := s.cfg
	if s.faulting && c.MaxDelay > 0 && s.rng.Float64() < c.LongDelayRate {
		return c.MaxDelay/2 + time.Duration(s.rng.Int64N(int64(c.MaxDelay/2)+1))
	}
	return c.MinDelay + time.Duration(s.rng.Int64N(int64(3*c.MinDelay)+1))
}

// start boots a node (again) with a new clock rate. An Owner or a Lookup
// starts a new run with no memory of the last; a Manager replica restarts
// from its Raft log, or, when it loses its state, from nothing with a new
// epoch.
func (s *Sim) start(n *node) {
	n.up = true
	n.inc++
	n.rate, n.offset = 1, 0
	if s.cfg.ClockSkew {
		// Rates within [1/√(1+d), √(1+d)]: any two differ by at most 1+d.
		hi := math.Sqrt(1 + s.cfg.Timing.MaxDrift)
		switch s.rng.IntN(4) {
		case 0:
			n.rate = hi
		case 1:
			n.rate = 1 / hi
		default:
			n.rate = 1/hi + s.rng.Float64()*(hi-1/hi)
		}
		// Clocks are not synchronized, only their rates bounded (C§2.3.1).
		n.offset = time.Duration(s.rng.Int64N(int64(2*time.Hour))) - time.Hour
	}
	now := n.local(s.now)
	seed := s.rng.Uint64()
	if n.kind != managerNode {
		n.target, n.heard = 0, now
		if s.replicated() {
			// Clients list the replicas in different orders, so Lookups
			// spread over the followers.
			n.target = s.rng.IntN(len(s.mgrs))
		}
	}
	switch n.kind {
	case managerNode:
		if n.store == nil || (s.cfg.ManagerLosesState && !s.replicated()) {
			if n.store != nil {
				s.epoch++
			}
			n.store = raft.NewMemoryStorage()
		}
		var err error
		n.rep, err = replica.NewReplica(replica.ReplicaConfig{
			ID:       n.rid,
			Settings: replica.Settings{Lease: lease.Settings{Timing: s.cfg.Timing, Policy: s.cfg.Policy, Epoch: s.epoch, Seed: seed, Rebalance: s.cfg.Rebalance, RebalanceEvery: s.cfg.RebalanceEvery, DrainGate: s.cfg.DrainGate}, RaftTick: s.tick, ElectionTicks: electionTicks, SnapshotEntries: cmp.Or(s.cfg.SnapshotEntries, snapshotEntries), ReadLease: s.readLease()},
			Storage:  n.store, Bootstrap: s.bootstrap(n), Break: s.broken(),
		}, now)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", n.name, err))
		}
		n.hadCore = false
	case ownerNode:
		n.draining = false
		n.own = owner.NewCore(s.ownerConfig(n, owner.CoreConfig{
			Namespace: namespace, ID: n.name, Addr: n.name + ":7000", Incarnation: n.inc,
			Timing: s.cfg.Timing, Seed: seed,
		}))
		faults.Owner(n.own, s.broken())
		s.chk.ownerStarted(n)
	case lookupNode:
		delete(s.bySess, n.session)
		n.session = uint64(n.idx)<<32 | n.inc
		s.bySess[n.session] = n
		if s.cfg.ThinLookups {
			n.thin = newThinLookup(s.cfg.Timing, now)
			break
		}
		n.look = lookup.NewCore(lookup.CoreConfig{Namespace: namespace, Timing: s.cfg.Timing}, now)
		faults.Lookup(n.look, s.broken())
		s.chk.lookupStarted(n)
	}
	s.after(n)
}

// broken returns the rules Config.Break breaks, none if it is nil.
func (s *Sim) broken() faults.Set {
	if s.cfg.Break == nil {
		return faults.Set{}
	}
	return *s.cfg.Break
}

// crash stops a node: it loses all state but a replica's Raft log; its
// timers and in-flight messages to it go nowhere.
func (s *Sim) crash(n *node) {
	if !n.up {
		return
	}
	switch n.kind {
	case managerNode:
		s.stats.ManagerRestarts++
		if n == s.leader() {
			s.stats.LeaderCrashes++
		}
		if s.cfg.ManagerLosesState && !s.replicated() {
			s.chk.managerCrashed()
		}
		n.rep = nil
	case ownerNode:
		s.stats.OwnerCrashes++
	case lookupNode:
		s.stats.LookupCrashes++
		s.chk.lookupCrashed(n)
	}
	n.up = false
	n.gen++
	defer s.checkLive()
	n.stalled, n.stallQ = false, nil
	inbox := n.inbox
	n.inbox, n.waking = nil, false
	for _, e := range inbox {
		s.snapshotDone(e, false) // its stream broke before the replica read it
	}
}

func (s *Sim) exp(mean time.Duration) time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(mean))
}

func (s *Sim) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

func (s *Sim) scheduleFaults() {
	c, t := s.cfg, s.cfg.Timing
	repeat := func(mean time.Duration, fn func()) {
		if mean <= 0 {
			return
		}
		var next func()
		next = func() {
			if !s.faulting {
				return
			}
			fn()
			s.at(s.now+s.exp(mean), next)
		}
		s.at(s.exp(mean), next)
	}
	repeat(c.OwnerCrashEvery, func() {
		if n := s.pickUp(s.owners); n != nil {
			s.crash(n)
			s.at(s.now+s.uniform(0, 3*t.ManagerLease), func() { s.restart(n) })
		}
	})
	repeat(c.LookupCrashEvery, func() {
		if n := s.pickUp(s.lookups); n != nil {
			s.crash(n)
			s.at(s.now+s.uniform(0, 2*t.SyncTimeout), func() { s.restart(n) })
		}
	})
	repeat(c.DrainEvery, func() {
		var idle []*node
		for _, n := range s.owners {
			if !n.draining {
				idle = append(idle, n)
			}
		}
		if n := s.pickUp(idle); n != nil {
			s.drain(n)
		}
	})
	repeat(c.ManagerCrashEvery, func() {
		n := s.mgrs[0]
		if s.replicated() {
			// The leader most of the time: its failover is what the
			// replication is for.
			n = s.leader()
			if n == nil || s.rng.IntN(4) == 0 {
				var followers []*node
				for _, m := range s.mgrs {
					if m != n {
						followers = append(followers, m)
					}
				}
				if f := s.pickUp(followers); f != nil {
					n = f
				}
			}
			if n == nil {
				return
			}
		}
		s.crash(n)
		s.at(s.now+s.uniform(0, 2*t.ManagerLease), func() { s.restart(n) })
	})
	repeat(c.StallEvery, s.stallOne)
	repeat(c.DuplicateEvery, s.duplicate)
	repeat(c.PartitionEvery, func() {
		s.stats.Partitions++
		s.nextPart++
		p := s.nextPart
		if !s.replicated() {
			// Cut off a random group; a third of the time the Manager is
			// in it with the Owners that are, isolated from everyone else.
			if s.rng.IntN(3) == 0 {
				s.mgrs[0].part = p
			}
		} else {
			s.cutReplicas(p)
			s.checkLive()
		}
		for _, n := range append(append([]*node{}, s.owners...), s.lookups...) {
			if s.rng.IntN(4) == 0 {
				n.part = p
			}
		}
		s.at(s.now+s.uniform(t.ManagerLease/4, 3*t.ManagerLease), func() {
			for _, n := range s.nodes {
				if n.part == p {
					n.part = 0
				}
			}
		})
	})
}

// cutReplicas puts some replicas in partition group p: a third of the time
// the leader with a minority (so the majority elects another leader while
// the old one, and the Owners cut off with it, do not know yet), a third of
// the time some followers, otherwise none.
func (s *Sim) cutReplicas(p int) {
	lead := s.leader()
	var others []*node
	for _, m := range s.mgrs {
		if m != lead {
			others = append(others, m)
		}
	}
	switch s.rng.IntN(3) {
	case 0:
		if lead == nil {
			return
		}
		lead.part = p
		s.rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		k := 0
		if h := (len(s.mgrs) - 1) / 2; h > 0 {
			k = s.rng.IntN(h) // the group stays a minority
		}
		for _, m := range others[:k] {
			m.part = p
		}
	case 1:
		for _, m := range others {
			if s.rng.IntN(3) == 0 {
				m.part = p
			}
		}
	}
	s.countIsolation(lead)
}

// countIsolation counts a partition that leaves lead without a majority
// of the replicas on its side.
func (s *Sim) countIsolation(lead *node) {
	if lead == nil || !s.replicated() {
		return
	}
	with := 0
	for _, m := range s.mgrs {
		if m.part == lead.part {
			with++
		}
	}
	if 2*with <= len(s.mgrs) {
		s.stats.LeaderIsolations++
	}
}

func (s *Sim) restart(n *node) {
	if !n.up && s.faulting {
		s.start(n)
	}
}

func (s *Sim) pickUp(ns []*node) *node {
	var up []*node
	for _, n := range ns {
		if n.up {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[s.rng.IntN(len(up))]
}

// stopFaults heals the network and brings every node back.
func (s *Sim) stopFaults() {
	s.faulting = false
	s.endStallsAndGhosts()
	defer s.restoreMembers()
	for _, n := range s.nodes {
		if n.ghost {
			continue
		}
		n.part = 0
		if n.draining {
			s.crash(n) // an Owner shutting down finishes, and starts again
		}
		if !n.up {
			s.start(n)
		}
	}
}
