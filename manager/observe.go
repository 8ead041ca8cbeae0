package manager

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// latencyBuckets are the histograms' buckets, in seconds: renewals are
// answered in a round of Raft (a heartbeat round or an fsync), and changes
// reach the Lookups within a push interval.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// serverMetrics are the metrics the loop and the gRPC handlers measure as
// they go, rather than read from a Snapshot.
type serverMetrics struct {
	renewal     prometheus.Histogram
	propagation prometheus.Histogram
	losses      *prometheus.CounterVec
	peerRTT     *prometheus.HistogramVec
	limits      *prometheus.CounterVec
}

func newServerMetrics() *serverMetrics {
	return &serverMetrics{
		limits: newLimitRefusals(),
		renewal: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_renewal_answer_seconds",
			Help:    "Time from an Owner's lease request arriving to the leader's answer being handed to its stream (the answer waits for the proof that this replica still leads).",
			Buckets: latencyBuckets,
		}),
		propagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_propagation_seconds",
			Help:    "Time from a change of the lease table being applied on this replica to its push being handed to the stream of every Lookup connected to it.",
			Buckets: latencyBuckets,
		}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_loss_notifications_total",
			Help: "Ranges whose holder's soft state is lost (freed, or granted without migration), per namespace: each makes every Lookup raise a loss notification.",
		}, []string{"namespace"}),
		peerRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_raft_peer_round_trip_seconds",
			Help:    "On the leader, time from a Raft heartbeat sent to a replica to its answer arriving, per replica (label peer, its Raft ID).",
			Buckets: latencyBuckets,
		}, []string{"peer"}),
	}
}

func (m *serverMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.renewal, m.propagation, m.losses, m.peerRTT, m.limits}
}

// observer is the loop's bookkeeping for the measured metrics.
type observer struct {
	// asked is when each Owner's oldest unanswered request arrived.
	asked map[routeKey]time.Time
	// ns is each namespace's view of the table, as a Lookup's, and its
	// changes not yet pushed to every Lookup.
	ns map[string]*nsObserver
	// members is each namespace's Owners as last published, to log
	// membership changes.
	members map[string]map[string]lease.OwnerRecord
	// heartbeats is when the oldest unanswered heartbeat to each replica
	// was sent.
	heartbeats map[uint64]time.Time
}

// heartbeatSent notes a heartbeat to replica id, unless one is unanswered.
func (o *observer) heartbeatSent(id uint64, now time.Time) {
	if o.heartbeats == nil {
		o.heartbeats = map[uint64]time.Time{}
	}
	if _, ok := o.heartbeats[id]; !ok {
		o.heartbeats[id] = now
	}
}

// heartbeatAnswered observes the round trip to replica id.
func (o *observer) heartbeatAnswered(m *serverMetrics, id uint64, now time.Time) {
	if at, ok := o.heartbeats[id]; ok {
		delete(o.heartbeats, id)
		m.peerRTT.WithLabelValues(strconv.FormatUint(id, 10)).Observe(now.Sub(at).Seconds())
	}
}

type nsObserver struct {
	view    *leasetable.View
	pending []commitAt
}

type commitAt struct {
	lsn keyspace.LSN
	at  time.Time
}

// maxPending bounds the changes awaiting their push, per namespace: a
// Lookup that never catches up must not grow the Manager's memory.
const maxPending = 4096

// asked notes the arrival of an Owner's request that the leader accepted.
func (o *observer) noteAsked(k routeKey, at time.Time) {
	if o.asked == nil {
		o.asked = map[routeKey]time.Time{}
	}
	if _, ok := o.asked[k]; !ok {
		o.asked[k] = at
	}
}

// answered notes that an answer went to k's stream.
func (o *observer) answered(m *serverMetrics, k routeKey, now time.Time) {
	if at, ok := o.asked[k]; ok {
		m.renewal.Observe(now.Sub(at).Seconds())
		delete(o.asked, k)
	}
}

// noteCommits records the table changes applied since the last call: when
// they were applied, for the propagation lag, and which of them lose a
// holder's state, by applying them to a copy of the table as a Lookup does
// (leasetable.View.Apply names the ranges whose loss it would report).
//
// It logs each change at debug level (owner, range, LGN) and each loss at
// info.
func (o *observer) noteCommits(m *serverMetrics, log *slog.Logger, st *lease.State, now time.Time) {
	if o.ns == nil {
		o.ns = map[string]*nsObserver{}
	}
	for _, name := range st.Namespaces() {
		t := st.Table(name)
		n := o.ns[name]
		if n == nil || n.view.LSN() > t.LSN() {
			// New, or the state was replaced (a snapshot installed):
			// start over from the table as it is, counting nothing.
			n = &nsObserver{view: leasetable.NewView()}
			o.ns[name] = n
			m.losses.WithLabelValues(name) // present from the start, at 0
			_, _ = n.view.Apply(t.Snapshot())
			continue
		}
		if t.LSN() == n.view.LSN() {
			continue
		}
		u := t.Since(n.view.LSN())
		if log.Enabled(context.Background(), slog.LevelDebug) {
			for _, c := range u.Changes {
				log.Debug("lease table change", "namespace", name, "lsn", c.LSN, "range", c.Range.String(),
					"owner", c.Entry.Owner, "lgn", c.Entry.LGN, "migrated", c.Entry.Migrated)
			}
		}
		lost, err := n.view.Apply(u)
		if err != nil {
			delete(o.ns, name) // cannot happen; start over next time
			continue
		}
		if len(lost) > 0 {
			m.losses.WithLabelValues(name).Add(float64(len(lost)))
			log.Info("loss notification", "namespace", name, "lsn", t.LSN(), "ranges", len(lost), "first", lost[0].String())
		}
		if len(n.pending) == maxPending {
			n.pending = n.pending[1:]
		}
		n.pending = append(n.pending, commitAt{t.LSN(), now})
	}
}

// pushed observes the propagation lag of every change that has now been
// handed to every Lookup of its namespace connected here.
func (o *observer) pushed(m *serverMetrics, lookups map[uint64]*lookupStream, now time.Time) {
	for name, n := range o.ns {
		if len(n.pending) == 0 {
			continue
		}
		least, any := keyspace.LSN(0), false
		for _, st := range lookups {
			if st.ns == name && (!any || st.sent < least) {
				least, any = st.sent, true
			}
		}
		if !any {
			n.pending = n.pending[:0] // nobody to push to
			continue
		}
		i := 0
		for ; i < len(n.pending) && n.pending[i].lsn <= least; i++ {
			m.propagation.Observe(now.Sub(n.pending[i].at).Seconds())
		}
		n.pending = append(n.pending[:0], n.pending[i:]...)
	}
}

// noteMembers logs, at info, the Owners that joined, left, restarted or
// started draining since the last call (publish calls it).
func (o *observer) noteMembers(log *slog.Logger, st *lease.State) {
	if o.members == nil {
		o.members = map[string]map[string]lease.OwnerRecord{}
	}
	for _, name := range st.Namespaces() {
		now := st.Owners(name)
		was, seen := o.members[name]
		o.members[name] = maps.Clone(now)
		if !seen {
			continue // the first view: nothing changed yet
		}
		for _, id := range slices.Sorted(maps.Keys(now)) {
			r, old := now[id], was[id]
			switch {
			case r.Member && !old.Member:
				log.Info("owner joined", "namespace", name, "owner", id, "addr", r.Addr, "incarnation", r.Incarnation)
			case !r.Member && old.Member:
				log.Info("owner left", "namespace", name, "owner", id, "incarnation", r.Incarnation)
			case r.Member && r.Incarnation != old.Incarnation:
				log.Info("owner restarted", "namespace", name, "owner", id, "incarnation", r.Incarnation)
			}
			if r.Draining && !old.Draining {
				log.Info("owner draining", "namespace", name, "owner", id)
			}
		}
		for id, old := range was {
			if _, ok := now[id]; !ok && old.Member {
				log.Info("owner left", "namespace", name, "owner", id, "incarnation", old.Incarnation)
			}
		}
	}
}
