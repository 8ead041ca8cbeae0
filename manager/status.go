// The status a Server publishes: the Snapshot its loop makes after each
// step, which Status, the dashboard and the metrics read.

package manager

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
	"go.etcd.io/raft/v3"
)

// Snapshot is what the Manager looked like after its last step, for
// metrics and status.
type Snapshot struct {
	Epoch      uint64
	Stats      protocol.Stats
	Replica    ReplicaStats
	Cluster    ClusterInfo
	Namespaces []NamespaceSnapshot
	// Heartbeats counts the heartbeats this replica sent to Lookups, and
	// Vouching its pushes that vouched for freshness as heartbeats do
	// (docs/protocol.md, "Heartbeats").
	Heartbeats, Vouching uint64
}

// ClusterInfo describes the replica group as this replica sees it.
type ClusterInfo struct {
	ID, Leader       uint64
	LeaderAddr, Role string
	Term             uint64
	Commit, Applied  uint64
	// Quorum is, on the leader, whether a quorum of voters (itself
	// included) was recently active within the last election timeout, as
	// Raft's CheckQuorum counts them; false on the other replicas.
	Quorum bool
	Peers  []PeerInfo
	// ReadLease is this replica's quorum read lease (readlease.go).
	ReadLease ReadLeaseInfo
	// Serving is whether this replica answers Lookups now (rule 17).
	Serving bool
}

// PeerInfo describes one replica.
type PeerInfo struct {
	ID    uint64
	Addr  string
	Voter bool
	// ReadReplica is true for a read replica: a learner never promoted.
	ReadReplica bool
	Match       uint64 // the log index known replicated there (leader only)
}

// NamespaceSnapshot describes one namespace.
type NamespaceSnapshot struct {
	Name         string
	LSN          keyspace.LSN
	Segments     int
	FreeSegments int
	Lookups      int
	Owners       []protocol.OwnerInfo
	// StandbysPerRange is the namespace's Standbys setting, and Standbys
	// its pairings of holder and standby by the holder's LGN, from the
	// replicated state (docs/design.md rules 21-24).
	StandbysPerRange int
	Standbys         []protocol.StandbyInfo
}

// ReplicaStats counts the replica's Raft activity.
type ReplicaStats struct {
	Proposals, Applied, Takeovers, Snapshots uint64
	Confirmations                            uint64 // rounds answered on a ReadIndex proof, with no entry
	Dropped                                  uint64 // Owner messages never sent: their round was not proven in time
}

// Snapshot returns the state published after the loop's last step.
func (s *Server) Snapshot() *Snapshot { return s.stats.Load() }

// changed notes that the replica's state may have changed. The snapshot
// walks the whole table, so it is taken at most every publishEvery, not
// after every event, and no more often than keeps it to a tenth of the
// loop's time: a table of 10,000 Owners (640,000 segments) takes about
// 120 ms to walk, and the state changes with every renewal.
func (l *loop) changed() {
	if !l.stale {
		l.stale = true
		l.publishAt = time.Now().Add(max(publishEvery, 10*l.publishTook))
	}
}

// publishEvery bounds how stale Snapshot, status and metrics may be, for
// tables that take under a tenth of it to walk (see changed).
const publishEvery = 100 * time.Millisecond

// publish stores a snapshot for metrics and status readers. The leader
// describes its owner sessions; a follower the replicated owner records.
func (l *loop) publish() {
	start := time.Now()
	defer func() { l.publishTook = time.Since(start) }()
	l.stale = false
	st := l.r.State()
	snap := &Snapshot{Epoch: st.Epoch(), Replica: ReplicaStats(l.r.Stats()), Cluster: l.clusterInfo()}
	l.checkRole(snap.Cluster)
	core := l.r.Core()
	if core != nil {
		snap.Stats = core.Stats()
	}
	snap.Stats.SyncRequests = l.r.Feed().Syncs()
	fs := l.r.Feed().Stats()
	snap.Heartbeats, snap.Vouching = fs.Heartbeats, fs.Vouching
	for _, name := range st.Namespaces() {
		t := st.Table(name)
		ns := NamespaceSnapshot{Name: name, LSN: t.LSN(), Segments: t.Len(), Lookups: l.r.Feed().Lookups(name)}
		tc := l.countTable(name, t)
		if core != nil {
			for _, o := range core.Sessions(name) {
				c := tc.owners[o.ID]
				o.Ranges, o.Share = c.ranges, c.share
				ns.Owners = append(ns.Owners, o)
			}
		} else {
			ns.Owners = ownerInfos(st, name)
		}
		ns.FreeSegments = tc.free
		ns.StandbysPerRange, ns.Standbys = l.s.cfg.Standbys[name], st.Standbys(name)
		countStandbys(ns.Owners, ns.Standbys)
		snap.Namespaces = append(snap.Namespaces, ns)
	}
	l.obs.noteMembers(l.s.cfg.Logger, st)
	l.s.stats.Store(snap)
}

// tableCount is what publish reads from walking a table: the segments and
// share of the key space each owner holds, and the free segments.
type tableCount struct {
	t      *leasetable.Table
	lsn    keyspace.LSN
	segs   int
	owners map[string]ownerCount
	free   int
}

type ownerCount struct {
	ranges int
	share  float64
}

// countTable walks table t of namespace ns, or returns the last walk's
// counts if t has not changed since (every change moves its LSN): most
// publishes follow renewals, which change sessions but not the table, and
// walking it was the bulk of a publish.
func (l *loop) countTable(ns string, t *leasetable.Table) tableCount {
	if c, ok := l.counts[ns]; ok && c.t == t && c.lsn == t.LSN() && c.segs == t.Len() {
		return c
	}
	c := tableCount{t: t, lsn: t.LSN(), segs: t.Len(), owners: map[string]ownerCount{}}
	t.Each(func(seg leasetable.Segment) bool {
		if seg.Entry.Owner == "" {
			c.free++
			return true
		}
		oc := c.owners[seg.Entry.Owner]
		oc.ranges++
		oc.share += seg.Range.Size() / (1 << 64)
		c.owners[seg.Entry.Owner] = oc
		return true
	})
	if l.counts == nil {
		l.counts = map[string]tableCount{}
	}
	l.counts[ns] = c
	return c
}

func (l *loop) clusterInfo() ClusterInfo {
	rs := l.r.Status()
	lead, addr := l.r.Leader()
	ci := ClusterInfo{ID: l.s.cfg.ID, Leader: lead, LeaderAddr: addr, Role: roleName(rs.RaftState, l.r.ReadReplica()),
		Term: rs.Term, Commit: rs.Commit, Applied: rs.Applied, ReadLease: readLeaseInfo(l.r, time.Now()), Serving: l.r.Serving(time.Now())}
	voters := rs.Config.Voters.IDs()
	if rs.RaftState == raft.StateLeader {
		active := 0
		for id := range voters {
			if pr, ok := rs.Progress[id]; ok && (pr.RecentActive || id == l.s.cfg.ID) {
				active++
			}
		}
		now := time.Now()
		if active > len(voters)/2 {
			l.quorumAt = now
		}
		// CheckQuorum clears the marks every election timeout, so a mark
		// set within the last two is a quorum heard from within one.
		ci.Quorum = !l.quorumAt.IsZero() && now.Sub(l.quorumAt) < 2*l.s.electionTimeout()
	} else {
		l.quorumAt = time.Time{}
	}
	for id, a := range l.r.State().Peers() {
		p := PeerInfo{ID: id, Addr: a, ReadReplica: l.r.IsReadReplica(id)}
		_, p.Voter = voters[id]
		if pr, ok := rs.Progress[id]; ok {
			p.Match = pr.Match
		}
		ci.Peers = append(ci.Peers, p)
	}
	slices.SortFunc(ci.Peers, func(a, b PeerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return ci
}

// RoleReadReplica is the role a read replica reports (a Raft follower
// that never votes): in status, the dashboard and ClusterInfo.Role.
const RoleReadReplica = "read-replica"

func roleName(s raft.StateType, readReplica bool) string {
	if readReplica && s == raft.StateFollower {
		return RoleReadReplica
	}
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return s.String()
}

// ownerInfos describes a namespace's owners from the replicated records
// alone (a follower has no sessions).
func ownerInfos(st *lease.State, ns string) []protocol.OwnerInfo {
	by := map[string]*protocol.OwnerInfo{}
	for id, r := range st.Owners(ns) {
		by[id] = &protocol.OwnerInfo{ID: id, Addr: r.Addr, Incarnation: r.Incarnation, Member: r.Member, Zone: r.Zone}
	}
	st.Table(ns).Each(func(s leasetable.Segment) bool {
		if i := by[s.Entry.Owner]; i != nil {
			i.Ranges++
			i.Share += s.Range.Size() / (1 << 64)
		}
		return true
	})
	out := make([]protocol.OwnerInfo, 0, len(by))
	for _, i := range by {
		out = append(out, *i)
	}
	slices.SortFunc(out, func(a, b protocol.OwnerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// countStandbys sets each Owner's StandbyRanges and StandbyInSync from the
// namespace's pairings.
func countStandbys(owners []protocol.OwnerInfo, pairs []protocol.StandbyInfo) {
	if len(pairs) == 0 {
		return
	}
	at := make(map[string]int, len(owners))
	for i, o := range owners {
		at[o.ID] = i
	}
	for _, p := range pairs {
		if i, ok := at[p.Standby]; ok && p.Standby != "" {
			owners[i].StandbyRanges++
			if p.InSync {
				owners[i].StandbyInSync++
			}
		}
	}
}
