package pubsub

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// Limits (README, "Limits"), then the timings.
const (
	MaxMessageBytes  = 64 << 10    // a publish's body (413)
	MaxQueue         = 1024        // messages not yet written, per subscription
	IdleTTL          = time.Minute // how long a subscription with no stream is kept
	MaxHandoverBytes = 64 << 20    // a POST /internal/handover body (400)

	writeTimeout = 2 * time.Second // one event written to a stream
	publishWait  = 2 * time.Second // a publish waits this long for the writes
	sweepEvery   = 5 * time.Second // idle subscriptions and stale state dropped
	pendingTTL   = time.Minute     // handed-over state kept until its grant
	handoverPath = "/internal/handover"
)

// ServerConfig configures a Server: Manager and Listen are required; ID and
// Advertise default to the listen address.
type ServerConfig struct {
	Manager, Namespace, ID, Listen, Advertise string
	Timing                                    protocol.Timing
	Logger                                    *slog.Logger
	// CertsDir (leasehold cert) holds owner.<ID>.crt (with no ID, the only
	// owner certificate names it): mutual TLS to the Manager, the clients and
	// the other servers. Insecure: plaintext. One is required (owner.Config).
	CertsDir string
	Insecure bool
}

// Server is a pubsub server: the Owner of the topics in its leased ranges.
type Server struct {
	cfg    ServerConfig
	lis    net.Listener
	http   *http.Server
	owner  *owner.Owner
	topics *topics
	ctx    context.Context // cancelled by Close: handovers and the sweeper end
	stop   context.CancelFunc
	wg     sync.WaitGroup // handovers and the sweeper
	peers  *http.Client
	scheme string // of the other servers' URLs: http, or https with CertsDir
	close  sync.Once
	err    error
}

// NewServer listens, starts an Owner with handovers, and serves HTTP until
// Close. Until leases arrive, every request is refused.
func NewServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Listen == "" { // Manager: owner.Config checks it
		return nil, errors.New("pubsub: ServerConfig.Listen is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Owner, cfg.ID) // nil: plain HTTP
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	} else if src != nil {
		cfg.ID = src.Identity().Name
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	cfg.Advertise = cmp.Or(cfg.Advertise, lis.Addr().String())
	cfg.ID = cmp.Or(cfg.ID, lis.Addr().String())
	s := &Server{cfg: cfg, lis: lis, peers: &http.Client{}}
	s.peers.Transport, s.scheme = certs.DialHTTP(src, certs.Owner) // to the next Owner's certificate
	ready := make(chan struct{})
	// Duty: a unique ID per server (the caller's, its certificate's, or the
	// listen address). Handovers: the application moves subscriptions itself.
	s.owner, err = owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{
			Manager:   cfg.Manager,
			Namespace: cfg.Namespace,
			Timing:    cfg.Timing,
			Logger:    cfg.Logger,
			CertsDir:  cfg.CertsDir,
			Insecure:  cfg.Insecure,
		},
		ID:        cfg.ID,
		Addr:      cfg.Advertise,
		Handovers: true,
		OnChange: func(ch owner.OwnershipChange) {
			<-ready
			s.topics.changed(ch)
			for _, h := range ch.Handovers { // never blocking: later upcalls wait
				s.wg.Go(func() { s.handOver(h) })
			}
		},
	})
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	s.topics = newTopics(s.owner, MaxQueue, IdleTTL)
	s.ctx, s.stop = context.WithCancel(context.Background())
	close(ready)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sub/{topic}", s.handleSub)
	mux.HandleFunc("POST /pub/{topic}", s.handlePub)
	mux.Handle("POST "+handoverPath, certs.OwnersOnly(src, cfg.Namespace, http.HandlerFunc(s.handleHandover))) // no frontend plants subscriptions
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	go certs.ServeHTTP(s.http, lis, src)
	s.wg.Go(func() { // every 2.5 to 5 s (backoff with a fixed wait)
		for backoff(s.ctx, sweepEvery); s.ctx.Err() == nil; backoff(s.ctx, sweepEvery) {
			s.topics.sweep(false)
		}
	})
	return s, nil
}

// Addr is the listen address; ID the Owner ID.
func (s *Server) Addr() string { return s.lis.Addr().String() }
func (s *Server) ID() string   { return s.cfg.ID }

// Close drains, for as long as ctx allows: the Manager moves every range
// away with its subscriptions. Then it ends the streams left and stops.
func (s *Server) Close(ctx context.Context) error {
	s.close.Do(func() {
		if err := s.owner.Close(ctx); err != nil {
			s.err = fmt.Errorf("pubsub: close %s: %w", s.cfg.ID, err)
		}
		s.stop()
		s.wg.Wait()
		s.topics.sweep(true)
		s.http.Close()
		s.peers.CloseIdleConnections()
	})
	return s.err
}

// handleSub serves GET /sub/{topic}?id=ID[&last=MSGID]: events (doc.go).
func (s *Server) handleSub(w http.ResponseWriter, r *http.Request) {
	topic, id, last := r.PathValue("topic"), r.URL.Query().Get("id"), r.URL.Query().Get("last")
	if id == "" || len(id) > 256 || len(last) > 256 {
		http.Error(w, "id (the subscription's ID, at most 256 bytes) is required", http.StatusBadRequest)
		return
	}
	sb, st, fresh, why := s.topics.attach(topic, id, last)
	if why != "" {
		owner.Refuse(w, why, string(why)+": topic "+topic)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(e Event) error {
		data, _ := json.Marshal(e)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Kind, data)
		return cmp.Or(err, rc.Flush()) // the write's error, else the flush's
	}
	defer s.topics.detach(sb, st) // a no-op once the stream ended otherwise
	err := send(Event{Kind: "subscribed", New: fresh, Owner: s.cfg.ID})
	for err == nil {
		m, stop := s.topics.next(sb, st)
		switch {
		case stop != "":
			_ = send(Event{Kind: "end", Reason: stop})
			return
		case m != nil:
			err = send(Event{Kind: "message", Message: *m})
			s.topics.wrote(sb, st, err)
		default:
			select {
			case <-st.wake:
			case <-r.Context().Done():
				return
			}
		}
	}
}

// Published answers a publish: the subscriptions it was queued for, those
// with a stream open, and whether it was written to all of those first.
type Published struct {
	ID          string `json:"id"`
	Subscribers int    `json:"subscribers"`
	Attached    int    `json:"attached"`
	Written     bool   `json:"written"`
}

// handlePub serves POST /pub/{topic}[?id=MSGID] with the message as body.
func (s *Server) handlePub(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxMessageBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the message (at most %d bytes): %v", MaxMessageBytes, err), http.StatusRequestEntityTooLarge)
		return
	}
	id := cmp.Or(r.URL.Query().Get("id"), rand.Text())
	if len(id) > 256 || strings.ContainsAny(id, "\r\n") {
		http.Error(w, "id: at most 256 bytes, on one line", http.StatusBadRequest)
		return
	}
	p, written, why := s.topics.publish(r.PathValue("topic"), Message{ID: id, Data: string(data)})
	if why != "" {
		owner.Refuse(w, why, string(why)+": topic "+r.PathValue("topic"))
		return
	}
	select {
	case <-written:
		p.Written = true
	case <-time.After(publishWait):
	case <-r.Context().Done():
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(p)
}

// handoverRequest is the body of POST /internal/handover, which only the
// other servers send.
type handoverRequest struct {
	To     string           `json:"to"` // any other server refuses it
	Range  keyspace.Range   `json:"range"`
	Topics map[string][]sub `json:"topics"`
}

// handOver is a planned move (C§2.1.2): it copies h's subscriptions to the
// next owner, retrying until shortly before h's deadline (the Manager's
// started first), and ends the handover. The copy is taken up with the
// range's Migrated grant; the subscribers resume there after the last
// message they received.
func (s *Server) handOver(h owner.Handover) {
	body, _ := json.Marshal(handoverRequest{To: h.To, Range: h.Range, Topics: s.topics.beginHandover(h)})
	ctx, cancel := context.WithDeadline(s.ctx, h.Deadline.Add(-min(time.Until(h.Deadline)/10, 250*time.Millisecond)))
	defer cancel()
	err := errors.New("no time to send it")
	for wait := 10 * time.Millisecond; ctx.Err() == nil; wait = backoff(ctx, wait) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.scheme+"://"+h.Addr+handoverPath, bytes.NewReader(body))
		var resp *http.Response
		if resp, err = s.peers.Do(req); err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				break
			} else if err = fmt.Errorf("%s answered %s: %s", h.Addr, resp.Status, bytes.TrimSpace(msg)); resp.StatusCode < 500 {
				break // refused: it will not pass
			}
		}
	}
	// Duty (Config.Handovers): end every handover passed up, saying whether
	// the state reached h.To; without it the range moves without it.
	s.owner.HandoverDone(h, err == nil)
	if err != nil {
		s.topics.abortHandover(h)
		s.cfg.Logger.Warn("pubsub: handover failed; the range moves without its subscriptions", "to", h.To, "range", h.Range, "err", err)
	}
}

// handleHandover receives subscriptions handed over by another Owner of the
// namespace (certs.OwnersOnly); anything malformed or too large gets 400.
func (s *Server) handleHandover(w http.ResponseWriter, r *http.Request) {
	var req handoverRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxHandoverBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req) // a body over MaxHandoverBytes fails here
	if err == nil && !req.Range.Valid() {
		err = fmt.Errorf("invalid range %s", req.Range)
	}
	for topic, subs := range req.Topics {
		if err == nil && !req.Range.Contains(keyspace.KeyOf(topic)) {
			err = fmt.Errorf("topic %q is not in range %s", topic, req.Range)
		}
		if err == nil && slices.ContainsFunc(subs, func(sb sub) bool { return sb.ID == "" || len(sb.Queue) > MaxQueue }) {
			err = fmt.Errorf("topic %q: a subscription with no ID or more than %d messages", topic, MaxQueue)
		}
	}
	if err == nil && req.To != s.cfg.ID {
		err = fmt.Errorf("this server is %q, not %q", s.cfg.ID, req.To)
	}
	if err != nil {
		http.Error(w, "handover: "+err.Error(), http.StatusBadRequest)
		return
	}
	for topic, subs := range req.Topics {
		s.topics.receive(topic, subs)
	}
	w.WriteHeader(http.StatusNoContent)
}
