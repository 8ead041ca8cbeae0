package dashboard

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

//go:embed web
var web embed.FS

var page = template.Must(template.ParseFS(web, "web/index.html"))

// keepAlive is how often an idle event stream gets a comment line, so
// proxies and browsers do not time it out.
const keepAlive = 15 * time.Second

// writeTimeout bounds the writing of one view to one viewer.
const writeTimeout = 30 * time.Second

// maxDrainBody bounds a drain request's body.
const maxDrainBody = 4 << 10

// Handler returns the dashboard's HTTP handler:
//
//	GET  /             the page (html/template)
//	GET  /static/…     its script and style sheet (embedded)
//	GET  /events       the views, as server-sent events (one "view" event each)
//	GET  /api/view     the last view, JSON (503 before the first)
//	GET  /api/segment  ?ns=NS&at=F&arc=A: the range at fraction F of the key
//	                   space, and how many ranges lie in arc A of the drawn band
//	GET  /api/key      ?ns=NS&key=K: which Owner holds key K, since when
//	POST /api/drain    {"namespace":"NS","owner":"ID"}: drain an Owner
//
// title names the Manager on the page.
func (h *Hub) Handler(title string) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(web, "web")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, struct {
			Title    string
			ReadOnly bool
		}{title, h.cfg.ReadOnly})
	})
	mux.HandleFunc("GET /events", h.serveEvents)
	mux.HandleFunc("GET /api/view", func(w http.ResponseWriter, r *http.Request) {
		v := h.Latest()
		if v == nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "no view yet: the dashboard has not heard from the Manager", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(v)
	})
	mux.HandleFunc("GET /api/segment", h.serveSegment)
	mux.HandleFunc("GET /api/key", h.serveKey) // server_key.go
	mux.HandleFunc("POST /api/drain", h.serveDrain)
	return mux
}

// serveEvents writes every view built while the viewer stays, newest
// only: a slow viewer skips views, never delays the others.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	v := h.subscribe()
	if v == nil {
		http.Error(w, fmt.Sprintf("too many viewers (at most %d)", h.cfg.MaxViewers), http.StatusServiceUnavailable)
		return
	}
	defer h.unsubscribe(v)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	rc := http.NewResponseController(w)
	send := func() error {
		b := h.Latest()
		if b == nil {
			return nil
		}
		// A viewer that stops reading is dropped, freeing its place.
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	}
	if send() != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-v.ch:
			if send() != nil {
				return
			}
		case <-tick.C:
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

type segmentJSON struct {
	Start    string  `json:"start"`
	End      string  `json:"end"`
	Owner    string  `json:"owner"` // "" when free
	Addr     string  `json:"addr"`
	LGN      uint64  `json:"lgn"`
	Migrated bool    `json:"migrated"`
	LSN      uint64  `json:"lsn"`
	Load     float64 `json:"load"`     // the holder's, requests per second
	Capacity float64 `json:"capacity"` // the holder's
	InArc    int     `json:"inArc"`    // ranges in the arc under the pointer
}

func (h *Hub) serveSegment(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := q.Get("ns")
	at, err := strconv.ParseFloat(q.Get("at"), 64)
	if err != nil || at < 0 || at >= 1 || math.IsNaN(at) {
		http.Error(w, "at: want a fraction of the key space in [0, 1)", http.StatusBadRequest)
		return
	}
	arc, err := strconv.Atoi(q.Get("arc"))
	if err != nil || arc < 0 || arc >= h.cfg.Buckets {
		http.Error(w, fmt.Sprintf("arc: want an integer in [0, %d)", h.cfg.Buckets), http.StatusBadRequest)
		return
	}
	k := keyspace.Key(min(math.Ldexp(at, 64), math.MaxUint64-2048)) // float64 rounds near 2^64
	shift := 64 - uint(math.Log2(float64(h.cfg.Buckets)))
	from := keyspace.Key(uint64(arc) << shift)
	to := from + keyspace.Key(uint64(1)<<shift-1)
	s, n, lsn, ok := h.segment(ns, k, from, to)
	if !ok {
		http.Error(w, "no such namespace, or no range there", http.StatusNotFound)
		return
	}
	out := segmentJSON{Start: hexKey(s.Range.Start), End: hexEnd(s.Range), Owner: s.Entry.Owner, Addr: s.Entry.Addr,
		LGN: uint64(s.Entry.LGN), Migrated: s.Entry.Migrated, LSN: uint64(lsn), InArc: n}
	if o, ok := h.owner(ns, s.Entry.Owner); ok {
		out.Load, out.Capacity = o.Load, o.Capacity
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// ActionHeader must be set on a drain request: a browser sends a custom
// header cross-origin only after a preflight the dashboard never grants,
// so another site's page cannot drain an Owner through a viewer's browser.
const ActionHeader = "X-Leasehold-Action"

type drainRequest struct {
	Namespace string `json:"namespace"`
	Owner     string `json:"owner"`
}

type drainAnswer struct {
	OK     bool   `json:"ok"`
	Answer string `json:"answer"`
}

func (h *Hub) serveDrain(w http.ResponseWriter, r *http.Request) {
	if h.cfg.ReadOnly {
		http.Error(w, "this dashboard is read-only (--read-only)", http.StatusForbidden)
		return
	}
	if r.Header.Get(ActionHeader) != "drain" {
		http.Error(w, "missing "+ActionHeader+": drain", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	var req drainRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxDrainBody)).Decode(&req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.Namespace == "" || req.Owner == "" {
		http.Error(w, "bad request: namespace and owner are required", http.StatusBadRequest)
		return
	}
	answer, err := h.Drain(r.Context(), req.Namespace, req.Owner)
	out := drainAnswer{OK: err == nil, Answer: answer}
	if err != nil {
		out.Answer = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// sameOrigin reports whether a request's Origin, when a browser sent one,
// names the host the request was sent to, and that host is a loopback
// address or name: a page on another site, or a DNS name rebound to
// 127.0.0.1, is refused. Over TLS any name is: a name rebound to the
// dashboard's address does not match its certificate, so the browser
// never sends the request.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return false
	}
	if r.TLS != nil {
		return true
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil // an address, not a name that could be rebound
}
