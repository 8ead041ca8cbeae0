package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus metrics, on its own registry.
type metrics struct {
	reg         *prometheus.Registry
	handler     http.Handler
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	attempts    *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	shed        *prometheus.CounterVec
	losses      *prometheus.CounterVec
	subscribers prometheus.Gauge
	webhook     *prometheus.CounterVec
}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_gateway_requests_total", Help: "Requests answered, by route and status (route \"\": no route matched; 499: the client went away).",
	}, []string{"route", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "leasehold_gateway_request_duration_seconds", Help: "Time from a request's arrival to its answer, retries included, by route.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
	}, []string{"route"})
	m.attempts = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "leasehold_gateway_owner_attempt_duration_seconds", Help: "Time of one attempt at an Owner, from sending to the answer's headers, by Owner and outcome (answered, refused, failed).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
	}, []string{"owner", "outcome"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_gateway_retries_total", Help: "Attempts made again, by route and reason (refused-not-owner, refused-moving, no-owner, owner-busy, unreachable).",
	}, []string{"route", "reason"})
	m.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_gateway_shed_total", Help: "Requests shed by admission control, by namespace and priority class.",
	}, []string{"namespace", "class"})
	m.losses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_gateway_losses_total", Help: "Loss notifications received from the Lookups, by namespace.",
	}, []string{"namespace"})
	m.subscribers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_gateway_loss_subscribers", Help: "Open /v1/losses streams.",
	})
	m.webhook = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_gateway_webhook_total", Help: "Loss notifications to webhooks, by URL and result (delivered, failed: an attempt to retry, forgotten: dropped before delivery).",
	}, []string{"url", "result"})
	m.reg.MustRegister(m.webhook)
	m.reg.MustRegister(m.requests, m.latency, m.attempts, m.retries, m.shed, m.losses, m.subscribers)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// addSpace adds a namespace's gauges.
func (m *metrics) addSpace(sp *space) {
	labels := prometheus.Labels{"namespace": sp.name}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_gateway_in_flight", Help: "Requests holding a slot of the namespace's admission control.", ConstLabels: labels},
			func() float64 { n, _ := sp.adm.load(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_gateway_queued", Help: "Requests waiting for a slot.", ConstLabels: labels},
			func() float64 { _, q := sp.adm.load(); return float64(q) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_gateway_copy_lsn", Help: "The LSN of the gateway's copy of the namespace's lease table.", ConstLabels: labels},
			func() float64 { return float64(sp.router.LSN()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_gateway_copy_age_seconds", Help: "The age of the namespace's copy of the lease table: time since the newest sync it reflects was sent (lookup.CopyAge).", ConstLabels: labels},
			func() float64 { return sp.router.Age().Age.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_gateway_copy_stale", Help: "1 while the namespace's copy is stale: older than a copy in touch with the Manager ever is.", ConstLabels: labels},
			func() float64 {
				if _, stale := sp.stale(); stale {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_gateway_synced", Help: "1 once the namespace's copy has synced with the Manager.", ConstLabels: labels},
			func() float64 {
				if sp.synced.Load() {
					return 1
				}
				return 0
			}),
	)
}
