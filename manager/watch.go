// The Lookups' Watch and Poll: a sync stream split in two, so that an idle
// Lookup costs the Manager half the stack.

package manager

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/wire"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Why a Watch: gRPC-Go serves every stream on a goroutine of its own, the
// handler's. A Sync handler waits for the Lookup's next request in Recv,
// parked about 4.4 KB deep in gRPC's receive path, so each idle Lookup
// holds an 8-KB stack (a 4-KB one holds a goroutine parked at most about
// 3.3 KB deep). A Watch's handler never receives after its empty opening
// request: it waits for its end in a select, about 2.5 KB deep, in a 4-KB
// stack, and each of the Lookup's requests comes as a Poll, a unary call
// whose goroutine lives only while the request is taken. The messages and
// their order are those of a Sync stream: the requests are taken one at a
// time in the order their Polls are served, and the answers and pushes go
// out on the Watch through the same sender (docs/protocol.md, "Watch and
// Poll"; results in docs/results.md).

// lookupsDesc is the Lookups service with watchHandler in place of the
// generated handler of Watch.
var lookupsDesc = func() *grpc.ServiceDesc {
	d := pb.Lookups_ServiceDesc
	d.Streams = slices.Clone(d.Streams)
	for i := range d.Streams {
		if d.Streams[i].StreamName == "Watch" {
			d.Streams[i].Handler = watchHandler
		}
	}
	return &d
}()

// watchHandler receives a Watch's opening request on a goroutine of its
// own, which ends once it has: the generated handler receives it on the
// handler's goroutine, and gRPC's receive path runs deep enough to double
// the stack the handler then keeps for the Watch's whole life
// (TestIdleStreamMemory).
func watchHandler(srv any, stream grpc.ServerStream) error {
	got := make(chan error, 1)
	go func() { got <- stream.RecvMsg(new(pb.WatchRequest)) }()
	if err := <-got; err != nil {
		return err
	}
	return srv.(lookupsService).Watch(nil, &grpc.GenericServerStream[pb.WatchRequest, pb.SyncResponse]{ServerStream: stream})
}

// clientConn is what the Manager keeps for one client connection: its
// budget of unary calls and polls, spent by callRate on the connection's
// one reader goroutine, and the Watches open on it, which only Polls on
// the same connection can name. A Watch so needs no secret: a connection
// is one authenticated peer. Its number is the server's (Server.watches),
// never reused, so a Poll that reaches another connection of the same
// client (gRPC moves new calls to a new connection after a GOAWAY, while
// the old one's streams go on) names no Watch there rather than another.
type clientConn struct {
	calls *limiter // unary calls other than Polls (MaxCallRate)
	polls *limiter // Polls: twice MaxRequestRate for each Watch open (pollRate)

	open    atomic.Int64 // Watches open, read by callRate without mu
	mu      sync.Mutex
	watches map[uint64]*watch // nil until the first Watch
}

// connKey keys a connection's *clientConn in its context (TagConn).
type connKey struct{}

func connOf(ctx context.Context) *clientConn {
	c, _ := ctx.Value(connKey{}).(*clientConn)
	return c
}

// add registers w as Watch id.
func (c *clientConn) add(id uint64, w *watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watches == nil {
		c.watches = map[uint64]*watch{}
	}
	c.watches[id] = w
	c.open.Add(1)
}

func (c *clientConn) remove(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watches, id)
	c.open.Add(-1)
	if len(c.watches) == 0 {
		c.watches = nil // a connection that watched once keeps no map
	}
}

func (c *clientConn) watch(id uint64) *watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches[id]
}

// watch is one Watch: a Lookup's stream as the loop knows it, and what a
// Sync handler keeps on its stack for the requests it receives.
type watch struct {
	st     *lookupStream
	mu     sync.Mutex // one Poll taken at a time, in order
	lim    *limiter   // MaxRequestRate, as a Sync stream's; under mu
	closed bool       // the Watch has ended: no Poll is taken (under mu)
	ended  chan error // a Poll's refusal ends the Watch with it
}

// end ends the Watch with err, unless it is ending already.
func (w *watch) end(err error) {
	select {
	case w.ended <- err:
	default:
	}
}

// close ends Watch id of c once its handler returns: no Poll is taken
// after it, and the loop forgets the stream. A Poll that found the Watch
// before it was removed is either taken before close, its request handed
// to the loop ahead of the close, or refused: a request after the close
// would make the loop serve the ended stream again, for good.
func (s lookupsService) close(c *clientConn, id uint64, w *watch) {
	c.remove(id)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.st.snd.stop() // never Send after the handler returns
	s.post(context.Background(), closeEvent{lookup: w.st})
}

// Watch serves a Lookup's Watch: its first message names it, and the
// answers to its Polls and the pushes follow, until the Lookup cancels it,
// a Poll is refused, or the server stops.
func (s lookupsService) Watch(_ *pb.WatchRequest, stream pb.Lookups_WatchServer) error {
	ctx := stream.Context()
	c := connOf(ctx)
	if c == nil {
		// A gRPC server built without GRPCOptions keeps no connection
		// state: its Lookups use Sync.
		return status.Error(codes.Unimplemented, "leasehold: Watch needs the server built with GRPCOptions; use Sync")
	}
	st := s.newLookupStream(stream)
	w := &watch{st: st, lim: newLimiter(s.cfg.MaxRequestRate), ended: make(chan error, 1)}
	// The sender's goroutine sends the first message, as every other: the
	// handler's own stack stays at the depth it parks at. It is queued
	// before a Poll can name the Watch, so it goes first.
	id := s.watches.Add(1)
	st.snd.offer(syncOut{m: &pb.SyncResponse{Watch: id}})
	c.add(id, w)
	defer s.close(c, id, w)
	select {
	case <-ctx.Done():
		return nil
	case err := <-w.ended:
		return err
	}
}

// Poll takes one request of a Watch open on the caller's connection, as a
// Sync stream takes its next message: checked, decoded and handed to the
// loop, whose answer goes out on the Watch. A request the Manager refuses
// (malformed, past the rate, a namespace the caller may not follow) ends
// the Watch with the same status the Poll gets.
func (s lookupsService) Poll(ctx context.Context, p *pb.PollRequest) (*pb.PollResponse, error) {
	var w *watch
	if c := connOf(ctx); c != nil {
		w = c.watch(p.GetWatch())
	}
	if w == nil {
		return nil, status.Errorf(codes.NotFound, "leasehold: no Watch %d open on this connection (a Poll must come on its Watch's connection)", p.GetWatch())
	}
	if err := s.poll(ctx, w, p.GetRequest()); err != nil {
		w.end(err)
		return nil, err
	}
	return &pb.PollResponse{}, nil
}

func (s lookupsService) poll(ctx context.Context, w *watch, m *pb.SyncRequest) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		// Aborted, not NotFound: the Watch was here, so the Lookup's
		// Polls do reach their Watch's connection (client.OpenWatch).
		return status.Error(codes.Aborted, "leasehold: the Watch has ended")
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	// Its size was checked before it was decoded, against MaxMessageBytes,
	// by the codec of GRPCOptions, without which there is no Watch.
	if m == nil {
		return status.Error(codes.InvalidArgument, "leasehold: a Poll carries no request")
	}
	if !w.lim.allow() {
		return s.rateError()
	}
	w.st.names.Recv(m)
	req, err := wire.SyncRequestFromPB(m)
	if err != nil {
		return grpcError(ctx, err)
	}
	if err := s.checkSync(ctx, req.Namespace); err != nil {
		return err
	}
	errc := make(chan error, 1)
	return s.call(ctx, syncEvent{st: w.st, req: req, errc: errc}, errc)
}
