package kv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// MaxValueBytes is the largest value a Server accepts; a larger PUT body is
// answered 413 Request Entity Too Large.
const MaxValueBytes = 1 << 20

// ServerConfig configures a Server.
type ServerConfig struct {
	// Manager is the Manager's address, host:port, or a replicated
	// Manager's replicas' addresses, comma-separated (see the Manager field
	// of lookup.Config and owner.Config). Required.
	Manager string
	// Namespace is the key space to join; empty means "default".
	Namespace string
	// ID names this server among the Owners; it should stay the same across
	// restarts. Empty means the listen address (after Listen's port 0, if
	// any, is resolved).
	ID string
	// Listen is the HTTP listen address, host:port; port 0 picks a free
	// port (see Server.Addr). Required.
	Listen string
	// Advertise is where clients reach this server, registered with the
	// Manager for Lookups to return. Empty means the listen address, with an
	// unspecified host (":8001", "0.0.0.0:8001") replaced by 127.0.0.1.
	Advertise string
	// Timing is the Owner's timing until the Manager's arrives; the zero
	// value means protocol.Production(). The Owner adopts the Manager's
	// timings in any case.
	Timing protocol.Timing
	// Logger receives the server's and its Owner's logs; nil discards them.
	Logger *slog.Logger
}

// Server is a kv server: an HTTP front on an in-memory store whose keys it
// serves only while its Owner holds their leases.
type Server struct {
	cfg    ServerConfig
	lis    net.Listener
	http   *http.Server
	owner  *owner.Owner
	store  *store
	served chan error // the result of http.Server.Serve
	close  sync.Once
	err    error // Close's result, set once
}

// NewServer listens on cfg.Listen, starts an Owner that joins cfg.Manager,
// and serves HTTP until Close. It returns once the server is listening; the
// Owner's leases arrive as the Manager grants them, and until then every
// request is answered 421.
func NewServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Manager == "" {
		return nil, errors.New("kv: ServerConfig.Manager (the Manager's address) is required")
	}
	if cfg.Listen == "" {
		return nil, errors.New("kv: ServerConfig.Listen is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	addr := lis.Addr().String()
	if cfg.Advertise == "" {
		cfg.Advertise = reachable(lis.Addr())
	}
	if cfg.ID == "" {
		cfg.ID = addr
	}
	st := newStore()
	o, err := owner.New(ctx, owner.Config{
		Manager:   cfg.Manager,
		Namespace: cfg.Namespace,
		ID:        cfg.ID,
		Addr:      cfg.Advertise,
		Timing:    cfg.Timing,
		Logger:    cfg.Logger,
		OnChange:  func(owner.OwnershipChange) { st.sweep() },
	})
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("kv: %w", err)
	}
	st.setLeases(o)
	s := &Server{cfg: cfg, lis: lis, owner: o, store: st, served: make(chan error, 1)}
	s.http = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() { s.served <- s.http.Serve(lis) }()
	cfg.Logger.Info("kv server started", "addr", addr, "id", cfg.ID, "advertise", cfg.Advertise)
	return s, nil
}

// reachable turns a listen address into one a client can dial.
func reachable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}

// Addr returns the address the server listens on, with the port resolved.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// ID returns the server's Owner ID.
func (s *Server) ID() string { return s.cfg.ID }

// Advertise returns the address registered with the Manager.
func (s *Server) Advertise() string { return s.cfg.Advertise }

// shutdownGrace bounds how long Close waits for HTTP requests in flight.
// Requests take microseconds; what can linger is a connection a client
// opened but never used, which http.Server.Shutdown would wait 5 s for.
const shutdownGrace = time.Second

// Close stops serving HTTP (requests in flight get up to a second, or until
// ctx ends) and closes the Owner, which hands every range back to the
// Manager so the ranges move at once, waiting for the Manager's
// acknowledgement until ctx ends. The stored values are gone with the
// server.
func (s *Server) Close(ctx context.Context) error {
	s.close.Do(func() {
		sctx, cancel := context.WithTimeout(ctx, shutdownGrace)
		if s.http.Shutdown(sctx) != nil {
			s.http.Close() // drop the connections still open
		}
		cancel()
		var err error
		if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
		err = errors.Join(err, s.owner.Close(ctx))
		if err != nil {
			err = fmt.Errorf("kv: close %s: %w", s.cfg.ID, err)
		}
		s.err = err
		s.cfg.Logger.Info("kv server stopped", "id", s.cfg.ID)
	})
	return s.err
}

// handler routes the server's HTTP API.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /kv/{key}", s.handlePut)
	mux.HandleFunc("GET /kv/{key}", s.handleGet)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	return mux
}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, fmt.Sprintf("value larger than %d bytes", MaxValueBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the value: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.store.put(key, value); err != nil {
		http.Error(w, err.Error(), http.StatusMisdirectedRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	value, found, err := s.store.get(r.PathValue("key"))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusMisdirectedRequest)
	case !found:
		http.Error(w, "not found", http.StatusNotFound)
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(value)
	}
}
