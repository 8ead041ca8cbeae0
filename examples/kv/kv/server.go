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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// MaxValueBytes is the largest value a Server accepts; a larger PUT body is
// answered 413 Request Entity Too Large.
const MaxValueBytes = 1 << 20

// MaxMigrateBytes is the largest body POST /internal/migrate accepts; a
// larger one is answered 413 before more is read. A server hands a range
// over in as many requests as it takes to stay under migrateBatchBytes
// (values, which base64 makes a third larger), so 8 MiB leaves room for a
// single value of MaxValueBytes and bounds what one request costs the
// receiver.
const MaxMigrateBytes = 8 << 20

// MaxMigrateWithin caps the deadline a sender of POST /internal/migrate
// gives (within_ms): the receiver keeps the values that long and a grace
// more, so a sender that names a longer one is refused (400) rather than
// pinning the values in memory. It is ten times the production owner
// lease, the default handover timeout.
const MaxMigrateWithin = 10 * time.Minute

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
	// any, is resolved), which must then name a host: with a wildcard
	// Listen (":8001", "0.0.0.0:8001", as in a container) every server
	// would take the same ID, so it is refused, as is an ID that is a
	// wildcard address.
	ID string
	// Listen is the HTTP listen address, host:port; port 0 picks a free
	// port (see Server.Addr). Required.
	Listen string
	// Advertise is where clients reach this server, registered with the
	// Manager for Lookups to return. Empty means the listen address; with a
	// wildcard Listen it is required (in Kubernetes, the pod's IP from the
	// downward API), since no client elsewhere reaches a wildcard, and
	// 127.0.0.1 reaches only this host.
	Advertise string
	// Timing is the Owner's timing until the Manager's arrives; the zero
	// value means protocol.Production(). The Owner adopts the Manager's
	// timings in any case.
	Timing protocol.Timing
	// Capacity weighs this server's share of the load against the others'
	// (owner.Config.Capacity); 0 means 1.
	Capacity float64
	// Logger receives the server's and its Owner's logs; nil discards them.
	Logger *slog.Logger
	// CertsDir, if set, is the certificates directory (leasehold cert):
	// the Owner dials the Manager with the certificate of its ID
	// (owner.<ID>.crt), and the server serves HTTPS with it, to clients
	// that present a certificate of the same CA: any role for the key API
	// and /metrics, and only an Owner of this namespace for the handover
	// (/internal/migrate), which it also sends with that certificate.
	CertsDir string
	// Insecure, without CertsDir, serves plain HTTP and lets the Owner dial
	// the Manager in plaintext (owner.Config.Insecure). One of the two is
	// required: plaintext is only ever chosen explicitly.
	Insecure bool
	// Zone is the server's failure domain (owner.Config.Zone): with
	// standbys, the Manager names each range's standby in another zone.
	Zone string
	// Standbys 1 takes part in standby Owners (docs/standbys.md): as holder
	// the server sends each write to its range's standby and acknowledges
	// it only once stored there, and fills the standbys named; as standby
	// it keeps the copy and serves from it when promoted. The namespace's
	// standbys are the Manager's setting; every server of a namespace with
	// standbys should run with 1. 0, the default, ignores standby roles.
	Standbys int

	net network // nil: the host's TCP (network.go)
}

// MaxStandbys is the most standbys a range may have.
const MaxStandbys = 1

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

	metrics *prometheus.Registry // the Owner's metrics and the process's, at GET /metrics
	ready   chan struct{}        // closed once owner and store are set up
	moves   *handovers           // outgoing handovers
	peers   *http.Client         // sends handovers to the other servers
	certs   *certs.Source        // nil: plain HTTP
	scheme  string               // of the other servers' URLs: http or https

	repl      *replicator // writes and fills to standbys
	sbMetrics *sbMetrics
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
	if cfg.CertsDir == "" && !cfg.Insecure {
		return nil, errors.New("kv: set ServerConfig.CertsDir to serve and dial with mutual TLS, or Insecure: true for plaintext")
	}
	if cfg.Standbys < 0 || cfg.Standbys > MaxStandbys {
		return nil, fmt.Errorf("kv: ServerConfig.Standbys %d: want 0 or %d (kv.MaxStandbys)", cfg.Standbys, MaxStandbys)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkWildcards(cfg); err != nil {
		return nil, err
	}
	lis, err := listenOn(cfg.net, cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	addr := lis.Addr().String()
	if cfg.Advertise == "" {
		cfg.Advertise = addr
	}
	if cfg.ID == "" {
		cfg.ID = addr
	}
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Owner, cfg.ID)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("kv: %w", err)
	}
	s := &Server{cfg: cfg, lis: lis, store: newStore(), served: make(chan error, 1), ready: make(chan struct{}), certs: src}
	t, scheme := certs.DialHTTP(src, certs.Owner)
	s.scheme = scheme
	s.peers = &http.Client{Transport: dialOver(t, cfg.net)}
	s.moves = newHandovers(s)
	s.repl = newReplicator(s)
	s.metrics = prometheus.NewRegistry()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.sbMetrics = newSBMetrics(s.metrics)
	o, err := owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{
			Registerer:  s.metrics,
			Manager:     cfg.Manager,
			Namespace:   cfg.Namespace,
			Timing:      cfg.Timing,
			Logger:      cfg.Logger,
			CertsDir:    cfg.CertsDir,
			Insecure:    cfg.Insecure,
			DialOptions: dialOptions(cfg.net),
		},
		ID:        cfg.ID,
		Addr:      cfg.Advertise,
		Capacity:  cfg.Capacity,
		Handovers: true,
		OnChange:  s.changed,
		Zone:      cfg.Zone,
	})
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("kv: %w", err)
	}
	s.owner = o
	if cfg.Standbys > 0 {
		s.store.setRoles(o, o)
	} else {
		s.store.setLeases(o)
	}
	close(s.ready)
	s.http = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() { s.served <- certs.ServeHTTP(s.http, lis, src) }()
	cfg.Logger.Info("kv server started", "addr", addr, "id", cfg.ID, "advertise", cfg.Advertise)
	return s, nil
}

// Addr returns the address the server listens on, with the port resolved.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// ID returns the server's Owner ID.
func (s *Server) ID() string { return s.cfg.ID }

// Advertise returns the address registered with the Manager.
func (s *Server) Advertise() string { return s.cfg.Advertise }

// ServerStats counts a Server's planned moves (C§2.1.2).
type ServerStats struct {
	// HandedOver is the ranges whose values this server handed to their
	// next owner, ValuesSent the values it sent with them, and
	// HandoverFailures the ranges it could not hand over in time (they
	// move without their values).
	HandedOver, ValuesSent, HandoverFailures int
	// ValuesPending is the values handed to this server for ranges not
	// granted to it yet; ValuesTakenUp those taken up with a migrated
	// grant, and ValuesDiscarded those thrown away (the grant was not
	// migrated, or they came too late).
	ValuesPending, ValuesTakenUp, ValuesDiscarded int
}

// Stats returns the server's counts of planned moves so far.
func (s *Server) Stats() ServerStats {
	var st ServerStats
	st.HandedOver, st.HandoverFailures, st.ValuesSent = s.moves.counts()
	st.ValuesPending, st.ValuesTakenUp, st.ValuesDiscarded = s.store.handedIn()
	return st
}

// shutdownGrace bounds how long Close waits for HTTP requests in flight.
// Requests take microseconds; what can linger is a connection a client
// opened but never used, which http.Server.Shutdown would wait 5 s for.
const shutdownGrace = time.Second

// changed is the Owner's OnChange upcall: it settles the values handed
// over with new grants, drops stale state, and starts the handovers the
// Manager asks for.
func (s *Server) changed(ch owner.OwnershipChange) {
	<-s.ready
	s.store.changed(ch)
	s.standbyChanged(ch)
	if len(ch.Handovers) > 0 {
		s.moves.start(ch.Handovers)
	}
}

// standbyChanged takes the standby part of an OnChange upcall: it fills
// the standbys newly named for this server's leases and drops the copies
// no pairing needs any more.
func (s *Server) standbyChanged(ch owner.OwnershipChange) {
	if s.cfg.Standbys == 0 {
		return
	}
	if ch.StandbyForChanged {
		s.store.standbyChanged()
	}
	if len(ch.Paired) > 0 {
		s.repl.changed(ch)
	}
}

// Close leaves gracefully. First it drains (owner.Owner.Close): the
// Manager moves every range to the other servers, and this one hands each
// range's values over to the next owner as it goes, serving reads and
// refusing writes on a moving range (503) meanwhile, so nothing is lost.
// That takes a few round trips, or until ctx ends; ranges still held then
// move without their values. Then it stops serving HTTP (requests in
// flight get up to a second). A ctx already done skips the drain: the
// values are lost, as in a crash, but the ranges move at once.
func (s *Server) Close(ctx context.Context) error {
	s.close.Do(func() {
		err := s.owner.Close(ctx)
		s.moves.stop()
		s.repl.stop()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		if s.http.Shutdown(sctx) != nil {
			s.http.Close() // drop the connections still open
		}
		cancel()
		if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		s.peers.CloseIdleConnections()
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
	mux.Handle("POST "+migratePath, certs.OwnersOnly(s.certs, s.cfg.Namespace, http.HandlerFunc(s.handleMigrate)))
	mux.Handle("POST "+replicatePath, certs.OwnersOnly(s.certs, s.cfg.Namespace, http.HandlerFunc(s.handleReplicate)))
	if s.metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{Registry: s.metrics}))
	}
	mux.HandleFunc("GET /standbys", s.handleStandbys)
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
	if err := s.put(r.Context(), key, value); err != nil {
		storeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// storeError answers a failed operation with the Owner refusal contract
// (owner.Refuse): 503 moving with Retry-After while the key's range moves
// with its state (the client retries, and reaches the new owner once the
// move is done), 421 not-owner when this server does not hold the key.
func storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, errMoving) || errors.Is(err, errArriving) || errors.Is(err, errStandby) || errors.Is(err, errStandbyUnknown) {
		owner.Refuse(w, owner.RefusedMoving, err.Error())
		return
	}
	owner.Refuse(w, owner.RefusedNotOwner, err.Error())
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	value, found, err := s.store.get(r.PathValue("key"))
	switch {
	case err != nil:
		storeError(w, err)
	case !found:
		http.Error(w, "not found", http.StatusNotFound)
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(value)
	}
}

// ManagerError returns why the server's Owner last failed to reach the
// Manager, or nil while it is connected (owner.Owner.ManagerError): a
// refusal of its certificate or namespace, which retrying does not lift,
// has status.Code PermissionDenied or Unauthenticated.
func (s *Server) ManagerError() error { return s.owner.ManagerError() }
