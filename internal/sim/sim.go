package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/thinlookup"
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
	reader  bool     // a read replica (readreplicas.go)
	inbox   []*event // Raft messages delivered, not yet stepped (step.go)
	waking  bool     // a stepInbox is scheduled
	hadCore bool     // rep had taken over after its last step
	plans   uint64   // rebalancing rounds its Core had planned after its last step
	forgot  uint64   // Owners its Core had forgotten after its last step

	// Owners and Lookups talk to one replica at a time, as their runtimes
	// do: the target. A message from another replica finds no stream open.
	target int         // index in Sim.mgrs
	heard  time.Time   // local time the target last sent something (or was chosen)
	spread spreadOrder // a Lookup's order of the replicas, with read replicas (readreplicas.go)

	own     *owner.Core
	look    *lookup.Core
	thin    *thinlookup.Core // instead of look, with Config.ThinLookups
	session uint64           // the Lookup's session with the Manager

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
	sbNext      uint64       // the standby application's last write number
	sbf         sbFaultState // Config.StandbyFaults (standby_faults.go)
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
	rr     ReadReplicaStats           // read replicas (readreplicas.go)
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
	// The standby application (Config.Standbys, standby.go): writes
	// taken and acknowledged, replicated writes and fills a standby
	// refused (CheckStandbyWrite), fills stored, promoted grants taken up
	// (counted per key written), and holders crashed with their standby.
	StandbyWrites, StandbyAcks, StandbyRefused, Fills, Promotions, PairCrashes, ZoneCrashes int
	// SBFaults counts the standby design's own faults (standby_faults.go).
	SBFaults StandbyFaultStats
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
	Leases    LeaseStats       // with Config.ReadLease
	Readers   ReadReplicaStats // with Config.ReadReplicas

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
	s.addReadReplicas()
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
	s.scheduleReadReplicas()
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
	return Result{Seed: cfg.Seed, Violation: s.chk.violation, Stats: s.stats, Leases: s.lc.stats, Readers: s.rr, compactions: s.compactions}
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
