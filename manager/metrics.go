package manager

import (
	"time"

	"github.com/leasehold/leasehold/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector for the server. It reads
// Snapshot at scrape time, so it costs the Manager's loop nothing, and it
// may be registered before Run starts (the namespaces appear after the
// loop's first step).
//
// Gauges, per namespace (label "namespace"): leasehold_owners,
// leasehold_members, leasehold_ranges, leasehold_free_ranges,
// leasehold_lookups, leasehold_draining_owners, leasehold_lsn; and leasehold_epoch. Counters, since the
// Manager started: leasehold_lease_requests_total,
// leasehold_sync_requests_total, leasehold_grants_total,
// leasehold_recalls_total, leasehold_releases_total,
// leasehold_expiries_total, leasehold_owner_restarts_total,
// leasehold_races_dropped_total, leasehold_stale_dropped_total.
//
// Raft, as this replica sees it: leasehold_raft_is_leader,
// leasehold_raft_leader_id, leasehold_raft_term, leasehold_raft_commit_index,
// leasehold_raft_applied_index, leasehold_raft_has_quorum (the leader only),
// leasehold_ready (the /readyz rule), and the counters
// leasehold_raft_proposals_total, leasehold_raft_snapshots_total,
// leasehold_raft_takeovers_total, leasehold_raft_dropped_answers_total
// (Owner answers never sent: their round was not proven before the
// replica stepped down or its proposal was dropped).
//
// Measured: the histograms leasehold_renewal_answer_seconds,
// leasehold_propagation_seconds and, on the leader, per replica,
// leasehold_raft_peer_round_trip_seconds{peer}; the counter
// leasehold_loss_notifications_total{namespace}, and the per-method gRPC
// server series, named and labelled as go-grpc-middleware's Prometheus
// provider names them, leasehold_grpc_server_* (started, handled, messages
// received and sent, handling time; grpcmetrics.go); leasehold_limit_refusals_total{limit} counts the
// refusals of each limit, by the flag that sets it. docs/operations.md
// describes them all.
//
// The Go runtime's and the process's collectors are the embedder's to
// register (the CLI does).
func (s *Server) Collector() prometheus.Collector {
	c := newCollector(s.Snapshot)
	c.extra = append(s.metrics.collectors(), s.grpcm, s.refused)
	return c
}

// electionTimeout is Raft's election timeout before randomisation.
func (s *Server) electionTimeout() time.Duration {
	return time.Duration(max(s.cfg.ElectionTicks, 1)) * max(s.cfg.RaftTick, time.Millisecond)
}

// collector turns Snapshots into metrics.
type collector struct {
	snapshot func() *Snapshot

	epoch *prometheus.Desc
	perNS []nsMetric
	stats []statMetric
	raft  []raftMetric
	extra []prometheus.Collector
}

type raftMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*Snapshot) float64
}

type nsMetric struct {
	desc  *prometheus.Desc
	value func(NamespaceSnapshot) float64
}

type statMetric struct {
	desc  *prometheus.Desc
	value func(protocol.Stats) uint64
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(snapshot func() *Snapshot) *collector {
	ns := func(name, help string, value func(NamespaceSnapshot) float64) nsMetric {
		return nsMetric{prometheus.NewDesc("leasehold_"+name, help, []string{"namespace"}, nil), value}
	}
	stat := func(name, help string, value func(protocol.Stats) uint64) statMetric {
		return statMetric{prometheus.NewDesc("leasehold_"+name+"_total", help, nil, nil), value}
	}
	gauge := func(name, help string, value func(*Snapshot) float64) raftMetric {
		return raftMetric{prometheus.NewDesc("leasehold_"+name, help, nil, nil), prometheus.GaugeValue, value}
	}
	counter := func(name, help string, value func(*Snapshot) float64) raftMetric {
		return raftMetric{prometheus.NewDesc("leasehold_"+name+"_total", help, nil, nil), prometheus.CounterValue, value}
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	return &collector{
		raft: []raftMetric{
			gauge("raft_is_leader", "1 if this replica is the Raft leader.", func(s *Snapshot) float64 { return b(s.Cluster.Role == "leader") }),
			gauge("raft_leader_id", "The Raft ID of the leader this replica knows; 0 if none.", func(s *Snapshot) float64 { return float64(s.Cluster.Leader) }),
			gauge("raft_term", "This replica's Raft term.", func(s *Snapshot) float64 { return float64(s.Cluster.Term) }),
			gauge("raft_commit_index", "The index of the newest log entry this replica knows committed.", func(s *Snapshot) float64 { return float64(s.Cluster.Commit) }),
			gauge("raft_applied_index", "The index of the newest log entry this replica applied.", func(s *Snapshot) float64 { return float64(s.Cluster.Applied) }),
			gauge("raft_has_quorum", "On the leader, 1 if a quorum of voters was heard from within the last election timeout; 0 elsewhere.", func(s *Snapshot) float64 { return b(s.Cluster.Quorum) }),
			gauge("ready", "1 if this replica is ready (/readyz): it knows a leader and has applied what is committed, and a leader holds a quorum.", func(s *Snapshot) float64 {
				ok, _ := Readiness(s.Cluster)
				return b(ok)
			}),
			counter("raft_proposals", "Log entries this replica proposed as leader.", func(s *Snapshot) float64 { return float64(s.Replica.Proposals) }),
			counter("raft_snapshots", "Snapshots of the state this replica took to compact its log.", func(s *Snapshot) float64 { return float64(s.Replica.Snapshots) }),
			counter("raft_takeovers", "Times this replica took over as leader.", func(s *Snapshot) float64 { return float64(s.Replica.Takeovers) }),
			counter("raft_dropped_answers", "Owner answers never sent: the round was not proven before this replica stepped down, or its proposal was dropped.", func(s *Snapshot) float64 { return float64(s.Replica.Dropped) }),
		},
		snapshot: snapshot,
		epoch:    prometheus.NewDesc("leasehold_epoch", "The epoch naming this Manager's state; it changes when the Manager loses its state.", nil, nil),
		perNS: []nsMetric{
			ns("owners", "Owner sessions the Manager knows, members or not.", func(n NamespaceSnapshot) float64 {
				return float64(len(n.Owners))
			}),
			ns("members", "Owners that are members: given a share of the key space.", func(n NamespaceSnapshot) float64 {
				members := 0
				for _, o := range n.Owners {
					if o.Member {
						members++
					}
				}
				return float64(members)
			}),
			ns("ranges", "Segments of the lease table, owned or free.", func(n NamespaceSnapshot) float64 { return float64(n.Segments) }),
			ns("free_ranges", "Segments of the lease table that no Owner holds.", func(n NamespaceSnapshot) float64 { return float64(n.FreeSegments) }),
			ns("lookups", "Lookups connected.", func(n NamespaceSnapshot) float64 { return float64(n.Lookups) }),
			ns("draining_owners", "Owners draining (planned work: their ranges move away), as the leader knows them.", func(n NamespaceSnapshot) float64 {
				d := 0
				for _, o := range n.Owners {
					if o.Draining {
						d++
					}
				}
				return float64(d)
			}),
			ns("lsn", "The LSN of the lease table's latest change.", func(n NamespaceSnapshot) float64 { return float64(n.LSN) }),
		},
		stats: []statMetric{
			stat("lease_requests", "Lease requests from Owners, accepted or not.", func(s protocol.Stats) uint64 { return s.LeaseRequests }),
			stat("sync_requests", "Sync requests from Lookups.", func(s protocol.Stats) uint64 { return s.SyncRequests }),
			stat("grants", "Ranges granted with a fresh LGN.", func(s protocol.Stats) uint64 { return s.Grants }),
			stat("recalls", "Ranges recalled from their holder to move them.", func(s protocol.Stats) uint64 { return s.Recalls }),
			stat("releases", "Ranges freed because their holder acknowledged a recall or refused a renewal.", func(s protocol.Stats) uint64 { return s.Releases }),
			stat("expiries", "Ranges freed because their reservation ran out.", func(s protocol.Stats) uint64 { return s.Expiries }),
			stat("owner_restarts", "New incarnations of Owners seen.", func(s protocol.Stats) uint64 { return s.OwnerRestarts }),
			stat("races_dropped", "Lease requests dropped by the race filter.", func(s protocol.Stats) uint64 { return s.RacesDropped }),
			stat("stale_dropped", "Duplicate lease requests and requests of dead incarnations dropped.", func(s protocol.Stats) uint64 { return s.StaleDropped }),
		},
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.epoch
	for _, m := range c.perNS {
		ch <- m.desc
	}
	for _, m := range c.stats {
		ch <- m.desc
	}
	for _, m := range c.raft {
		ch <- m.desc
	}
	for _, e := range c.extra {
		e.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.snapshot()
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(snap.Epoch))
	for _, n := range snap.Namespaces {
		for _, m := range c.perNS {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.value(n), n.Name)
		}
	}
	for _, m := range c.stats {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value(snap.Stats)))
	}
	for _, m := range c.raft {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(snap))
	}
	for _, e := range c.extra {
		e.Collect(ch)
	}
}
