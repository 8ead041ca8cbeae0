// Package agent is leasehold agent: a process beside one application, on
// the same host, that holds leases for it with the owner library and
// serves it the local API of proto/leasehold/v1/agent.proto over a Unix
// socket (or loopback TCP), as gRPC and as an HTTP/JSON mirror. The
// contract the application keeps, and why single copy holds, are in
// docs/agent.md.
//
// The package is internal: the published contract is the .proto file and
// the HTTP mirror, not a Go API. A Go server links the owner library.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// Limits on what the application sends, as every listener of the project
// bounds its input.
const (
	// MaxMessageBytes bounds one AppMessage or CheckRequest, in JSON or
	// protobuf.
	MaxMessageBytes = 64 << 10
	// MaxLoadKeys bounds the key counts of one AppMessage.
	MaxLoadKeys = 1024
	// MaxHandoverResults bounds the handover results of one AppMessage.
	MaxHandoverResults = 1024
	// eventQueue is how many events may wait for a slow application before
	// the agent ends its session as stalled.
	eventQueue = 256
)

// Config configures an Agent.
type Config struct {
	// Owner is the Owner the agent runs for the application: its ID,
	// address, Manager and certificate. The agent sets OnChange, Handovers
	// and ConfirmReleases itself.
	Owner owner.Config
	// Heartbeat is the longest the agent goes without an event (renewals
	// move deadlines without changing the held set); 0 means Renew/2 of
	// Owner.Timing.
	Heartbeat time.Duration
	// AppTimeout is the longest the application may go without a message
	// before its session is ended as stalled; 0 means OwnerLease/2.
	AppTimeout time.Duration
	// DrainTimeout bounds a drain the application asks for; 0 means three
	// OwnerLeases.
	DrainTimeout time.Duration
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// Agent holds leases for one application at a time.
type Agent struct {
	cfg Config

	mu      sync.Mutex
	current *session // nil between sessions
	nextID  uint64   // session numbers
}

// ErrBusy refuses a second session while one is open.
var ErrBusy = errors.New("agent: a session is open already; one application per agent")

// New returns an Agent; it holds nothing until an application opens a
// session.
func New(cfg Config) (*Agent, error) {
	if !monoSupported {
		return nil, errors.New("agent: this platform has no CLOCK_MONOTONIC to give deadlines on")
	}
	if cfg.Owner.Timing == (protocol.Timing{}) {
		cfg.Owner.Timing = protocol.Production()
	}
	t := cfg.Owner.Timing
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = t.Renew / 2
	}
	if cfg.AppTimeout == 0 {
		cfg.AppTimeout = t.OwnerLease / 2
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 3 * t.OwnerLease
	}
	if cfg.Heartbeat <= 0 || cfg.Heartbeat >= cfg.AppTimeout {
		return nil, fmt.Errorf("agent: heartbeat %s must be positive and shorter than the application timeout %s", cfg.Heartbeat, cfg.AppTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Owner.Logger == nil {
		cfg.Owner.Logger = cfg.Logger
	}
	return &Agent{cfg: cfg}, nil
}

// open starts a session: a new Owner, a new incarnation, for the
// application that just connected.
func (a *Agent) open(ctx context.Context) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current != nil {
		return nil, ErrBusy
	}
	a.nextID++
	s := newSession(a, fmt.Sprintf("s%d-%d", a.nextID, monoNow()))
	oc := a.cfg.Owner
	oc.Handovers, oc.ConfirmReleases, oc.OnChange = true, true, s.onChange
	o, err := owner.New(ctx, oc)
	if err != nil {
		return nil, err
	}
	s.start(o)
	a.current = s
	a.cfg.Logger.Info("agent: session opened", "session", s.id, "owner", oc.ID)
	return s, nil
}

// session returns the open session if it is named id.
func (a *Agent) session(id string) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == nil || a.current.id != id {
		return nil
	}
	return a.current
}

// closed forgets s once its Owner is stopped.
func (a *Agent) closed(s *session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == s {
		a.current = nil
	}
}

// open session, or nil.
func (a *Agent) openSession() *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.current
}

// Shutdown ends the open session, if any, for the agent's own exit: it
// drains first (the application hands its ranges over), for at most ctx.
func (a *Agent) Shutdown(ctx context.Context) {
	a.mu.Lock()
	s := a.current
	a.mu.Unlock()
	if s == nil {
		return
	}
	s.drainFor(ctx)
	// Leave only once the application has applied the drained event; else
	// stop renewing, so that nothing it may still believe is freed early.
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
wait:
	for !s.drainedApplied() {
		select {
		case <-t.C:
		case <-ctx.Done():
			break wait
		case <-s.endc:
			break wait
		}
	}
	s.end("the agent is shutting down")
	<-s.stopped
}

// DrainTimeout is how long a drain may take.
func (a *Agent) DrainTimeout() time.Duration { return a.cfg.DrainTimeout }
