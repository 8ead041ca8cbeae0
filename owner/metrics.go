package owner

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The Owner's metrics, registered with Config.Registerer, each labelled
// with the namespace and the Owner's ID:
//
//   - leasehold_owner_lease_remaining_seconds: time left on the lease that
//     ends first, on this Owner's clock (absent while it holds none);
//   - leasehold_owner_renew_interval_seconds: how often it renews, by the
//     Manager's timings — a margin under one renewal means a renewal was
//     missed;
//   - leasehold_owner_renewal_seconds: histogram of the lease requests'
//     round trips, sent to the Manager's answer acknowledging them;
//   - leasehold_owner_answer_wait_longest_seconds: the longest any lease
//     request waited, since the Owner started, from being sent to the
//     first answer acknowledging it or a later request — what the
//     Manager's bounds on a held answer promise (an answer lost or held
//     shows here even when a later request's round trip is short);
//   - leasehold_owner_leases_lost_total: leases that ran out on this
//     Owner's clock because no renewal was answered in time (recalls and
//     handovers are not losses);
//   - leasehold_owner_check_refusals_total: CheckLeaseNow calls that found
//     no lease;
//   - leasehold_owner_ranges: leased ranges held.
//
// The gauges are read at scrape time. CheckLeaseNow pays one atomic
// increment on a refusal, with or without a registerer, and nothing on a
// hit: it allocates nothing either way.
type metrics struct {
	renewal prometheus.Histogram
	sent    map[uint64]time.Time // unanswered requests, by Seq (the loop's)
	longest atomic.Int64         // the longest answer wait, in nanoseconds
}

// registerMetrics registers the Owner's metrics with reg.
func (o *Owner) registerMetrics(reg prometheus.Registerer) error {
	labels := prometheus.Labels{"namespace": o.cfg.Namespace, "owner": o.cfg.ID}
	o.metrics = &metrics{
		renewal: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "leasehold_owner_renewal_seconds",
			Help:        "Round trip of the Owner's lease requests: sent to the Manager's answer acknowledging them.",
			Buckets:     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
			ConstLabels: labels,
		}),
		sent: map[uint64]time.Time{},
	}
	cs := []prometheus.Collector{
		o.metrics.renewal,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leasehold_owner_check_refusals_total", ConstLabels: labels,
			Help: "CheckLeaseNow calls that found no lease on the key.",
		}, func() float64 { return float64(o.refusals.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_owner_answer_wait_longest_seconds", ConstLabels: labels,
			Help: "The longest a lease request waited for the Manager's answer (sent to the first answer acknowledging it or a later one), since the Owner started.",
		}, func() float64 { return time.Duration(o.metrics.longest.Load()).Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leasehold_owner_leases_lost_total", ConstLabels: labels,
			Help: "Leases that ran out on the Owner's clock because no renewal was answered in time.",
		}, func() float64 { return float64(o.lost.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_owner_ranges", ConstLabels: labels,
			Help: "Leased ranges the Owner holds.",
		}, func() float64 { return float64(o.liveLeases()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_owner_renew_interval_seconds", ConstLabels: labels,
			Help: "How often the Owner renews its leases, by the Manager's timings.",
		}, func() float64 { return time.Duration(o.renew.Load()).Seconds() }),
		&remainingCollector{o: o, desc: prometheus.NewDesc("leasehold_owner_lease_remaining_seconds",
			"Time left on the Owner's lease that ends first, on its own clock; absent while it holds none.", nil, labels)},
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// liveLeases counts the published leases not yet expired.
func (o *Owner) liveLeases() int {
	h, now, n := o.held.Load(), time.Since(o.base), 0
	for _, u := range h.until {
		if now < u {
			n++
		}
	}
	return n
}

// remainingCollector reports the time left on the shortest lease held.
type remainingCollector struct {
	o    *Owner
	desc *prometheus.Desc
}

func (c *remainingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *remainingCollector) Collect(ch chan<- prometheus.Metric) {
	h, now := c.o.held.Load(), time.Since(c.o.base)
	least, any := time.Duration(0), false
	for _, u := range h.until {
		if u > now && (!any || u-now < least) {
			least, any = u-now, true
		}
	}
	if any {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, least.Seconds())
	}
}

// requestSent notes when the request numbered seq left (the loop's).
func (m *metrics) requestSent(seq uint64, now time.Time) {
	if m == nil {
		return
	}
	if len(m.sent) >= 64 {
		// No answer for 64 requests: keep the oldest, from which the
		// longest wait is measured, and time no more until one comes (an
		// answer acknowledges every earlier request and empties the map).
		return
	}
	m.sent[seq] = now
}

// answered observes the round trip of the request an answer acknowledges,
// and forgets it and every earlier one.
func (m *metrics) answered(ack uint64, now time.Time) {
	if m == nil {
		return
	}
	if at, ok := m.sent[ack]; ok {
		m.renewal.Observe(now.Sub(at).Seconds())
	}
	for seq, at := range m.sent {
		if seq <= ack {
			if w := int64(now.Sub(at)); w > m.longest.Load() {
				m.longest.Store(w)
			}
			delete(m.sent, seq)
		}
	}
}
