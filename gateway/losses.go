package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

// LossEvent is a loss notification as the gateway relays it: the soft
// state of every key in Ranges (or of every key, if All) in Namespace may
// be gone, so clients that stored state there should republish it. Its
// JSON is lookup.LossEvent's, the one loss schema (docs/protocol.md, "Loss
// events"), numbered by the gateway.
type LossEvent struct {
	lookup.LossEvent
	ranges []keyspace.Range
	owners []leasetable.OwnerRanges
}

// HexRange is a range [Start, End) in 0x-hex; the end of the key space is
// 0x10000000000000000.
type HexRange = lookup.HexRange

// Covers reports whether the loss covers key k.
func (e *LossEvent) Covers(k keyspace.Key) bool {
	return e.All || slices.ContainsFunc(e.ranges, func(r keyspace.Range) bool { return r.Contains(k) })
}

// lossLog keeps the latest loss notifications, numbered from 1, and wakes
// the streams at each new one.
type lossLog struct {
	keep int

	mu     sync.Mutex
	events []*LossEvent  // guarded by mu; the last keep, oldest first
	next   uint64        // guarded by mu; the next ID
	more   chan struct{} // guarded by mu; closed and replaced at each event
	subs   int           // guarded by mu; streams open
}

func newLossLog(keep int) *lossLog {
	return &lossLog{keep: keep, next: 1, more: make(chan struct{})}
}

func (l *lossLog) add(namespace string, loss lookup.Loss) {
	e := &LossEvent{LossEvent: lookup.NewLossEvent(0, namespace, time.Now(), loss), ranges: slices.Clone(loss.Ranges), owners: loss.Owners}
	l.mu.Lock()
	defer l.mu.Unlock()
	e.ID = l.next
	l.next++
	l.events = append(l.events, e)
	if len(l.events) > l.keep {
		l.events = slices.Delete(l.events, 0, len(l.events)-l.keep)
	}
	close(l.more)
	l.more = make(chan struct{})
}

// since returns the events kept with an ID above after, and a channel
// closed at the next event.
func (l *lossLog) since(after uint64) ([]*LossEvent, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.events, after+1, func(e *LossEvent, id uint64) int { return int(e.ID) - int(id) })
	return slices.Clone(l.events[i:]), l.more
}

// last returns the ID of the newest event, 0 before the first.
func (l *lossLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// get returns the event with ID id, if still kept.
func (l *lossLog) get(id uint64) (*LossEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.ID == id {
			return e, true
		}
	}
	return nil, false
}

func (l *lossLog) subscribers(delta int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs += delta
	return l.subs
}

// serveLosses streams loss notifications as Server-Sent Events: one event
// "loss" per notification, its data a LossEvent in JSON, its id the
// LossEvent's. ?namespace=NS keeps one namespace's; ?key=K keeps those
// that cover key K (hashed with keyspace.KeyOf). A client that reconnects
// with Last-Event-ID gets the events it missed, of the last 1024.
func (g *Gateway) serveLosses(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	ns, key := q.Get("namespace"), q.Get("key")
	if len(key) > g.cfg.MaxKeyBytes {
		http.Error(w, fmt.Sprintf("key of %d bytes: the limit is %d", len(key), g.cfg.MaxKeyBytes), http.StatusBadRequest)
		return
	}
	var after uint64
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("Last-Event-ID %q: want a number", id), http.StatusBadRequest)
			return
		}
		after = n
	} else {
		// A new subscriber hears of the losses from now on.
		g.losses.mu.Lock()
		after = g.losses.next - 1
		g.losses.mu.Unlock()
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, ": leasehold loss notifications\n\n")
	if rc.Flush() != nil {
		return
	}
	k := keyspace.KeyOf(key)
	_ = g.follow(r.Context(), after, func(e *LossEvent) bool { return (ns == "" || e.Namespace == ns) && (key == "" || e.Covers(k)) },
		func(e *LossEvent) error {
			b, _ := json.Marshal(e)
			_, err := fmt.Fprintf(w, "id: %d\nevent: loss\ndata: %s\n\n", e.ID, b)
			return err
		},
		rc.Flush,
		func() error { _, err := fmt.Fprintf(w, ": keepalive\n\n"); return err })
}

// idleEvery is how often a loss stream with nothing to say says so (SSE:
// a comment line), which keeps idle connections open through proxies.
const idleEvery = 15 * time.Second

// follow passes each loss notification after the ID after that keep
// selects to send, calls flush after each batch and idle every idleEvery
// without one, until ctx ends, the gateway stops, or a call fails. It
// counts the stream among the subscribers while it runs.
func (g *Gateway) follow(ctx context.Context, after uint64, keep func(*LossEvent) bool, send func(*LossEvent) error, flush, idle func() error) error {
	g.metrics.subscribers.Set(float64(g.losses.subscribers(1)))
	defer func() { g.metrics.subscribers.Set(float64(g.losses.subscribers(-1))) }()
	tick := time.NewTicker(idleEvery)
	defer tick.Stop()
	for {
		events, more := g.losses.since(after)
		for _, e := range events {
			after = e.ID
			if !keep(e) {
				continue
			}
			if err := send(e); err != nil {
				return err
			}
		}
		if err := flush(); err != nil {
			return err
		}
		select {
		case <-more:
		case <-tick.C:
			if err := idle(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stop:
			return nil
		}
	}
}

// serveCovers answers "does loss ID cover key K?": GET /v1/covers?id=N&key=K
// → {"id":N,"key":K,"hash":"0x…","covers":true|false}; 404 if the loss is no
// longer kept.
func (g *Gateway) serveCovers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, err := strconv.ParseUint(q.Get("id"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("id %q: want a loss's number", q.Get("id")), http.StatusBadRequest)
		return
	}
	key, ok := g.queryKey(w, r)
	if !ok {
		return
	}
	e, ok := g.losses.get(id)
	if !ok {
		http.Error(w, fmt.Sprintf("loss %d is not kept (the gateway keeps the last %d)", id, g.losses.keep), http.StatusNotFound)
		return
	}
	k := keyspace.KeyOf(key)
	writeJSON(w, map[string]any{"id": id, "key": key, "hash": hexKey(k), "covers": e.Covers(k)})
}

// serveKey says where a key is: GET /v1/key?key=K[&namespace=NS] →
// {"key":K,"hash":"0x…","namespace":NS,"owner":ID,"lgn":N}, for clients that
// cannot hash with xxhash64 themselves.
func (g *Gateway) serveKey(w http.ResponseWriter, r *http.Request) {
	key, ok := g.queryKey(w, r)
	if !ok {
		return
	}
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	k := keyspace.KeyOf(key)
	out := map[string]any{"key": key, "hash": hexKey(k), "namespace": ns}
	if sp := g.spaces[ns]; sp != nil {
		if route, ok := sp.router.Lookup(k); ok {
			out["owner"], out["lgn"] = route.Owner, uint64(route.LGN)
		}
	}
	writeJSON(w, out)
}

func (g *Gateway) queryKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.URL.Query().Get("key")
	switch {
	case key == "":
		http.Error(w, "no key: give ?key=K", http.StatusBadRequest)
		return "", false
	case len(key) > g.cfg.MaxKeyBytes:
		http.Error(w, fmt.Sprintf("key of %d bytes: the limit is %d", len(key), g.cfg.MaxKeyBytes), http.StatusBadRequest)
		return "", false
	}
	return key, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func hexKey(k keyspace.Key) string { return fmt.Sprintf("0x%016x", uint64(k)) }
