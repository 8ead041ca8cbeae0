package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// ServerConfig configures a Server. The zero value serves the default
// namespace with production timings.
type ServerConfig struct {
	// Timing is the protocol's timers; the zero value means
	// protocol.Production(). Owners and Lookups adopt the Manager's timings.
	Timing protocol.Timing
	// Namespaces served besides DefaultNamespace.
	Namespaces []string
	// Policy computes assignments; nil means consistent hashing with 64
	// virtual nodes per owner.
	Policy assign.Policy
	// Epoch names this Manager's state; 0 means the start time in Unix
	// nanoseconds, which grows across restarts as the protocol requires.
	Epoch uint64
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// MaxRequestRate caps the requests per second one stream may send, with
	// bursts of twice that; a stream over it is closed with
	// ResourceExhausted. 0 means 50.
	MaxRequestRate float64
	// MaxMessageBytes caps the size of a message a client may send; 0 means
	// 4 MiB.
	MaxMessageBytes int
}

func (c *ServerConfig) setDefaults() error {
	if c.Timing == (protocol.Timing{}) {
		c.Timing = protocol.Production()
	}
	if err := c.Timing.Validate(); err != nil {
		return err
	}
	if c.Epoch == 0 {
		c.Epoch = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxRequestRate == 0 {
		c.MaxRequestRate = 50
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 4 << 20
	}
	for _, ns := range c.Namespaces {
		if ns == "" || len(ns) > wire.MaxStringLen {
			return fmt.Errorf("manager: invalid namespace name %q", ns)
		}
	}
	return nil
}

// Server is the Manager's runtime: it runs a Core on one goroutine and
// serves the Leases, Lookups and Admin gRPC services around it.
type Server struct {
	pb.UnimplementedLeasesServer
	pb.UnimplementedLookupsServer
	pb.UnimplementedAdminServer

	cfg        ServerConfig
	namespaces map[string]bool
	events     chan event
	stopped    chan struct{} // closed when the loop ends
	running    atomic.Bool
	stats      atomic.Pointer[Snapshot]
	sessions   atomic.Uint64 // lookup session IDs
}

// NewServer validates cfg and returns a Server. Call Serve, or Register and
// Run, to start it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		namespaces: map[string]bool{DefaultNamespace: true},
		events:     make(chan event, 1024),
		stopped:    make(chan struct{}),
	}
	for _, ns := range cfg.Namespaces {
		s.namespaces[ns] = true
	}
	s.stats.Store(&Snapshot{Epoch: cfg.Epoch})
	return s, nil
}

// Register adds the server's services to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterLeasesServer(g, s)
	pb.RegisterLookupsServer(g, s)
	pb.RegisterAdminServer(g, s)
}

// GRPCOptions are the server options Serve uses: message size limits.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes)}
}

// Serve runs the Manager on lis until ctx is cancelled, then stops
// gracefully: streams are closed and Run's loop ends.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	g := grpc.NewServer(s.GRPCOptions()...)
	s.Register(g)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		g.Stop() // ends every stream now; the loop is stopping too
	}()
	loopErr := make(chan error, 1)
	go func() { loopErr <- s.Run(ctx) }()
	err := g.Serve(lis)
	cancel()
	wg.Wait()
	if lerr := <-loopErr; err == nil || errors.Is(err, grpc.ErrServerStopped) {
		err = lerr
	}
	return err
}

// Snapshot is what the Manager looked like after its last step, for
// metrics and status.
type Snapshot struct {
	Epoch      uint64
	Stats      Stats
	Namespaces []NamespaceSnapshot
}

// NamespaceSnapshot describes one namespace.
type NamespaceSnapshot struct {
	Name         string
	LSN          keyspace.LSN
	Segments     int
	FreeSegments int
	Lookups      int
	Owners       []OwnerInfo
}

// Snapshot returns the state published after the loop's last step.
func (s *Server) Snapshot() *Snapshot { return s.stats.Load() }

type event interface{}

type leaseEvent struct {
	st   *ownerStream
	req  *protocol.LeaseRequest
	errc chan error
}

type syncEvent struct {
	st   *lookupStream
	req  *protocol.SyncRequest
	errc chan error
}

type closeEvent struct {
	owner  *ownerStream
	lookup *lookupStream
}

type ownerStream struct{ out chan *pb.LeaseResponse }

type lookupStream struct {
	id  uint64
	ns  string
	out chan *pb.SyncResponse
}

type routeKey struct{ ns, owner string }

// loop is the state owned by Run's goroutine.
type loop struct {
	s       *Server
	core    *Core
	routes  map[routeKey]*ownerStream
	lookups map[uint64]*lookupStream
	dropped uint64
	// stale says the snapshot is older than the core's state; it is
	// published at publishAt.
	stale     bool
	publishAt time.Time
}

// Run runs the Manager's core until ctx is cancelled. All of the core's work
// happens on this one goroutine; stream handlers hand it events.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("manager: Run called twice")
	}
	defer close(s.stopped)
	l := &loop{
		s:       s,
		core:    NewCore(CoreConfig{Timing: s.cfg.Timing, Policy: s.cfg.Policy, Epoch: s.cfg.Epoch, Namespaces: s.cfg.Namespaces}, time.Now()),
		routes:  map[routeKey]*ownerStream{},
		lookups: map[uint64]*lookupStream{},
	}
	s.cfg.Logger.Info("manager started", "epoch", s.cfg.Epoch, "namespaces", l.core.Namespaces(),
		"owner_lease", s.cfg.Timing.OwnerLease, "manager_lease", s.cfg.Timing.ManagerLease)
	l.publish()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		l.flush()
		next := l.core.NextDeadline()
		if l.stale && l.publishAt.Before(next) {
			next = l.publishAt
		}
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			s.cfg.Logger.Info("manager stopped")
			return nil
		case ev := <-s.events:
			l.handle(ev)
			l.changed()
		case <-timer.C:
			if !time.Now().Before(l.core.NextDeadline()) {
				l.core.Tick(time.Now())
				l.changed()
			}
		}
	}
}

func (l *loop) handle(ev event) {
	now := time.Now()
	switch ev := ev.(type) {
	case leaseEvent:
		err := l.core.StepLease(now, ev.req)
		if err == nil {
			// Answers go to the stream the owner last spoke on.
			l.routes[routeKey{ev.req.Namespace, ev.req.Owner}] = ev.st
		}
		ev.errc <- err
	case syncEvent:
		if ev.st.ns == "" {
			ev.st.ns = ev.req.Namespace
		}
		var err error
		if ev.req.Namespace != ev.st.ns {
			err = fmt.Errorf("%w: a lookup stream serves one namespace (%q), got a request for %q",
				ErrBadMessage, ev.st.ns, ev.req.Namespace)
		} else if err = l.core.StepSync(now, ev.st.id, ev.req); err == nil {
			l.lookups[ev.st.id] = ev.st
		}
		ev.errc <- err
	case closeEvent:
		if ev.owner != nil {
			for k, st := range l.routes {
				if st == ev.owner {
					delete(l.routes, k)
				}
			}
		}
		if ev.lookup != nil {
			delete(l.lookups, ev.lookup.id)
			l.core.CloseLookup(ev.lookup.ns, ev.lookup.id)
		}
	case func(*Core):
		ev(l.core)
	}
}

// flush hands the core's messages to their streams without ever blocking:
// a stream whose queue is full loses the message, which the protocol
// tolerates like any other lost message.
func (l *loop) flush() {
	r := l.core.Ready()
	for _, m := range r.Owners {
		st := l.routes[routeKey{m.Msg.Namespace, m.To}]
		if st == nil {
			continue
		}
		select {
		case st.out <- wire.LeaseResponseToPB(m.Msg):
		default:
			l.dropped++
		}
	}
	for _, m := range r.Lookups {
		st := l.lookups[m.To]
		if st == nil {
			continue
		}
		select {
		case st.out <- wire.SyncResponseToPB(m.Msg):
		default:
			l.dropped++
		}
	}
	if l.stale && !time.Now().Before(l.publishAt) {
		l.publish()
	}
}

// changed notes that the core's state may have changed. The snapshot walks
// the whole table, so it is taken at most every publishEvery, not after
// every event.
func (l *loop) changed() {
	if !l.stale {
		l.stale = true
		l.publishAt = time.Now().Add(publishEvery)
	}
}

// publishEvery bounds how stale Snapshot, status and metrics may be.
const publishEvery = 100 * time.Millisecond

// publish stores a snapshot for metrics and status readers.
func (l *loop) publish() {
	l.stale = false
	snap := &Snapshot{Epoch: l.core.Epoch(), Stats: l.core.Stats()}
	for _, name := range l.core.Namespaces() {
		t := l.core.Table(name)
		ns := NamespaceSnapshot{Name: name, LSN: t.LSN(), Segments: t.Len(), Lookups: l.core.Lookups(name), Owners: l.core.Owners(name)}
		t.Each(func(seg leasetable.Segment) bool {
			if seg.Entry.Owner == "" {
				ns.FreeSegments++
			}
			return true
		})
		snap.Namespaces = append(snap.Namespaces, ns)
	}
	l.s.stats.Store(snap)
}

// post hands an event to the loop, unless the stream or the server ends first.
func (s *Server) post(ctx context.Context, ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-ctx.Done():
	case <-s.stopped:
	}
	return false
}

// call posts an event carrying errc and waits for the loop's verdict.
func (s *Server) call(ctx context.Context, ev event, errc chan error) error {
	if !s.post(ctx, ev) {
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
	select {
	case err := <-errc:
		return grpcError(err)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped:
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
}

func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnknownNamespace):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrBadMessage), errors.Is(err, wire.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// limiter is a token bucket: rate tokens a second, up to burst.
type limiter struct {
	rate, burst, tokens float64
	last                time.Time
}

func newLimiter(rate float64) *limiter {
	return &limiter{rate: rate, burst: 2 * rate, tokens: 2 * rate, last: time.Now()}
}

func (l *limiter) allow() bool {
	now := time.Now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// Session serves one Owner's lease stream.
func (s *Server) Session(stream pb.Leases_SessionServer) error {
	st := &ownerStream{out: make(chan *pb.LeaseResponse, 64)}
	return serveStream(s, stream.Context(), st.out, stream.Send, func() (event, chan error, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		req, err := wire.LeaseRequestFromPB(m)
		if err != nil {
			return nil, nil, err
		}
		errc := make(chan error, 1)
		return leaseEvent{st: st, req: req, errc: errc}, errc, nil
	}, closeEvent{owner: st})
}

// Sync serves one Lookup's sync stream.
func (s *Server) Sync(stream pb.Lookups_SyncServer) error {
	st := &lookupStream{id: s.sessions.Add(1), out: make(chan *pb.SyncResponse, 64)}
	return serveStream(s, stream.Context(), st.out, stream.Send, func() (event, chan error, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		req, err := wire.SyncRequestFromPB(m)
		if err != nil {
			return nil, nil, err
		}
		errc := make(chan error, 1)
		return syncEvent{st: st, req: req, errc: errc}, errc, nil
	}, closeEvent{lookup: st})
}

// serveStream runs a bidirectional stream: one goroutine sends what the loop
// queues in out, this one receives, validates and hands requests to the
// loop. A malformed message, or one the core refuses (an unknown namespace),
// ends only this stream, with a status that says what was wrong.
func serveStream[T any](s *Server, ctx context.Context, out chan T, send func(T) error,
	recv func() (event, chan error, error), closed event) error {
	ctx, cancel := context.WithCancel(ctx)
	sent := make(chan error, 1)
	go func() {
		for {
			select {
			case m := <-out:
				if err := send(m); err != nil {
					sent <- err
					return
				}
			case <-ctx.Done():
				sent <- nil
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-sent // never Send after the handler returns
		s.post(context.Background(), closed)
	}()
	lim := newLimiter(s.cfg.MaxRequestRate)
	for {
		ev, errc, err := recv()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			if _, ok := status.FromError(err); ok {
				return err // the transport's own error
			}
			return grpcError(err) // a message that did not decode
		}
		if !lim.allow() {
			return status.Errorf(codes.ResourceExhausted, "leasehold: more than %g requests per second on one stream", s.cfg.MaxRequestRate)
		}
		if err := s.call(ctx, ev, errc); err != nil {
			return err
		}
	}
}

// Status answers leasehold status.
func (s *Server) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if req.GetNamespace() != "" && !s.namespaces[req.GetNamespace()] {
		return nil, status.Errorf(codes.NotFound, "leasehold: unknown namespace %q", req.GetNamespace())
	}
	snap := s.stats.Load()
	out := &pb.StatusResponse{Epoch: snap.Epoch}
	for _, ns := range snap.Namespaces {
		if req.GetNamespace() != "" && ns.Name != req.GetNamespace() {
			continue
		}
		n := &pb.NamespaceStatus{Name: ns.Name, Lsn: uint64(ns.LSN), Segments: uint32(ns.Segments),
			FreeSegments: uint32(ns.FreeSegments), Lookups: uint32(ns.Lookups)}
		for _, o := range ns.Owners {
			n.Owners = append(n.Owners, &pb.OwnerStatus{Id: o.ID, Addr: o.Addr, Incarnation: o.Incarnation,
				Member: o.Member, Ranges: uint32(o.Ranges), Share: o.Share})
		}
		out.Namespaces = append(out.Namespaces, n)
	}
	return out, nil
}
