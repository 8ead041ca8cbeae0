package manager

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector for the server. It reads
// Snapshot at scrape time, so it costs the Manager's loop nothing, and it
// may be registered before Run starts (the namespaces appear after the
// loop's first step).
//
// Gauges, per namespace (label "namespace"): leasehold_owners,
// leasehold_members, leasehold_ranges, leasehold_free_ranges,
// leasehold_lookups, leasehold_lsn; and leasehold_epoch. Counters, since the
// Manager started: leasehold_lease_requests_total,
// leasehold_sync_requests_total, leasehold_grants_total,
// leasehold_recalls_total, leasehold_releases_total,
// leasehold_expiries_total, leasehold_owner_restarts_total,
// leasehold_races_dropped_total, leasehold_stale_dropped_total.
func (s *Server) Collector() prometheus.Collector { return newCollector(s.Snapshot) }

// collector turns Snapshots into metrics.
type collector struct {
	snapshot func() *Snapshot

	epoch *prometheus.Desc
	perNS []nsMetric
	stats []statMetric
}

type nsMetric struct {
	desc  *prometheus.Desc
	value func(NamespaceSnapshot) float64
}

type statMetric struct {
	desc  *prometheus.Desc
	value func(Stats) uint64
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(snapshot func() *Snapshot) *collector {
	ns := func(name, help string, value func(NamespaceSnapshot) float64) nsMetric {
		return nsMetric{prometheus.NewDesc("leasehold_"+name, help, []string{"namespace"}, nil), value}
	}
	stat := func(name, help string, value func(Stats) uint64) statMetric {
		return statMetric{prometheus.NewDesc("leasehold_"+name+"_total", help, nil, nil), value}
	}
	return &collector{
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
			ns("lsn", "The LSN of the lease table's latest change.", func(n NamespaceSnapshot) float64 { return float64(n.LSN) }),
		},
		stats: []statMetric{
			stat("lease_requests", "Lease requests from Owners, accepted or not.", func(s Stats) uint64 { return s.LeaseRequests }),
			stat("sync_requests", "Sync requests from Lookups.", func(s Stats) uint64 { return s.SyncRequests }),
			stat("grants", "Ranges granted with a fresh LGN.", func(s Stats) uint64 { return s.Grants }),
			stat("recalls", "Ranges recalled from their holder to move them.", func(s Stats) uint64 { return s.Recalls }),
			stat("releases", "Ranges freed because their holder acknowledged a recall or refused a renewal.", func(s Stats) uint64 { return s.Releases }),
			stat("expiries", "Ranges freed because their reservation ran out.", func(s Stats) uint64 { return s.Expiries }),
			stat("owner_restarts", "New incarnations of Owners seen.", func(s Stats) uint64 { return s.OwnerRestarts }),
			stat("races_dropped", "Lease requests dropped by the race filter.", func(s Stats) uint64 { return s.RacesDropped }),
			stat("stale_dropped", "Duplicate lease requests and requests of dead incarnations dropped.", func(s Stats) uint64 { return s.StaleDropped }),
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
}
