package bench

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/thinlookup"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// wireMeter counts what crosses the loopback sockets between the load
// driver and the Manager, on the driver's side of every connection: the
// bytes read and written (TCP payload: protobuf, gRPC and HTTP/2 framing;
// no IP or TCP headers) and the gRPC messages sent and received. The
// Manager talks only to this driver (a group of one has no Raft peers), so
// these are the Manager's own totals too.
type wireMeter struct {
	in, out       atomic.Int64 // bytes
	msgIn, msgOut atomic.Int64
	warnings      atomic.Int64 // clients' log records at warn or above: mostly streams that broke

	// Round trips, client side: from an Owner's LeaseRequest leaving to
	// the LeaseResponse that acknowledges it arriving. Only those answered
	// while recording is on are kept: every request, and apart the steady
	// renewals (held_as_acked: the Owner holds what the Manager last gave,
	// and neither leaves nor drains).
	mu        sync.Mutex
	recording bool
	renewals  []time.Duration
	requests  []time.Duration
}

func (m *wireMeter) record(on bool) {
	m.mu.Lock()
	m.recording = on
	m.mu.Unlock()
}

func (m *wireMeter) takeRoundTrips() (renewals, requests []time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	renewals, requests = m.renewals, m.requests
	m.renewals, m.requests = nil, nil
	return renewals, requests
}

// logger counts the clients' warnings (a stream to the Manager that broke,
// an Owner that left before its ranges moved) and discards every record.
func (m *wireMeter) logger() *slog.Logger { return slog.New(warnCounter{m: m}) }

type warnCounter struct {
	m     *wireMeter
	attrs []slog.Attr // the logger's own, for the warnings file
}

func (h warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h warnCounter) Handle(ctx context.Context, r slog.Record) error {
	h.m.warnings.Add(1)
	if len(h.attrs) > 0 {
		r = r.Clone()
		r.AddAttrs(h.attrs...)
	}
	logWarning(ctx, r) // and to a file, with LEASEHOLD_BENCH_WARNINGS_DIR
	return nil
}
func (h warnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return warnCounter{h.m, append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}
func (h warnCounter) WithGroup(string) slog.Handler { return h }

// countedConn counts a connection's bytes into a wireMeter.
type countedConn struct {
	net.Conn
	m *wireMeter
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.in.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.m.out.Add(int64(n))
	return n, err
}

// clientLink is one client's way to the Manager: its dial options count
// bytes and messages and time renewals, and crash cuts every connection it
// made and refuses new ones, as a process that died would.
type clientLink struct {
	m       *wireMeter
	creds   credentials.TransportCredentials // nil: plaintext
	mu      sync.Mutex
	crashed bool
	conns   []net.Conn
}

func (l *clientLink) dialOptions() []grpc.DialOption {
	creds := l.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(l.dial),
		grpc.WithStreamInterceptor(l.intercept),
	}
}

func (l *clientLink) dial(ctx context.Context, addr string) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return nil, net.ErrClosed
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	l.conns = append(l.conns, c)
	return &countedConn{Conn: c, m: l.m}, nil
}

// crash closes every connection at once, with no goodbye, and refuses to
// dial again.
func (l *clientLink) crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.crashed = true
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

func (l *clientLink) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, m: l.m, sent: map[uint64]sentReq{}}, nil
}

// countedStream counts a stream's messages and times an Owner's requests
// to the answers that acknowledge them (as owner's own renewal metric does).
type countedStream struct {
	grpc.ClientStream
	m    *wireMeter
	mu   sync.Mutex
	sent map[uint64]sentReq // LeaseRequest.Seq → when it left
}

type sentReq struct {
	at     time.Time
	steady bool // a steady renewal
}

func (s *countedStream) SendMsg(msg any) error {
	at := time.Now()
	err := s.ClientStream.SendMsg(msg)
	if err != nil {
		return err
	}
	s.m.msgOut.Add(1)
	if r, ok := msg.(*pb.LeaseRequest); ok && r.GetSeq() > 0 {
		s.mu.Lock()
		if len(s.sent) >= 64 { // answers lost: forget the oldest
			clear(s.sent)
		}
		s.sent[r.GetSeq()] = sentReq{at, r.GetHeldAsAcked() && !r.GetLeaving() && !r.GetDraining()}
		s.mu.Unlock()
	}
	return nil
}

func (s *countedStream) RecvMsg(msg any) error {
	err := s.ClientStream.RecvMsg(msg)
	if err != nil {
		return err
	}
	now := time.Now()
	s.m.msgIn.Add(1)
	if r, ok := msg.(*pb.LeaseResponse); ok && r.GetAckSeq() > 0 {
		ack := r.GetAckSeq()
		s.mu.Lock()
		req, found := s.sent[ack]
		for seq := range s.sent {
			if seq <= ack {
				delete(s.sent, seq)
			}
		}
		s.mu.Unlock()
		if found {
			s.m.mu.Lock()
			if s.m.recording {
				s.m.requests = append(s.m.requests, now.Sub(req.at))
				if req.steady {
					s.m.renewals = append(s.m.renewals, now.Sub(req.at))
				}
			}
			s.m.mu.Unlock()
		}
	}
	return nil
}

// arrivals records when a Lookup's copy reached each LSN: the driver's
// clock at the moment the Lookup applied an update, and the update's LSN.
type arrivals struct {
	log     *slog.Logger
	mu      sync.Mutex
	synced  time.Time // the first update applied (zero: none yet)
	stopped time.Time // when it was stopped (zero: running)
	at      []time.Time
	lsn     []keyspace.LSN
}

func (a *arrivals) note(now time.Time, lsn keyspace.LSN) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.synced.IsZero() {
		a.synced = now
	}
	if n := len(a.lsn); n > 0 && a.lsn[n-1] >= lsn {
		return
	}
	a.at = append(a.at, now)
	a.lsn = append(a.lsn, lsn)
}

// reached returns when the Lookup first held lsn or later, if it did
// before it stopped.
func (a *arrivals) reached(lsn keyspace.LSN) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, l := range a.lsn {
		if l >= lsn {
			return a.at[i], true
		}
	}
	return time.Time{}, false
}

func (a *arrivals) state() (synced, stopped time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.synced, a.stopped
}

func (a *arrivals) stop(now time.Time) {
	a.mu.Lock()
	a.stopped = now
	a.mu.Unlock()
}

// lookupClient is one Lookup of the load: the real lookup library (full,
// with its copy of the table) or a thin one.
type lookupClient struct {
	full   *lookup.Lookup
	thin   *thinLookup
	link   *clientLink
	arr    *arrivals
	cancel context.CancelFunc
	shared bool // its connection is a sharedLink's, which outlives it
}

// With several addresses (the read replicas) it spreads over them as the
// lookup library does (internal/client spread.go), by a key of its own.
func startLookup(ctx context.Context, addrs []string, full, sync bool, timing protocol.Timing, m *wireMeter, creds credentials.TransportCredentials) (*lookupClient, error) {
	c := &lookupClient{link: &clientLink{m: m, creds: creds}, arr: &arrivals{log: m.logger()}}
	if full {
		l, err := lookup.New(ctx, lookup.Config{
			Connection: leasehold.Connection{
				Manager:     strings.Join(addrs, ","),
				Insecure:    true,
				Timing:      timing,
				DialOptions: c.link.dialOptions(),
				Logger:      m.logger(),
			},
			OnUpdate: func(u lookup.Update) { c.arr.note(time.Now(), u.Update.To) },
		})
		if err != nil {
			return nil, err
		}
		c.full = l
		return c, nil
	}
	managers, err := client.NewManagers(addrs, c.link.dialOptions())
	if err != nil {
		return nil, err
	}
	managers.Spread(rand.Uint64())
	c.thin = startThinLookup(ctx, managers, sync, timing, c.arr)
	return c, nil
}

// sharedLink is a connection to the Manager that several thin Lookups
// share, each with a stream of its own on it (--lookups-per-conn). With
// several addresses the link's Lookups rank them by the link's key, all
// alike: they share the connection to the first, as the Lookups of one
// frontend process sharing its connections would.
type sharedLink struct {
	link     *clientLink
	managers *client.Managers
}

func newSharedLink(addrs []string, m *wireMeter, creds credentials.TransportCredentials) (*sharedLink, error) {
	link := &clientLink{m: m, creds: creds}
	managers, err := client.NewManagers(addrs, link.dialOptions())
	if err != nil {
		return nil, err
	}
	managers.Spread(rand.Uint64())
	return &sharedLink{link: link, managers: managers}, nil
}

func (s *sharedLink) close() {
	s.link.crash()
	_ = s.managers.Close()
}

// startSharedLookup starts a thin Lookup whose stream runs on s's
// connection. Stopping it ends its stream only.
func startSharedLookup(ctx context.Context, s *sharedLink, sync bool, timing protocol.Timing, m *wireMeter) *lookupClient {
	c := &lookupClient{link: s.link, arr: &arrivals{log: m.logger()}, shared: true}
	c.thin = startThinLookup(ctx, s.managers, sync, timing, c.arr)
	return c
}

func (c *lookupClient) close() {
	c.arr.stop(time.Now())
	if c.shared {
		c.thin.stop()
		return
	}
	c.link.crash()
	if c.full != nil {
		_ = c.full.Close()
	} else {
		c.thin.stop()
		_ = c.thin.managers.Close()
	}
}

// thinLookup speaks the Lookup's sync protocol to the Manager over the
// real gRPC stream by running thinlookup.Core, the simulation's thin
// Lookup: lookup.Core's rules for when to ask and what, with heartbeats
// (docs/protocol.md, "Heartbeats") — its requests say names_once and its
// MaxDrift, so a replica that serves vouches for its freshness on the
// stream, and on a healthy stream it polls only every LookupPollMax
// (16 × Sync), or when the Manager's heartbeats stop; a delta or snapshot
// applied by moving its LSN; asking again on a gap (at most every Sync/4)
// or a new epoch without a snapshot; asking at once on a new stream — but
// it keeps no copy of the table: the driver could not hold thousands of
// copies. The Manager receives the same requests and sends the same
// updates as to a full Lookup (internal/sim's
// TestThinLookupsLoadTheManagerAlike checks the Core against lookup.Core),
// except that it does not say compact_changes. It receives every byte of
// every update but reads only its header (loopback_skim.go): the decoding
// of thousands of snapshots would be the driver's load, not the Manager's.
type thinLookup struct {
	arr      *arrivals
	managers *client.Managers
	recv     chan *protocol.SyncResponse
	sendq    chan *pb.SyncRequest
	reopened chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	core     *thinlookup.Core // the loop's
}

func startThinLookup(ctx context.Context, managers *client.Managers, sync bool, timing protocol.Timing, arr *arrivals) *thinLookup {
	managers.CapBackoff(timing.Sync / 4)
	managers.Liveness(func() time.Duration { return timing.LookupAnswerWait() }, false)
	l := &thinLookup{arr: arr, managers: managers,
		recv: make(chan *protocol.SyncResponse, 64), sendq: make(chan *pb.SyncRequest, 16),
		reopened: make(chan struct{}, 1), core: thinlookup.New(protocol.DefaultNamespace, timing, time.Now())}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.wg.Add(2)
	go l.run(ctx)
	go func() {
		defer l.wg.Done()
		opened := 0
		client.Keep(ctx, arr.log, "sync", managers,
			func(ctx context.Context, cc grpc.ClientConnInterface) (client.Stream[pb.SyncRequest, skimmedSync], error) {
				st, err := openSkimmed(ctx, cc, sync, timing.LookupAnswerWait())
				if opened++; err == nil && opened > 1 {
					select {
					case l.reopened <- struct{}{}:
					default:
					}
				}
				return st, err
			}, l.sendq, (*skimmedSync).response, l.recv)
	}()
	return l
}

// stop ends the Lookup's stream and its goroutines; its connection is
// closed by whoever owns it.
func (l *thinLookup) stop() {
	l.cancel()
	l.wg.Wait()
}

// run drives the Core: answers and pushes to Step (noting the update's
// arrival when the LSN or epoch moves), Tick at its deadline, and a sync
// at once on a reopened stream.
func (l *thinLookup) run(ctx context.Context) {
	defer l.wg.Done()
	c := l.core
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		for _, r := range c.Ready() {
			select {
			case l.sendq <- wire.SyncRequestToPB(r): // names_once and max_drift: Heartbeats, MaxDrift
			default: // the stream is down or slow: a lost message
			}
		}
		timer.Reset(max(time.Until(c.NextDeadline()), 0))
		select {
		case <-ctx.Done():
			return
		case m := <-l.recv:
			now := time.Now()
			epoch, lsn := c.Epoch(), c.LSN()
			c.Step(now, m)
			if c.Epoch() != epoch || c.LSN() != lsn {
				l.arr.note(now, c.LSN())
			}
		case <-l.reopened:
			c.Reconnected(time.Now())
		case <-timer.C:
			c.Tick(time.Now())
		}
	}
}

// ownerClient is one Owner of the load, on the real owner library.
type ownerClient struct {
	id   string
	o    *owner.Owner
	link *clientLink
}

func startOwner(ctx context.Context, addr, id string, port int, timing protocol.Timing, m *wireMeter, creds credentials.TransportCredentials) (*ownerClient, error) {
	link := &clientLink{m: m, creds: creds}
	o, err := owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{
			Manager:     addr,
			Insecure:    true,
			Timing:      timing,
			DialOptions: link.dialOptions(),
			Logger:      m.logger(),
		},
		ID:   id,
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
	})
	if err != nil {
		return nil, err
	}
	return &ownerClient{id: id, o: o, link: link}, nil
}

// leave stops the Owner gracefully: it drains (without handovers its
// ranges are given up at once when asked) and says goodbye.
func (c *ownerClient) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = c.o.Close(ctx)
	c.link.crash()
}

// crash stops the Owner as a process that died: its connections close
// with no goodbye, and the Manager regrants its ranges only once their
// leases have run out.
func (c *ownerClient) crash() {
	c.link.crash()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.o.Close(ctx) // nothing reaches the Manager: every dial fails
}
