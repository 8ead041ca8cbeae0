package manager

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/peers"
	"github.com/leasehold/leasehold/internal/raftstore"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/wire"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Peer names one Manager replica: its Raft ID and the address where it
// serves Owners, Lookups, other replicas and operators.
type Peer struct {
	ID   uint64
	Addr string
}

// Server is the Manager's runtime: it runs a Replica on one goroutine,
// persists its Raft log in the data directory, exchanges Raft messages with
// the other replicas, and serves the Leases, Lookups, Admin and Raft gRPC
// services around it.
type Server struct {
	cfg        Config
	namespaces map[string]bool
	events     chan event
	raftIn     chan raftpb.Message
	pushWake   chan struct{} // a Lookup stream took a message (fanout.go)
	ready      chan struct{} // closed when the loop has published its first snapshot
	stopped    chan struct{} // closed when the loop ends
	running    atomic.Bool
	stats      atomic.Pointer[Snapshot]
	sessions   atomic.Uint64 // lookup session IDs
	watches    atomic.Uint64 // Watch numbers (watch.go), never reused
	// updateEncodings counts the Updates its codec marshalled (limitCodecV2).
	updateEncodings atomic.Int64
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
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		namespaces: map[string]bool{protocol.DefaultNamespace: true},
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
	g.RegisterService(lookupsDesc, lookupsService{Server: s})
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
// client.KeepaliveTime to notice a replica that stopped answering, which
// the server must allow, and the server pings a connection it has heard
// nothing on for peers.KeepaliveServerTime, so a dead client's streams
// end (peers.KeepaliveServerOptions).
//
// A gRPC server that serves the Manager's services must be built with these
// options, or with none of them: they include the codec that sends an
// Update shared by many Lookups encoded once (encode.go), which the
// services use once GRPCOptions has been called.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	s.sharedCodec.Store(true)
	return append([]grpc.ServerOption{grpc.MaxRecvMsgSize(max(s.cfg.MaxMessageBytes, peers.PartBytes+peers.PartFraming)),
		grpc.ChainUnaryInterceptor(s.grpcm.unary()), grpc.ChainStreamInterceptor(s.grpcm.stream())},
		append(append(append(append(peers.KeepaliveServerOptions(), peers.WindowServerOptions()...), peers.BufferServerOptions()...), s.trustOptions()...), s.limitOptions()...)...)
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

func grpcError(ctx context.Context, err error) error {
	var nl *replica.NotLeaderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nl):
		return client.NotLeader(ctx, nl.Leader)
	case errors.Is(err, replica.ErrNoEpoch):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, lease.ErrGateFull), errors.Is(err, lease.ErrOwnerOwed), errors.Is(err, replica.ErrQuorum), errors.Is(err, errSessionBound),
		errors.Is(err, replica.ErrConfPending), errors.Is(err, replica.ErrMember):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, lease.ErrUnknownNamespace), errors.Is(err, lease.ErrUnknownOwner):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, lease.ErrLimit):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, lease.ErrBadMessage), errors.Is(err, wire.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
