package lookup

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The Lookup's metrics, registered with Config.Registerer, each labelled
// with the namespace:
//
//   - leasehold_lookup_copy_age_seconds: time since the newest sync whose
//     answer the copy reflects was sent, which proves the copy was fresh
//     then (absent before the first);
//   - leasehold_lookup_sync_timeout_seconds: the Manager's SyncTimeout —
//     a copy older than it is given up and every range reported lost;
//   - leasehold_lookup_losses_total: loss notifications raised;
//   - leasehold_lookup_resyncs_total: snapshots of the whole table applied
//     after the first (a gap a delta could not fill, or a new epoch).
//
// Lookup itself pays nothing for them: they are counted by the loop and
// read at scrape time.
type metrics struct {
	losses    atomic.Uint64
	resyncs   atomic.Uint64
	snapshots uint64 // the loop's
}

type ageCollector struct {
	l    *Lookup
	desc *prometheus.Desc
}

func (c *ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *ageCollector) Collect(ch chan<- prometheus.Metric) {
	if a := c.l.Age(); a.Synced {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, a.Age.Seconds())
	}
}

func (l *Lookup) registerMetrics(reg prometheus.Registerer) error {
	m := &metrics{}
	labels := prometheus.Labels{"namespace": l.cfg.Namespace}
	cs := []prometheus.Collector{
		&ageCollector{l: l, desc: prometheus.NewDesc("leasehold_lookup_copy_age_seconds",
			"Time since the newest sync whose answer the Lookup's copy reflects was sent; absent before the first.", nil, labels)},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_lookup_sync_timeout_seconds", ConstLabels: labels,
			Help: "The Manager's SyncTimeout: a copy older than this is given up and every range reported lost."},
			func() float64 { return time.Duration(l.syncTimeout.Load()).Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_lookup_losses_total", ConstLabels: labels,
			Help: "Loss notifications the Lookup raised."}, func() float64 { return float64(m.losses.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_lookup_resyncs_total", ConstLabels: labels,
			Help: "Snapshots of the whole table applied after the first."}, func() float64 { return float64(m.resyncs.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	l.metrics = m
	return nil
}

// observe counts the losses the core raised at a step (the loop's).
func (m *metrics) observe(losses int) {
	if m == nil {
		return
	}
	m.losses.Add(uint64(losses))
}

// applied notes an update the loop applied.
func (m *metrics) applied(snapshot bool) {
	if m == nil || !snapshot {
		return
	}
	if m.snapshots++; m.snapshots > 1 {
		m.resyncs.Add(1)
	}
}
