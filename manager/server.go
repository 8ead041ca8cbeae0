package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/certs"

	"github.com/leasehold/leasehold/internal/peers"
	"github.com/leasehold/leasehold/internal/raftstore"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/runtime"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/manager/config"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// DefaultNamespace is the namespace every Manager serves.
const DefaultNamespace = "default"

// Peer names one Manager replica: its Raft ID and the address where it
// serves Owners, Lookups, other replicas and operators.
type Peer struct {
	ID   uint64
	Addr string
}

// ServerConfig configures a Server. The zero value is a one-replica
// Manager that keeps its state in memory, serving the default namespace
// with production timings.
type ServerConfig struct {
	// Replica is the lease logic, the Lookup feed and the Raft pacing,
	// handed to the replica as they are. Its Epoch, when 0, is the start
	// time in Unix nanoseconds, which grows across restarts as the
	// protocol requires; a group that restarts from its data directory
	// keeps its epoch.
	config.Replica
	// ID is this replica's Raft ID, 1 if zero.
	ID uint64
	// Advertise is the address other replicas and clients reach this one
	// at; empty means the listener's address.
	Advertise string
	// Peers are the founding replicas of a new group, this one included,
	// with their addresses; every founder gets the same list. Empty means a
	// group of this replica alone. Ignored when DataDir holds state.
	Peers []Peer
	// Join starts a replica with no state that waits to be added to a
	// running group (leasehold cluster add) instead of founding one; Peers
	// then lists the running group's replicas, so it can answer them.
	Join bool
	// DataDir keeps the Raft log and snapshots; empty keeps them in memory,
	// so a restart starts a new epoch and every Owner loses its leases.
	DataDir string
	// PeerDialOptions are used to dial the other replicas (credentials, for
	// one); nil means plaintext TCP. The server's own listener options are
	// the embedder's: see Server.GRPCOptions and Register.
	PeerDialOptions []grpc.DialOption
	// Certs, if set, puts the trust boundary around the server
	// (docs/security.md): Serve and GRPCOptions serve mutual TLS with this
	// replica's certificate, every call is admitted by its caller's role
	// and identity, and the other replicas are dialled with it (unless
	// PeerDialOptions say otherwise). Nil needs Insecure.
	Certs *certs.Source
	// Insecure, with Certs nil, serves plaintext and admits anyone: only
	// for tests and a Manager on a loopback address. Plaintext is only ever
	// chosen explicitly: with neither Certs nor Insecure, Validate fails.
	Insecure bool
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// MaxRequestRate caps the requests per second one stream may send, with
	// bursts of twice that; a stream over it is closed with
	// ResourceExhausted. 0 means 50.
	MaxRequestRate float64
	// MaxCallRate caps the unary calls (status, drain, cluster changes,
	// holder reads) per second on one connection, with bursts of twice
	// that; a call past it is refused with ResourceExhausted before its
	// request is read. 0 means DefaultMaxCallRate.
	MaxCallRate float64
	// MaxMessageBytes caps the size of a message a client may send; 0 means
	// 4 MiB.
	MaxMessageBytes int
	// MaxConnections caps the connections open to this replica at once;
	// one past it is refused with a GOAWAY naming the limit. 0 means
	// DefaultMaxConnections.
	MaxConnections int
	// MaxStreamsPerConn caps the streams open at once on one connection
	// (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS). A follower relays Owners'
	// streams to the leader over one connection, so it must exceed the
	// Owners one replica may relay. 0 means DefaultMaxStreamsPerConn.
	MaxStreamsPerConn int
	// IdleTimeout closes a connection with no stream open for that long;
	// 0 means DefaultIdleTimeout, negative never.
	IdleTimeout time.Duration
}

// Validate fills in c's defaults and checks it, the replica's settings
// included (config.Replica.Validate). Its error is a *config.FieldError
// that names the field at fault. NewServer calls it.
func (c *ServerConfig) Validate() error {
	if err := c.Replica.Validate(); err != nil {
		return err
	}
	if c.Certs == nil && !c.Insecure {
		return &config.FieldError{Field: "Certs", Err: errors.New("no certificate: set Certs to serve mutual TLS, or Insecure: true to serve plaintext and admit anyone")}
	}
	if c.Epoch == 0 {
		c.Epoch = uint64(time.Now().UnixNano())
	}
	if c.ID == 0 {
		c.ID = 1
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
	if err := c.setLimitDefaults(); err != nil {
		return err
	}
	if len(c.Peers) > 0 {
		seen := map[uint64]bool{}
		for _, p := range c.Peers {
			if p.ID == 0 || p.Addr == "" || seen[p.ID] {
				return &config.FieldError{Field: "Peers", Err: fmt.Errorf("each peer needs a distinct non-zero ID and an address (got %d=%q)", p.ID, p.Addr)}
			}
			seen[p.ID] = true
		}
		if !seen[c.ID] && !c.Join {
			return &config.FieldError{Field: "Peers", Err: fmt.Errorf("the list does not include this replica's ID %d", c.ID)}
		}
	}
	return nil
}

// Server is the Manager's runtime: it runs a Replica on one goroutine,
// persists its Raft log in the data directory, exchanges Raft messages with
// the other replicas, and serves the Leases, Lookups, Admin and Raft gRPC
// services around it.
type Server struct {
	cfg        ServerConfig
	namespaces map[string]bool
	events     chan event
	raftIn     chan raftpb.Message
	pushWake   chan struct{} // a Lookup stream took a message (fanout.go)
	ready      chan struct{} // closed when the loop has published its first snapshot
	stopped    chan struct{} // closed when the loop ends
	running    atomic.Bool
	stats      atomic.Pointer[Snapshot]
	sessions   atomic.Uint64 // lookup session IDs
	// sharedCodec: GRPCOptions has handed out the codec that sends a
	// shared Update's bytes (encode.go); a server built without it
	// marshals each message whole.
	sharedCodec atomic.Bool
	transport   *peers.Transport
	store       *raftstore.Store

	relayMu     sync.Mutex
	relayConns  map[string]*grpc.ClientConn // to leaders, for relayed Owner streams
	relayClosed bool
	relays      atomic.Int64 // Owner streams relayed now

	metrics *serverMetrics
	grpcm   *grpcMetrics
	refused *prometheus.CounterVec // trust.go
	quiet   quietLog               // limits.go
}

// NewServer validates cfg, opens the data directory and returns a Server.
// Call Serve, or Register and Run, to start it; Run closes the data
// directory when it ends.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		namespaces: map[string]bool{replica.DefaultNamespace: true},
		events:     make(chan event, 1024),
		raftIn:     make(chan raftpb.Message, 4096),
		pushWake:   make(chan struct{}, 1),
		ready:      make(chan struct{}),
		stopped:    make(chan struct{}),
		metrics:    newServerMetrics(),
		grpcm:      newGRPCMetrics(),
		refused:    newRefusals(),
	}
	if cfg.Certs != nil && cfg.PeerDialOptions == nil {
		s.cfg.PeerDialOptions = []grpc.DialOption{certs.DialOption(cfg.Certs)}
	}
	var sender func(context.Context) (uint64, error)
	if cfg.Certs != nil {
		sender = s.peerSender
	}
	for _, ns := range cfg.Namespaces {
		s.namespaces[ns] = true
	}
	if cfg.DataDir != "" {
		st, err := raftstore.Open(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		s.store = st
	}
	s.transport = peers.New(peers.Config{
		Self:        cfg.ID,
		DialOptions: s.cfg.PeerDialOptions,
		Sender:      sender,
		Deliver: func(m raftpb.Message) {
			select {
			case s.raftIn <- m:
			default: // Raft retransmits
			}
		},
		// Reports never block: the transport's Close waits for them.
		OnUnreachable: func(id uint64) { s.tryPost(unreachableEvent(id)) },
		OnSnapshot:    func(id uint64, ok bool) { s.tryPost(snapshotEvent{id, ok}) },
		Logger:        cfg.Logger,
	})
	s.stats.Store(&Snapshot{Epoch: cfg.Epoch})
	return s, nil
}

// Register adds the server's services to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterLeasesServer(g, leasesService{Server: s})
	pb.RegisterLookupsServer(g, lookupsService{Server: s})
	pb.RegisterAdminServer(g, adminService{Server: s})
	s.transport.Register(g)
	s.grpcm.initialize(g)
}

// The gRPC services' handlers live on unexported types, so that they are
// no part of Server's API: an embedder registers them with Register.
type (
	leasesService struct {
		pb.UnimplementedLeasesServer
		*Server
	}
	lookupsService struct {
		pb.UnimplementedLookupsServer
		*Server
	}
	adminService struct {
		pb.UnimplementedAdminServer
		*Server
	}
)

// GRPCOptions are the server options Serve uses: message size limits and
// keepalive. No message larger than MaxMessageBytes, or a part of a Raft
// message (peers.PartBytes; a snapshot travels in parts), is read: gRPC
// refuses it from its length prefix. The codec then holds each service to
// its own limit (limitOptions). Clients and the other replicas ping every
// runtime.KeepaliveTime to notice a replica that stopped answering, which
// the server must allow, and the server pings a connection it has heard
// nothing on for runtime.KeepaliveServerTime, so a dead client's streams
// end (runtime.KeepaliveServerOptions).
//
// A gRPC server that serves the Manager's services must be built with these
// options, or with none of them: they include the codec that sends an
// Update shared by many Lookups encoded once (encode.go), which the
// services use once GRPCOptions has been called.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	s.sharedCodec.Store(true)
	return append([]grpc.ServerOption{grpc.MaxRecvMsgSize(max(s.cfg.MaxMessageBytes, peers.PartBytes+peers.PartFraming)),
		grpc.ChainUnaryInterceptor(s.grpcm.unary()), grpc.ChainStreamInterceptor(s.grpcm.stream())},
		append(append(append(runtime.KeepaliveServerOptions(), runtime.WindowServerOptions()...), s.trustOptions()...), s.limitOptions()...)...)
}

// checkSize refuses a client message over MaxMessageBytes.
func (s *Server) checkSize(m proto.Message) error {
	if n := proto.Size(m); n > s.cfg.MaxMessageBytes {
		return status.Errorf(codes.ResourceExhausted, "leasehold: received message larger than max (%d vs. %d bytes)", n, s.cfg.MaxMessageBytes)
	}
	return nil
}

// Serve runs the Manager on lis until ctx is cancelled, then stops
// gracefully: streams are closed and Run's loop ends.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if s.cfg.Advertise == "" {
		s.cfg.Advertise = lis.Addr().String()
	}
	s.warnPlaintext(lis)
	g := grpc.NewServer(s.GRPCOptions()...)
	s.Register(g)
	limited := s.limitListener(lis)
	lis = limited
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		limited.closeAll() // connections still in their handshake too, which Stop would wait for
		g.Stop()           // ends every stream now; the loop is stopping too
	}()
	loopErr := make(chan error, 1)
	go func() { loopErr <- s.Run(ctx); cancel() }()
	// Answer nobody before the loop has state to show: a group of one has
	// taken over by then, so status shows its namespaces.
	select {
	case <-s.ready:
	case <-s.stopped:
	}
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
	Replica    ReplicaStats
	Cluster    ClusterInfo
	Namespaces []NamespaceSnapshot
	// Heartbeats counts the heartbeats this replica sent to Lookups, and
	// Vouching its pushes that vouched for freshness as heartbeats do
	// (docs/protocol.md, "Heartbeats").
	Heartbeats, Vouching uint64
}

// ClusterInfo describes the replica group as this replica sees it.
type ClusterInfo struct {
	ID, Leader       uint64
	LeaderAddr, Role string
	Term             uint64
	Commit, Applied  uint64
	// Quorum is, on the leader, whether a quorum of voters (itself
	// included) was recently active within the last election timeout, as
	// Raft's CheckQuorum counts them; false on the other replicas.
	Quorum bool
	Peers  []PeerInfo
	// ReadLease is this replica's quorum read lease (readlease.go).
	ReadLease ReadLeaseInfo
}

// PeerInfo describes one replica.
type PeerInfo struct {
	ID    uint64
	Addr  string
	Voter bool
	Match uint64 // the log index known replicated there (leader only)
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

// Stats counts the leader's lease work since it took over (zero on a
// follower), and the Lookup syncs this replica served.
type Stats struct {
	LeaseRequests uint64 // accepted or not
	SyncRequests  uint64
	Grants        uint64 // ranges granted with a fresh LGN
	Recalls       uint64 // ranges omitted from a holder's message to move them
	Releases      uint64 // ranges freed by acknowledgement (recall or refusal)
	Expiries      uint64 // ranges freed because their reservation ran out
	OwnerRestarts uint64 // new incarnations seen
	Migrations    uint64 // ranges granted with the previous holder's state (planned moves)
	Plans         uint64 // rebalancing rounds planned
	PlannedMoves  uint64 // ranges the rounds moved
	PlanErrors    uint64 // rounds the policy refused
	RacesDropped  uint64 // requests dropped by the race filter (C§2.3.2)
	StaleDropped  uint64 // duplicates and messages of dead incarnations
	Forgotten     uint64 // Owner records forgotten: no member, owed nothing
}

// ReplicaStats counts the replica's Raft activity.
type ReplicaStats struct {
	Proposals, Applied, Takeovers, Snapshots uint64
	Confirmations                            uint64 // rounds answered on a ReadIndex proof, with no entry
	Dropped                                  uint64 // Owner messages never sent: their round was not proven in time
}

// OwnerInfo describes one Owner. A follower knows only what is replicated:
// ID, address, incarnation, membership and what the Owner holds.
type OwnerInfo struct {
	ID, Addr    string
	Incarnation uint64
	Member      bool
	Ranges      int     // lease-table segments held
	Share       float64 // fraction of the key space held
	Load        float64 // requests per second over the last report
	Capacity    float64 // 0 means 1
	Draining    bool
	HotKeys     []protocol.KeyLoad // requests per second, estimated
}

// Snapshot returns the state published after the loop's last step.
func (s *Server) Snapshot() *Snapshot { return s.stats.Load() }

type event interface{}

type leaseEvent struct {
	st   *ownerStream
	req  *protocol.LeaseRequest
	errc chan error
	at   time.Time // when it arrived
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

type drainEvent struct {
	ns, owner string
	op        ownerOp // admin_owners.go
	errc      chan error
}

// confEvent adds replica id at addr as a learner (addr set), or removes it.
type confEvent struct {
	id   uint64
	addr string
	errc chan error
}

type unreachableEvent uint64

type snapshotEvent struct {
	id uint64
	ok bool
}

// ownerStream is one Owner's lease stream. Only the loop reads or writes
// key and inc: the Owner it speaks for (set by its first accepted request)
// and that Owner's incarnation; and heard, when the loop last had a
// request from it.
type ownerStream struct {
	out   chan *pb.LeaseResponse
	key   *routeKey
	inc   uint64
	heard time.Time
}

type lookupStream struct {
	id    uint64
	names *wire.ManagerSyncNames // the stream's encoding; Accepts: it takes merged deltas
	ns    string
	out   chan syncOut
	sent  keyspace.LSN // the newest LSN handed to it (loop only)
}

type routeKey struct{ ns, owner string }

// loop is the state owned by Run's goroutine.
type loop struct {
	s       *Server
	r       *replica.Replica
	routes  map[routeKey]*ownerStream
	lookups map[uint64]*lookupStream
	dropped uint64
	// stale says the snapshot is older than the replica's state; it is
	// published at publishAt. publishTook is how long the last one took.
	stale       bool
	publishAt   time.Time
	publishTook time.Duration
	counts      map[string]tableCount // publish's last walk of each table (countTable)
	push        fanout                // Lookup messages paced to their streams (fanout.go)
	leader      uint64                // last leader logged
	quorumAt    time.Time             // when the leader last saw a quorum active
	obs         observer              // metrics kept by the loop (metrics.go)

	// snapshots holds the newest snapshot converted for Lookups, in wire
	// form and (once a stream has sent it) encoded, merged and not: the
	// Feed sends the same snapshot to every Lookup that starts while the
	// table has moved little, one every few seconds under churn, and
	// converting and encoding it again for each (64,000 segments, 3.4 MB
	// at 1,000 Owners) stalled the loop and the garbage collector.
	snapshots map[updateKey]*sharedUpdate
}

// Run runs the Manager's replica until ctx is cancelled. All of the
// replica's work happens on this one goroutine; stream handlers hand it
// events. It returns an error if the data directory cannot be read or
// written: a replica that cannot persist must not answer.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("manager: Run called twice")
	}
	defer close(s.stopped)
	defer s.transport.Close()
	defer s.closeRelays()
	if s.store != nil {
		defer s.store.Close()
	}
	ms, fresh := raft.NewMemoryStorage(), true
	if s.store != nil {
		var err error
		if ms, fresh, err = s.store.Load(); err != nil {
			return err
		}
	}
	var boot []replica.Peer
	for _, p := range s.cfg.Peers {
		boot = append(boot, replica.Peer(p))
	}
	if len(boot) == 0 && !s.cfg.Join {
		boot = []replica.Peer{{ID: s.cfg.ID, Addr: s.cfg.Advertise}}
	}
	if s.cfg.Join || !fresh {
		boot = nil
	}
	for _, p := range s.cfg.Peers {
		if p.ID != s.cfg.ID {
			s.transport.SetPeer(p.ID, p.Addr)
		}
	}
	r, err := replica.NewReplica(replica.ReplicaConfig{ID: s.cfg.ID, Core: s.cfg.Replica, Storage: ms, Bootstrap: boot}, time.Now())
	if err != nil {
		return damagedLog(err)
	}
	l := &loop{s: s, r: r, routes: map[routeKey]*ownerStream{}, lookups: map[uint64]*lookupStream{}}
	for id, addr := range r.State().Peers() {
		if id != s.cfg.ID {
			s.transport.SetPeer(id, addr)
		}
	}
	s.cfg.Logger.Info("manager started", "id", s.cfg.ID, "data_dir", s.cfg.DataDir, "restored", !fresh,
		"namespaces", append([]string{replica.DefaultNamespace}, s.cfg.Namespaces...),
		"owner_lease", s.cfg.Timing.OwnerLease, "manager_lease", s.cfg.Timing.ManagerLease)
	if err := l.drive(); err != nil {
		return damagedLog(err)
	}
	l.publish()
	close(s.ready)
	timer := time.NewTimer(0)
	defer timer.Stop()
	stopped := func(err error) error {
		err = damagedLog(err)
		s.cfg.Logger.Error("manager stopped: cannot persist or apply its log", "err", err)
		return err
	}
	for {
		if err := l.drive(); err != nil {
			return stopped(err)
		}
		next := l.r.NextDeadline()
		if l.stale && l.publishAt.Before(next) {
			next = l.publishAt
		}
		if pd := l.push.pumpDeadline(); !pd.IsZero() && pd.Before(next) {
			next = pd
		}
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			s.cfg.Logger.Info("manager stopped")
			return nil
		case ev := <-s.events:
			// Take what else is queued, so one entry carries the round.
			drain(s.events, ev, l.handle)
			l.changed()
		case m := <-s.raftIn:
			// The first message and what else is queued, up to
			// replica.MaxStepBatch, then a drive: the stepping policy
			// the simulation sweeps (replica.StepBatch).
			now := time.Now()
			first := true
			_, err := replica.StepBatch(l.r, l, replica.MaxStepBatch, func() (raftpb.Message, bool) {
				if !first {
					select {
					case m = <-s.raftIn:
					default:
						return raftpb.Message{}, false
					}
				}
				first = false
				if m.Type == raftpb.MsgHeartbeatResp {
					l.obs.heartbeatAnswered(s.metrics, m.From, now)
				}
				return m, true
			})
			if err != nil {
				return stopped(err)
			}
			l.changed()
		case <-s.pushWake:
			l.pump(time.Now())
		case <-timer.C:
			if l.push.pending() > 0 {
				l.pump(time.Now())
			}
			if !time.Now().Before(l.r.NextDeadline()) {
				l.r.Tick(time.Now()) // the next drive sends a coalesced push round
				l.changed()
			}
		}
	}
}

// damagedLog marks an error applying the stored log (an entry or a
// snapshot that does not decode) as a damaged data directory, with the way
// to recover: bbolt checks its pages' structure, not the bytes of the
// values in them.
func damagedLog(err error) error {
	if errors.Is(err, replica.ErrCorrupt) && !errors.Is(err, raftstore.ErrDamaged) {
		return fmt.Errorf("%w: %w; %s", raftstore.ErrDamaged, err, raftstore.Recovery)
	}
	return err
}

// drain hands first and then up to 256 more values already queued on ch to
// fn, so that a burst is one round: one Raft entry, one fsync. (Raft
// messages are stepped by replica.StepBatch, to the same limit.)
func drain[T any](ch <-chan T, first T, fn func(T)) {
	fn(first)
	for range 256 {
		select {
		case v := <-ch:
			fn(v)
		default:
			return
		}
	}
}

// drive runs the replica's Ready/Advance cycle (replica.Drive) with the
// loop as its driver, then publishes the snapshot if it is due.
func (l *loop) drive() error {
	if err := replica.Drive(l.r, l); err != nil {
		return err
	}
	l.obs.noteCommits(l.s.metrics, l.s.cfg.Logger, l.r.State(), time.Now())
	if id, addr := l.r.Leader(); id != l.leader {
		l.leader = id
		l.s.cfg.Logger.Info("leader changed", "leader", id, "addr", addr, "self", id == l.s.cfg.ID)
	}
	if l.stale && !time.Now().Before(l.publishAt) {
		l.publish()
	}
	return nil
}

// Now reads the wall clock (replica.Driver).
func (l *loop) Now() time.Time { return time.Now() }

// Persist writes rd to the data directory, if there is one
// (replica.Driver).
func (l *loop) Persist(rd *replica.Ready) error {
	if l.s.store == nil {
		return nil
	}
	if !raft.IsEmptySnap(rd.Compacted) {
		if err := l.s.store.Compact(rd.Compacted); err != nil {
			return fmt.Errorf("manager: compacting the Raft log: %w", err)
		}
	}
	if err := l.s.store.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
		return fmt.Errorf("manager: saving the Raft log: %w", err)
	}
	return nil
}

// Send updates the transport's replicas, sends the Raft messages, and
// hands the answers to their streams (replica.Driver).
func (l *loop) Send(rd *replica.Ready) {
	for _, p := range rd.Peers {
		switch {
		case p.ID == l.s.cfg.ID:
		case p.Addr == "":
			l.s.transport.RemovePeer(p.ID)
			l.s.cfg.Logger.Info("replica removed", "replica", p.ID)
		default:
			l.s.transport.SetPeer(p.ID, p.Addr)
			l.s.cfg.Logger.Info("replica known", "replica", p.ID, "addr", p.Addr)
		}
	}
	if len(rd.Messages) > 0 {
		now := time.Now()
		for _, m := range rd.Messages {
			if m.Type == raftpb.MsgHeartbeat {
				l.obs.heartbeatSent(m.To, now)
			}
		}
	}
	l.s.transport.Send(rd.Messages)
	l.send(rd.Owners, rd.Lookups)
}

func (l *loop) handle(ev event) {
	now := time.Now()
	switch ev := ev.(type) {
	case leaseEvent:
		key := routeKey{ev.req.Namespace, ev.req.Owner}
		err := l.bound(now, key, ev.st, ev.req)
		ev.st.heard = now
		if err == nil {
			err = l.r.StepLease(now, ev.req)
			if errors.Is(err, replica.ErrLimit) {
				l.s.countLimit(err)
			}
		}
		if err == nil {
			// Answers go to the stream the owner last spoke on.
			l.routes[key] = ev.st
			ev.st.key, ev.st.inc = &key, ev.req.Incarnation
			l.obs.noteAsked(key, ev.at)
		}
		ev.errc <- err
	case syncEvent:
		if ev.st.ns == "" {
			ev.st.ns = ev.req.Namespace
		}
		var err error
		if ev.req.Namespace != ev.st.ns {
			err = fmt.Errorf("%w: a lookup stream serves one namespace (%q), got a request for %q",
				replica.ErrBadMessage, ev.st.ns, ev.req.Namespace)
		} else if err = l.r.StepSync(now, ev.st.id, ev.req); err == nil {
			l.lookups[ev.st.id] = ev.st
		}
		ev.errc <- err
	case closeEvent:
		if ev.owner != nil {
			for k, st := range l.routes {
				if st == ev.owner {
					delete(l.routes, k)
					delete(l.obs.asked, k) // no answer will go there
				}
			}
		}
		if ev.lookup != nil {
			delete(l.lookups, ev.lookup.id)
			l.push.forget(ev.lookup)
			l.r.CloseLookup(ev.lookup.ns, ev.lookup.id)
		}
	case confEvent:
		if ev.addr != "" {
			ev.errc <- l.r.AddLearner(now, ev.id, ev.addr)
		} else {
			ev.errc <- l.r.RemoveMember(now, ev.id)
		}
	case drainEvent:
		ev.errc <- l.ownerAdmin(now, ev)
	case leaseReadEvent:
		l.leaseRead(now, ev)
	case unreachableEvent:
		l.r.ReportUnreachable(uint64(ev))
	case snapshotEvent:
		st := raft.SnapshotFinish
		if !ev.ok {
			st = raft.SnapshotFailure
		}
		l.r.ReportSnapshot(ev.id, st)
	}
}

// MaxIncarnationAhead is how far ahead of the Manager's clock, read as
// Unix nanoseconds, an Owner's incarnation may be. The Owner library uses
// its start time; an incarnation far in the future would make every later,
// honest run of the Owner look older and be refused, for as long as the
// group keeps the record. A counter (1, 2, 3…) is always accepted.
const MaxIncarnationAhead = 24 * time.Hour

// errSessionBound refuses a control request for an Owner whose session is
// bound to another live stream.
var errSessionBound = errors.New("leasehold: the owner's session is bound to another live stream")

// bound checks that st may send req for Owner key. A stream speaks for one
// Owner, the one of its first accepted request. An Owner's session is bound
// to the stream it last spoke on while that stream is live: open, and heard
// from within Timing.OwnerQuiet, the wait after which an Owner itself gives
// up a silent replica. Another stream may renew for it (an Owner that
// reconnected before the Manager saw its old stream break), which moves the
// session there, but while the bound stream is live it may not change it:
// leave, drain, report handovers, or bring a new incarnation. A second
// process started with a live Owner's ID is refused loudly, and while the
// Owner speaks on its stream the requests that change its course come from
// there alone (who may speak for an Owner at all is the certificate's
// business: leaseSpeaker, checkLease).
//
// Once the bound stream has been quiet for OwnerQuiet it blocks nothing:
// any request of the Owner's newest incarnation, or of a newer one, is
// accepted from another stream and moves the session there, a leave, a
// drain and handovers included. A quiet stream is one the Owner itself has
// given up by then: its host died and left the stream half-open, or a
// proxy stopped forwarding it (the Manager closes it only once keepalive
// finds it dead, up to runtime.KeepaliveServerTime and
// KeepaliveServerTimeout later). The Owner library repeats Draining,
// Handed (until its deadline) and Leaving in every request, so an Owner
// that lost its stream in the middle of a drain or a handover, and reaches
// the Manager again only by another stream (a follower's relay), has no
// other request to move the session with. Refusing it would let its leases
// run out and turn its planned moves into losses.
//
// Accepting it is safe because a request says nothing more for coming on
// another stream. Of the same incarnation, it is the word of the run that
// holds the ranges, by another path: the protocol already takes messages
// delayed, lost, duplicated and reordered by the network (a follower's relay
// is such a path), and the race filter still decides whether it releases
// anything, against the session's latest message, whichever stream that
// went to. Of a newer incarnation, the old run's ranges stay orphans,
// reserved until its leases would have run out (docs/protocol.md), so an
// old run that still serves loses nothing without a loss notification
// after it. A request of an older incarnation than the newest known (the
// bound stream's, or the replicated record's) is from a replaced run and is
// always refused, so it never moves the session back to that run.
func (l *loop) bound(now time.Time, key routeKey, st *ownerStream, req *protocol.LeaseRequest) error {
	if limit := uint64(max(now.UnixNano(), 0)) + uint64(MaxIncarnationAhead); req.Incarnation > limit {
		return fmt.Errorf("%w: incarnation %d is more than %s ahead of the Manager's clock (in Unix nanoseconds); "+
			"it would outrank every later run of owner %q", replica.ErrBadMessage, req.Incarnation, MaxIncarnationAhead, key.owner)
	}
	if st.key != nil && *st.key != key {
		return fmt.Errorf("%w: a lease stream speaks for one owner (%q in namespace %q), got a request for %q in %q",
			replica.ErrBadMessage, st.key.owner, st.key.ns, key.owner, key.ns)
	}
	cur := l.routes[key]
	newest := l.r.State().Owners(key.ns)[key.owner].Incarnation
	if cur != nil {
		newest = max(newest, cur.inc)
	}
	if req.Incarnation < newest {
		return fmt.Errorf("%w: owner %q has a newer incarnation (%d) than this request's (%d): "+
			"another process was started with its ID, and this run is replaced", errSessionBound, key.owner, newest, req.Incarnation)
	}
	if cur == nil || cur == st {
		return nil
	}
	quiet := l.s.cfg.Timing.OwnerQuiet()
	heard := now.Sub(cur.heard)
	if heard >= quiet {
		return nil // the Owner has left that stream: the session moves here
	}
	what, is := "", "is"
	switch {
	case req.Incarnation != cur.inc:
		return fmt.Errorf("%w: a new incarnation for owner %q is refused while its session's stream is live "+
			"(heard from %s ago): another process is running with this ID; a restarted owner is accepted once "+
			"the old stream has been quiet for %s", errSessionBound, key.owner, heard.Round(time.Millisecond), quiet)
	case req.Leaving:
		what = "a leave"
	case req.Draining:
		what = "a drain"
	case len(req.Handed) > 0:
		what, is = "handovers", "are"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s for owner %q %s accepted only from the stream its session is bound to while that stream "+
		"is live (heard from %s ago), and from any once it has closed or been quiet for %s",
		errSessionBound, what, key.owner, is, heard.Round(time.Millisecond), quiet)
}

// send hands the replica's messages to their streams without ever
// blocking: a stream whose queue is full loses the message, which the
// protocol tolerates like any other lost message. Owners' answers go at
// once; Lookups' messages join the paced fan-out (fanout.go).
func (l *loop) send(owners []replica.OwnerMessage, lookups []replica.LookupMessage) {
	now := time.Now()
	debug := len(owners) > 0 && l.s.cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
	for _, m := range owners {
		k := routeKey{m.Msg.Namespace, m.To}
		st := l.routes[k]
		if st == nil {
			continue
		}
		select {
		case st.out <- wire.LeaseResponseToPB(m.Msg):
			l.obs.answered(l.s.metrics, k, now)
			if debug {
				logAnswer(l.s.cfg.Logger, m.Msg)
			}
		default:
			l.dropped++
		}
	}
	l.obs.noteCommits(l.s.metrics, l.s.cfg.Logger, l.r.State(), now)
	var shared map[updateKey]*sharedUpdate
	if len(lookups) > 0 {
		shared = maps.Clone(l.snapshots)
		if shared == nil {
			shared = map[updateKey]*sharedUpdate{}
		}
		defer l.keepSnapshots(shared)
	}
	for _, m := range lookups {
		st := l.lookups[m.To]
		if st == nil {
			continue
		}
		out := syncResponseToPB(m.Msg, shared, st.names != nil && st.names.Accepts(),
			st.names != nil && st.names.AcceptsCompact() && m.Msg.ID == 0)
		if !l.push.queue(st, out, m.Msg.Update.To) {
			l.dropped++
		}
	}
	l.pump(now)
}

// keepSnapshots keeps, of the updates a round converted, the newest
// snapshot's (both forms), for the rounds after it.
func (l *loop) keepSnapshots(shared map[updateKey]*sharedUpdate) {
	var newest keyspace.LSN
	for k := range shared {
		if k.snapshot && k.to > newest {
			newest = k.to
		}
	}
	if newest == 0 {
		return
	}
	clear(l.snapshots)
	if l.snapshots == nil {
		l.snapshots = map[updateKey]*sharedUpdate{}
	}
	for k, su := range shared {
		if k.snapshot && k.to == newest {
			l.snapshots[k] = su
		}
	}
}

// updateKey names an Update by its storage: Updates the Feed hands out at
// one LSN share their Changes or Segments (leasetable.Table.Since), which
// never change.
type updateKey struct {
	from, to keyspace.LSN
	snapshot bool
	changes  *leasetable.Change
	segments *leasetable.Segment
	n        int
	merged   bool // converted after leasetable.Merge
	compact  bool // in the compact form
}

// syncResponseToPB converts m to its wire form, converting its Update only
// once per round for all the Lookups it goes to: a push of a big delta to
// thousands of Lookups holds one copy of it in wire form, not one per
// Lookup. The first stream to send it encodes it, and the others send the
// same bytes (encode.go).
//
// A Lookup that takes merged deltas gets the delta merged
// (leasetable.Merge), also converted once for all such Lookups. A push to
// a Lookup that takes compact deltas goes in that form
// (wire.CompactUpdateToPB), its ranges marked FromCopy where the Lookup
// can take their End from its copy (leasetable.MarkFromCopy), again once
// for all. Answers to polls keep the full form: a Lookup whose copy a
// compact push did not fit polls, and the answer then fits whatever its
// copy holds.
func syncResponseToPB(m *protocol.SyncResponse, shared map[updateKey]*sharedUpdate, merge, compact bool) syncOut {
	u := &m.Update
	compact = compact && merge && !u.Snapshot && len(u.Changes) > 0
	k := updateKey{from: u.From, to: u.To, snapshot: u.Snapshot, n: len(u.Changes) + len(u.Segments), merged: merge, compact: compact}
	if len(u.Changes) > 0 {
		k.changes = &u.Changes[0]
	}
	if len(u.Segments) > 0 {
		k.segments = &u.Segments[0]
	}
	su := shared[k]
	if su == nil {
		su = &sharedUpdate{}
		switch {
		case compact:
			mu := leasetable.Merge(leasetable.MarkFromCopy(*u))
			su.pb = wire.CompactUpdateToPB(&mu)
		case merge:
			mu := leasetable.Merge(*u)
			su.pb = wire.UpdateToPB(&mu)
		default:
			su.pb = wire.UpdateToPB(u)
		}
		shared[k] = su
	}
	rest := *m
	rest.Update = leasetable.Update{}
	out := wire.SyncResponseToPB(&rest)
	out.Update = su.pb
	return syncOut{m: out, shared: su}
}

// changed notes that the replica's state may have changed. The snapshot
// walks the whole table, so it is taken at most every publishEvery, not
// after every event, and no more often than keeps it to a tenth of the
// loop's time: a table of 10,000 Owners (640,000 segments) takes about
// 120 ms to walk, and the state changes with every renewal.
func (l *loop) changed() {
	if !l.stale {
		l.stale = true
		l.publishAt = time.Now().Add(max(publishEvery, 10*l.publishTook))
	}
}

// publishEvery bounds how stale Snapshot, status and metrics may be, for
// tables that take under a tenth of it to walk (see changed).
const publishEvery = 100 * time.Millisecond

// publish stores a snapshot for metrics and status readers. The leader
// describes its owner sessions; a follower the replicated owner records.
func (l *loop) publish() {
	start := time.Now()
	defer func() { l.publishTook = time.Since(start) }()
	l.stale = false
	st := l.r.State()
	snap := &Snapshot{Epoch: st.Epoch(), Replica: ReplicaStats(l.r.Stats()), Cluster: l.clusterInfo()}
	core := l.r.Core()
	if core != nil {
		snap.Stats = Stats(core.Stats())
	}
	snap.Stats.SyncRequests = l.r.Feed().Syncs()
	fs := l.r.Feed().Stats()
	snap.Heartbeats, snap.Vouching = fs.Heartbeats, fs.Vouching
	for _, name := range st.Namespaces() {
		t := st.Table(name)
		ns := NamespaceSnapshot{Name: name, LSN: t.LSN(), Segments: t.Len(), Lookups: l.r.Feed().Lookups(name)}
		tc := l.countTable(name, t)
		if core != nil {
			for _, o := range core.Sessions(name) {
				c := tc.owners[o.ID]
				o.Ranges, o.Share = c.ranges, c.share
				ns.Owners = append(ns.Owners, OwnerInfo(o))
			}
		} else {
			ns.Owners = ownerInfos(st, name)
		}
		ns.FreeSegments = tc.free
		snap.Namespaces = append(snap.Namespaces, ns)
	}
	l.obs.noteMembers(l.s.cfg.Logger, st)
	l.s.stats.Store(snap)
}

// tableCount is what publish reads from walking a table: the segments and
// share of the key space each owner holds, and the free segments.
type tableCount struct {
	t      *leasetable.Table
	lsn    keyspace.LSN
	segs   int
	owners map[string]ownerCount
	free   int
}

type ownerCount struct {
	ranges int
	share  float64
}

// countTable walks table t of namespace ns, or returns the last walk's
// counts if t has not changed since (every change moves its LSN): most
// publishes follow renewals, which change sessions but not the table, and
// walking it was the bulk of a publish.
func (l *loop) countTable(ns string, t *leasetable.Table) tableCount {
	if c, ok := l.counts[ns]; ok && c.t == t && c.lsn == t.LSN() && c.segs == t.Len() {
		return c
	}
	c := tableCount{t: t, lsn: t.LSN(), segs: t.Len(), owners: map[string]ownerCount{}}
	t.Each(func(seg leasetable.Segment) bool {
		if seg.Entry.Owner == "" {
			c.free++
			return true
		}
		oc := c.owners[seg.Entry.Owner]
		oc.ranges++
		oc.share += seg.Range.Size() / (1 << 64)
		c.owners[seg.Entry.Owner] = oc
		return true
	})
	if l.counts == nil {
		l.counts = map[string]tableCount{}
	}
	l.counts[ns] = c
	return c
}

func (l *loop) clusterInfo() ClusterInfo {
	rs := l.r.Status()
	lead, addr := l.r.Leader()
	ci := ClusterInfo{ID: l.s.cfg.ID, Leader: lead, LeaderAddr: addr, Role: roleName(rs.RaftState),
		Term: rs.Term, Commit: rs.Commit, Applied: rs.Applied, ReadLease: readLeaseInfo(l.r, time.Now())}
	voters := rs.Config.Voters.IDs()
	if rs.RaftState == raft.StateLeader {
		active := 0
		for id := range voters {
			if pr, ok := rs.Progress[id]; ok && (pr.RecentActive || id == l.s.cfg.ID) {
				active++
			}
		}
		now := time.Now()
		if active > len(voters)/2 {
			l.quorumAt = now
		}
		// CheckQuorum clears the marks every election timeout, so a mark
		// set within the last two is a quorum heard from within one.
		ci.Quorum = !l.quorumAt.IsZero() && now.Sub(l.quorumAt) < 2*l.s.electionTimeout()
	} else {
		l.quorumAt = time.Time{}
	}
	for id, a := range l.r.State().Peers() {
		p := PeerInfo{ID: id, Addr: a}
		_, p.Voter = voters[id]
		if pr, ok := rs.Progress[id]; ok {
			p.Match = pr.Match
		}
		ci.Peers = append(ci.Peers, p)
	}
	slices.SortFunc(ci.Peers, func(a, b PeerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return ci
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return s.String()
}

// ownerInfos describes a namespace's owners from the replicated records
// alone (a follower has no sessions).
func ownerInfos(st *replica.State, ns string) []OwnerInfo {
	by := map[string]*OwnerInfo{}
	for id, r := range st.Owners(ns) {
		by[id] = &OwnerInfo{ID: id, Addr: r.Addr, Incarnation: r.Incarnation, Member: r.Member}
	}
	st.Table(ns).Each(func(s leasetable.Segment) bool {
		if i := by[s.Entry.Owner]; i != nil {
			i.Ranges++
			i.Share += s.Range.Size() / (1 << 64)
		}
		return true
	})
	out := make([]OwnerInfo, 0, len(by))
	for _, i := range by {
		out = append(out, *i)
	}
	slices.SortFunc(out, func(a, b OwnerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
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

// tryPost hands an event to the loop if it has room, and drops it if not.
func (s *Server) tryPost(ev event) {
	select {
	case s.events <- ev:
	default:
	}
}

// call posts an event carrying errc and waits for the loop's verdict.
func (s *Server) call(ctx context.Context, ev event, errc chan error) error {
	if !s.post(ctx, ev) {
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
	select {
	case err := <-errc:
		return grpcError(ctx, err)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped:
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
}

func grpcError(ctx context.Context, err error) error {
	var nl *replica.NotLeaderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nl):
		return runtime.NotLeader(ctx, nl.Leader)
	case errors.Is(err, replica.ErrNoEpoch):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, replica.ErrGateFull), errors.Is(err, replica.ErrOwnerOwed), errors.Is(err, replica.ErrQuorum), errors.Is(err, errSessionBound),
		errors.Is(err, replica.ErrConfPending), errors.Is(err, replica.ErrMember):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, replica.ErrUnknownNamespace), errors.Is(err, replica.ErrUnknownOwner):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, replica.ErrLimit):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, replica.ErrBadMessage), errors.Is(err, wire.ErrInvalid):
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

// Session serves one Owner's lease stream, or relays it to the leader when
// the Owner asks (runtime.RelayKey) and this replica follows a known leader.
func (s leasesService) Session(stream pb.Leases_SessionServer) error {
	if leader := s.relayTo(stream.Context()); leader != "" {
		return s.relay(stream, leader)
	}
	var who certs.Identity
	if s.cfg.Certs != nil {
		var err error
		if who, err = s.leaseSpeaker(stream.Context()); err != nil {
			return err
		}
	}
	st := &ownerStream{out: make(chan *pb.LeaseResponse, 64)}
	names := &wire.ManagerNames{} // names said once per stream
	send := func(m *pb.LeaseResponse) error {
		names.Send(m)
		return stream.Send(m)
	}
	return serveStream(s.Server, stream.Context(), st.out, send, func() (event, chan error, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkSize(m); err != nil {
			return nil, nil, err
		}
		names.Recv(m)
		req, err := wire.LeaseRequestFromPB(m)
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkLease(who, req); err != nil {
			return nil, nil, err
		}
		errc := make(chan error, 1)
		return leaseEvent{st: st, req: req, errc: errc, at: time.Now()}, errc, nil
	}, closeEvent{owner: st})
}

// relayTo returns the address of the leader to relay a lease stream to:
// the stream asks for a relay, is not itself a relay's, and this replica
// follows a leader it knows. Otherwise it returns "" and the stream is
// served here, or refused naming the leader, as any other. The leader is
// read from the published snapshot, at most publishEvery old: a stale one
// costs a refusal naming the new leader, passed back to the Owner.
func (s *Server) relayTo(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(runtime.RelayKey)) == 0 || len(md.Get(runtime.RelayedKey)) > 0 {
		return ""
	}
	ci := s.stats.Load().Cluster
	if ci.Leader == 0 || ci.Leader == s.cfg.ID || ci.LeaderAddr == "" || ci.LeaderAddr == s.cfg.Advertise {
		return ""
	}
	return ci.LeaderAddr
}

// relay carries an Owner's lease stream to the leader at leader: it opens
// the same stream there over this replica's connection to it, marked as a
// relay (runtime.RelayedKey), and passes messages both ways unchanged,
// each checked for size on the way in as a direct stream's would be. The
// leader's status and trailer (a refusal naming another leader) come back
// as this stream's. The relay holds no state: it is a hop of the network,
// and the leader treats the stream exactly as a direct one, so the
// protocol's rules, and its single-copy argument, are unchanged.
func (s *Server) relay(stream pb.Leases_SessionServer, leader string) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	cc, err := s.relayConn(leader)
	if err != nil {
		return status.Errorf(codes.Unavailable, "leasehold: cannot relay to the leader at %s: %v", leader, err)
	}
	up, err := pb.NewLeasesClient(cc).Session(metadata.AppendToOutgoingContext(s.relayIdentity(ctx, stream.Context()), runtime.RelayedKey, s.cfg.Advertise))
	if err != nil {
		return status.Errorf(codes.Unavailable, "leasehold: cannot relay to the leader at %s: %v", leader, err)
	}
	s.relays.Add(1)
	defer s.relays.Add(-1)
	s.cfg.Logger.Info("relaying an owner's lease stream to the leader", "leader", leader)
	inErr := make(chan error, 1) // why the Owner's side ended, if not by closing
	go func() {
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err == nil {
				err = s.checkSize(m)
			}
			if err != nil {
				inErr <- err
				cancel()
				return
			}
			if up.Send(m) != nil {
				return // the leader ended the stream: Recv below has its status
			}
		}
	}()
	for {
		m, err := up.Recv()
		if err != nil {
			select {
			case e := <-inErr:
				return e
			default:
			}
			if md := up.Trailer(); len(md) > 0 {
				_ = grpc.SetTrailer(ctx, md)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if _, ok := status.FromError(err); !ok {
				err = status.Errorf(codes.Unavailable, "leasehold: relaying to the leader at %s: %v", leader, err)
			}
			return err
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}

// relayConn returns this replica's connection to addr for relayed streams,
// dialled with the peer options on first use; Run closes them.
func (s *Server) relayConn(addr string) (*grpc.ClientConn, error) {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	if s.relayClosed {
		return nil, errors.New("the server is stopping")
	}
	if cc := s.relayConns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := runtime.Dial(addr, s.cfg.PeerDialOptions)
	if err != nil {
		return nil, err
	}
	if s.relayConns == nil {
		s.relayConns = map[string]*grpc.ClientConn{}
	}
	s.relayConns[addr] = cc
	return cc, nil
}

// closeRelays closes the relay connections, ending every relayed stream.
func (s *Server) closeRelays() {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	s.relayClosed = true
	for addr, cc := range s.relayConns {
		_ = cc.Close()
		delete(s.relayConns, addr)
	}
}

// Relays returns the number of Owner streams this replica relays now.
func (s *Server) Relays() int64 { return s.relays.Load() }

// Sync serves one Lookup's sync stream.
func (s lookupsService) Sync(stream pb.Lookups_SyncServer) error {
	names := &wire.ManagerSyncNames{} // names said once per stream
	st := &lookupStream{id: s.sessions.Add(1), out: make(chan syncOut, 64), names: names}
	send := func(o syncOut) error {
		s.pushTaken()
		m := names.Send(o.m)
		if o.shared != nil && m.Update == o.shared.pb && s.sharedCodec.Load() {
			// The update went out as it is, shared: its bytes are too.
			return stream.SendMsg(&encodedSync{m: m, u: o.shared})
		}
		return stream.Send(m)
	}
	return serveStream(s.Server, stream.Context(), st.out, send, func() (event, chan error, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkSize(m); err != nil {
			return nil, nil, err
		}
		names.Recv(m)
		req, err := wire.SyncRequestFromPB(m)
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkSync(stream.Context(), req.Namespace); err != nil {
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
			return grpcError(ctx, err) // a message that did not decode
		}
		if !lim.allow() {
			return s.rateError()
		}
		if err := s.call(ctx, ev, errc); err != nil {
			return err
		}
	}
}

// Status answers leasehold status.
func (s adminService) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if req.GetReadLease() {
		return s.leaseStatus(ctx, req)
	}
	snap := s.stats.Load()
	// Namespaces are replicated: a replica serves those of its state (a
	// restored one's, say) as well as those it was configured with.
	known := s.namespaces[req.GetNamespace()] || slices.ContainsFunc(snap.Namespaces, func(n NamespaceSnapshot) bool { return n.Name == req.GetNamespace() })
	if req.GetNamespace() != "" && !known {
		return nil, status.Errorf(codes.NotFound, "leasehold: unknown namespace %q", req.GetNamespace())
	}
	out := &pb.StatusResponse{Epoch: snap.Epoch, Cluster: clusterPB(snap.Cluster)}
	for _, ns := range snap.Namespaces {
		if req.GetNamespace() != "" && ns.Name != req.GetNamespace() {
			continue
		}
		n := &pb.NamespaceStatus{Name: ns.Name, Lsn: uint64(ns.LSN), Segments: uint32(ns.Segments),
			FreeSegments: uint32(ns.FreeSegments), Lookups: uint32(ns.Lookups)}
		for _, o := range ns.Owners {
			st := &pb.OwnerStatus{Id: o.ID, Addr: o.Addr, Incarnation: o.Incarnation,
				Member: o.Member, Ranges: uint32(o.Ranges), Share: o.Share, Load: o.Load, Capacity: o.Capacity, Draining: o.Draining}
			for _, k := range o.HotKeys {
				st.HotKeys = append(st.HotKeys, &pb.HotKey{Key: uint64(k.Key), Rate: float64(k.Requests)})
			}
			n.Owners = append(n.Owners, st)
		}
		out.Namespaces = append(out.Namespaces, n)
	}
	return out, nil
}

// clusterPB converts a ClusterInfo. Every replica serves clients and peers
// on one address, so addr and client_addr are the same.
func clusterPB(ci ClusterInfo) *pb.Cluster {
	c := &pb.Cluster{Id: ci.ID, Role: ci.Role, Leader: ci.Leader, LeaderAddr: ci.LeaderAddr,
		Term: ci.Term, Commit: ci.Commit, Applied: ci.Applied, ReadLease: readLeasePB(ci.ReadLease)}
	for _, p := range ci.Peers {
		c.Peers = append(c.Peers, &pb.Peer{Id: p.ID, Addr: p.Addr, ClientAddr: p.Addr, Voter: p.Voter, Match: p.Match})
	}
	return c
}

// AddPeer adds a replica to the group (leasehold cluster add): as a
// learner, which the leader promotes to a voter once it has caught up. It
// returns once the promotion is applied here; if the learner does not
// catch up within the learner timeout it is removed again and AddPeer
// fails with FailedPrecondition, saying what it saw. A change that would
// cost the group its quorum is refused with FailedPrecondition before it
// is proposed.
func (s adminService) AddPeer(ctx context.Context, req *pb.AddPeerRequest) (*pb.ClusterResponse, error) {
	if req.GetId() == 0 || req.GetAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "leasehold: a peer needs a non-zero ID and an address")
	}
	if _, _, err := net.SplitHostPort(req.GetAddr()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "leasehold: peer address %q: %v", req.GetAddr(), err)
	}
	id, addr := req.GetId(), req.GetAddr()
	var seen, match uint64 // learner seen in the published group; the last Match seen
	return s.changePeers(ctx, confEvent{id: id, addr: addr}, s.cfg.Replica.LearnerTimeout, func(ci ClusterInfo) (bool, error) {
		for _, p := range ci.Peers {
			if p.ID == id {
				seen++
				match = p.Match
				return p.Voter && p.Addr == addr, nil
			}
		}
		if seen > 0 {
			why := "it never answered: is it running, started with --join, at that address?"
			if match > 0 {
				why = fmt.Sprintf("it answered but had replicated only up to index %d", match)
			}
			return false, status.Errorf(codes.FailedPrecondition,
				"leasehold: replica %d at %s did not catch up with the leader's log within the learner timeout and was removed again; %s The group is as it was", id, addr, why)
		}
		return false, nil
	})
}

// RemovePeer removes a replica from the group (leasehold cluster remove).
// Removing a voter is refused with FailedPrecondition if the voters left
// would not have a quorum of replicas the leader hears from.
func (s adminService) RemovePeer(ctx context.Context, req *pb.RemovePeerRequest) (*pb.ClusterResponse, error) {
	if req.GetId() == 0 {
		return nil, status.Error(codes.InvalidArgument, "leasehold: peer ID 0")
	}
	snap := s.stats.Load()
	known := false
	for _, p := range snap.Cluster.Peers {
		known = known || p.ID == req.GetId()
	}
	// Only the leader's view is authoritative: a follower may not have
	// applied the change that added the replica yet, and refuses below as
	// a follower does, naming the leader.
	if !known && snap.Cluster.Role == "leader" {
		return nil, status.Errorf(codes.NotFound, "leasehold: no replica with ID %d in the group", req.GetId())
	}
	if len(snap.Cluster.Peers) == 1 {
		return nil, status.Error(codes.FailedPrecondition, "leasehold: cannot remove the last replica")
	}
	return s.changePeers(ctx, confEvent{id: req.GetId()}, 0, func(ci ClusterInfo) (bool, error) {
		for _, p := range ci.Peers {
			if p.ID == req.GetId() {
				return false, nil
			}
		}
		return true, nil
	})
}

// changePeers hands ev to the loop and waits until the published cluster
// satisfies done (or done fails): at most ten seconds, plus wait.
func (s *Server) changePeers(ctx context.Context, ev confEvent, wait time.Duration, done func(ClusterInfo) (bool, error)) (*pb.ClusterResponse, error) {
	errc := make(chan error, 1)
	ev.errc = errc
	if err := s.call(ctx, ev, errc); err != nil {
		return nil, err
	}
	if ev.addr != "" && wait <= 0 {
		wait = replica.DefaultLearnerTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second+wait)
	defer cancel()
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	for {
		ok, err := done(s.stats.Load().Cluster)
		if err != nil {
			return nil, err
		}
		if ok {
			return &pb.ClusterResponse{Cluster: clusterPB(s.stats.Load().Cluster)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "leasehold: the change was proposed but not applied in time (is a quorum up?); check leasehold cluster status")
		case <-s.stopped:
			return nil, status.Error(codes.Unavailable, "leasehold: manager is shutting down")
		case <-tick.C:
		}
	}
}

// Drain starts draining an Owner (leasehold drain): its ranges move to the
// others with their state. It is refused with FailedPrecondition while the
// maintenance gate is full, and by a replica that is not the leader.
func (s adminService) Drain(ctx context.Context, req *pb.DrainRequest) (*pb.DrainResponse, error) {
	ns := req.GetNamespace()
	if ns == "" {
		ns = replica.DefaultNamespace
	}
	if req.GetOwner() == "" {
		return nil, status.Error(codes.InvalidArgument, "leasehold: drain needs an owner ID")
	}
	errc := make(chan error, 1)
	if err := s.call(ctx, drainEvent{ns: ns, owner: req.GetOwner(), errc: errc}, errc); err != nil {
		return nil, err
	}
	return &pb.DrainResponse{}, nil
}

// Backup streams a consistent copy of this replica's data directory.
func (s adminService) Backup(_ *pb.BackupRequest, stream pb.Admin_BackupServer) error {
	if s.store == nil {
		return status.Error(codes.FailedPrecondition, "leasehold: this manager keeps its state in memory (no --data-dir): nothing to back up")
	}
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.BackupChunk{Data: b}) }}
	if err := s.store.Backup(w); err != nil {
		return status.Errorf(codes.Internal, "leasehold: backup: %v", err)
	}
	return w.flush()
}

// chunkWriter cuts a stream of bytes into messages of at most 1 MiB.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), 1<<20-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == 1<<20 {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = nil
	return err
}

// logAnswer logs, at debug level, the grants an answer carries, one line
// each with the owner, range and LGN, and its renewals as a count.
func logAnswer(log *slog.Logger, m *protocol.LeaseResponse) {
	renewed := 0
	for _, ls := range m.Leases {
		if !ls.Grant {
			renewed++
			continue
		}
		log.Debug("lease granted", "namespace", m.Namespace, "owner", m.Owner, "range", ls.Range.String(),
			"lgn", ls.LGN, "migrated", ls.Migrated)
	}
	log.Debug("lease answer sent", "namespace", m.Namespace, "owner", m.Owner, "incarnation", m.Incarnation,
		"leases", len(m.Leases), "renewed", renewed)
}
