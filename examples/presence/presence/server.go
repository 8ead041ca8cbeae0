package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// MaxStatusBytes is the largest status a heartbeat may carry (413 beyond).
const MaxStatusBytes = 1 << 10

// DefaultTTL is how long a device counts as online after its last
// heartbeat, unless ServerConfig.TTL says otherwise.
const DefaultTTL = 30 * time.Second

// ServerConfig configures a Server, as the kv example's: Manager and Listen
// are required; ID defaults to the listen address, Advertise to the listen
// address with an unspecified host made 127.0.0.1. TTL is DefaultTTL if 0.
type ServerConfig struct {
	Manager, Namespace, ID, Listen, Advertise string
	Timing                                    protocol.Timing
	TTL                                       time.Duration
	Logger                                    *slog.Logger
	// CertsDir is the certificates directory (leasehold cert): the Owner
	// dials the Manager with the certificate of its ID (owner.<ID>.crt;
	// ID is then required), and the server serves HTTPS with it, only to
	// clients that present a certificate of the same CA.
	CertsDir string
	// Insecure, without CertsDir, serves plain HTTP and lets the Owner dial
	// the Manager in plaintext (owner.Config.Insecure). One of the two is
	// required: plaintext is only ever chosen explicitly.
	Insecure bool
}

// Server is a presence server: the Owner of the users in its leased ranges.
type Server struct {
	cfg     ServerConfig
	lis     net.Listener
	http    *http.Server
	owner   *owner.Owner
	store   *store
	served  chan error
	stopped chan struct{}
	wg      sync.WaitGroup
	close   sync.Once
	err     error
}

// NewServer listens, starts an Owner, and serves HTTP until Close. Until
// leases arrive, every request is answered 421.
func NewServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Manager == "" || cfg.Listen == "" {
		return nil, errors.New("presence: ServerConfig.Manager and Listen are required")
	}
	if cfg.CertsDir == "" && !cfg.Insecure {
		return nil, errors.New("presence: set ServerConfig.CertsDir to serve and dial with mutual TLS, or Insecure: true for plaintext")
	}
	if cfg.CertsDir != "" && cfg.ID == "" {
		return nil, errors.New("presence: ServerConfig.ID is required with CertsDir (the name of its owner certificate)")
	}
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Owner, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("presence: ServerConfig.TTL %s is negative", cfg.TTL)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	if cfg.Advertise == "" {
		cfg.Advertise = lis.Addr().String()
		if a, ok := lis.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() {
			cfg.Advertise = net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
		}
	}
	if cfg.ID == "" {
		cfg.ID = lis.Addr().String()
	}
	s := &Server{cfg: cfg, lis: lis, served: make(chan error, 1), stopped: make(chan struct{})}
	ready := make(chan struct{})
	// Duty: a unique ID per server (the caller's; the listen address by
	// default). No Handovers: a moved user's statuses are lost, and the
	// devices republish them (C§2.1.2).
	o, err := owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{
			Manager:   cfg.Manager,
			Namespace: cfg.Namespace,
			Timing:    cfg.Timing,
			Logger:    cfg.Logger,
			CertsDir:  cfg.CertsDir,
			Insecure:  cfg.Insecure,
		},
		ID:   cfg.ID,
		Addr: cfg.Advertise,
		// Duty: never rely on OnChange: it only frees memory.
		OnChange: func(ch owner.OwnershipChange) {
			if <-ready; len(ch.Revoked) > 0 {
				s.store.sweep()
			}
		},
	})
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("presence: %w", err)
	}
	s.owner, s.store = o, newStore(o, cfg.TTL)
	close(ready)
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /presence/{user}/{device}", s.handleHeartbeat)
	mux.HandleFunc("GET /presence/{user}", s.handleQuery)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	go func() { s.served <- certs.ServeHTTP(s.http, lis, src) }()
	s.wg.Go(func() {
		t := time.NewTicker(cfg.TTL)
		defer t.Stop()
		for {
			select {
			case <-s.stopped:
				return
			case <-t.C:
				s.store.sweep()
			}
		}
	})
	return s, nil
}

// Addr is the listen address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// ID is the Owner ID.
func (s *Server) ID() string { return s.cfg.ID }

// Counts returns the users and devices the server stores now.
func (s *Server) Counts() (users, devices int) { return s.store.counts() }

// Close leaves: the Owner hands its ranges back (the Manager reassigns
// them at once and the Lookups report them lost, so the devices
// republish), then the server stops serving.
func (s *Server) Close(ctx context.Context) error {
	s.close.Do(func() {
		err := s.owner.Close(ctx)
		close(s.stopped)
		s.wg.Wait()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if s.http.Shutdown(sctx) != nil {
			s.http.Close()
		}
		cancel()
		if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		if err != nil {
			s.err = fmt.Errorf("presence: close %s: %w", s.cfg.ID, err)
		}
	})
	return s.err
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
	if err != nil {
		http.Error(w, "seq: want the heartbeat's counter, a decimal number", http.StatusBadRequest)
		return
	}
	status, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxStatusBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the status (at most %d bytes): %v", MaxStatusBytes, err), http.StatusRequestEntityTooLarge)
		return
	}
	if err := s.store.heartbeat(r.PathValue("user"), r.PathValue("device"), string(status), seq); err != nil {
		owner.Refuse(w, owner.RefusedNotOwner, err.Error()) // the Owner contract: 421
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleQuery(w http.ResponseWriter, r *http.Request) {
	a, err := s.store.query(r.PathValue("user"))
	if err != nil {
		owner.Refuse(w, owner.RefusedNotOwner, err.Error())
		return
	}
	a.Owner = s.cfg.ID
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(a)
}
