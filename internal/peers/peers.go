// Package peers carries Raft messages between the replicas of the Manager's
// Raft group, over the leasehold.v1.Raft gRPC service on the port the
// Manager already serves.
//
// Each replica keeps one client stream open to every other replica and sends
// it the messages Raft addresses to it; messages from the others arrive on
// the streams they keep open to this replica and go to Config.Deliver. A
// stream carries messages one way only: replies travel on the reverse
// stream.
//
// The transport is lossy by design. Raft retransmits whatever it does not
// see acknowledged (heartbeats, probes, appends, votes after a timeout), so a
// lost message costs time, never safety. Send therefore never waits: a
// message to a peer whose queue is full, or that is queued when the stream
// to the peer breaks, is dropped and counted (Stats), and the caller learns
// of the failure through OnUnreachable and OnSnapshot, which it passes on to
// Raft (RawNode.ReportUnreachable, RawNode.ReportSnapshot) so that Raft
// slows down to probing and retries snapshots.
//
// Incoming messages are decoded and checked before Deliver sees them: a
// message that does not decode, is addressed to another replica, claims to
// come from this replica or from no one, or has a type Raft only uses inside
// a replica ends its stream with codes.InvalidArgument. Raft itself trusts
// its input (an unknown message type can make it index out of range), so
// nothing that fails these checks may reach it.
package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/wire"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Defaults for the Config fields left zero.
const (
	DefaultQueueLen        = 4096
	DefaultMaxMessageBytes = 64 << 20
)

// PartBytes is the largest part of a Raft message one RaftMessage carries:
// a larger message (a snapshot) travels in parts that the receiver joins.
// So the gRPC server that also serves clients needs to accept no message
// larger than a part (plus the framing, PartFraming) from anyone, and a
// client's oversized message is refused from its length prefix, before its
// body is read, instead of after the Raft limit's worth of it.
const (
	PartBytes   = 1 << 20
	PartFraming = 16
)

// Stream timings: reconnection backoff between minBackoff and maxBackoff (a
// peer that comes back is reached within about an election timeout), and the
// longest wait for a stream to open before the attempt counts as failed
// (an address that swallows packets would otherwise hold it for gRPC's
// 20-second connect timeout).
const (
	minBackoff  = 50 * time.Millisecond
	maxBackoff  = time.Second
	openTimeout = 5 * time.Second
)

// Config configures a Transport.
type Config struct {
	// Self is this replica's Raft ID. Incoming messages must be addressed to
	// it; outgoing messages to it are dropped.
	Self uint64
	// Deliver is called with each valid incoming message. It is called from
	// gRPC goroutines, concurrently for messages from different peers (in
	// order within each stream); it must not block long and must not call
	// Close.
	// The message and everything it points to belong to the callee.
	Deliver func(raftpb.Message)
	// OnUnreachable, if set, is called when a stream to peer id could not be
	// opened or broke; the caller reports RawNode.ReportUnreachable(id). While
	// a peer stays down it is called once per reconnection attempt.
	//
	// OnUnreachable and OnSnapshot are called from the peer's goroutine,
	// never from Send. They must not block long, and must not block on
	// anything that waits for Close: Close waits for a callback under way.
	OnUnreachable func(id uint64)
	// OnSnapshot, if set, is called once for each MsgSnap passed to Send for
	// a known peer: ok when the message was written to the peer's stream
	// (which is not an acknowledgement from the peer), not ok when it was
	// dropped (queue full, stream broken, too large). The caller reports
	// RawNode.ReportSnapshot(id, raft.SnapshotFinish or
	// raft.SnapshotFailure). Drops that coincide may be reported once.
	OnSnapshot func(id uint64, ok bool)
	// DialOptions are used to dial peers; empty means plaintext (insecure
	// transport credentials). Non-empty options must include credentials.
	DialOptions []grpc.DialOption
	// Sender, if set, authenticates an incoming stream: it returns the Raft
	// ID of the replica that opened it (from its certificate), or the
	// status to refuse it with. Every message on the stream must then come
	// from that replica, and from a current peer: a stream carrying another
	// sender's message is refused with PermissionDenied, and a message from
	// a replica that is not a current peer is dropped (RefusedNonMember).
	// Nil trusts the sender field of each message (plaintext groups).
	Sender func(ctx context.Context) (uint64, error)
	// QueueLen is the number of messages queued for each peer, default
	// DefaultQueueLen. Messages sent to a full queue are dropped.
	QueueLen int
	// MaxMessageBytes is the largest encoded raftpb.Message sent or
	// accepted, default DefaultMaxMessageBytes: it bounds snapshots. It
	// travels in parts of PartBytes; the gRPC server Register is given must
	// accept a part and its framing: grpc.MaxRecvMsgSize(PartBytes+
	// PartFraming) or more. Replicas must agree on it.
	MaxMessageBytes int
	// Logger receives connection failures and refused messages; nil
	// discards.
	Logger *slog.Logger
}

// Stats are the transport's counters, for metrics.
type Stats struct {
	// Peers holds the counters of each current peer, by Raft ID.
	Peers map[uint64]PeerStats
	// DroppedUnknown counts messages Send dropped because they were addressed
	// to Self or to no current peer, or were sent after Close.
	DroppedUnknown uint64
	// ReceivedUnknown counts delivered messages from senders that are not
	// current peers (a replica that has not been told of the sender yet).
	// The transport delivers them: membership is the replica's to judge
	// (replica.Replica.StepRaft drops a non-member's message once it knows
	// its group), because a replica started to join knows no group yet and
	// must hear the leader that adds it.
	ReceivedUnknown uint64
	// Refused counts incoming streams ended because of an invalid message.
	Refused uint64
	// RefusedNonMember counts messages dropped because their sender, as its
	// certificate names it (Config.Sender), is not a current peer.
	RefusedNonMember uint64
}

// PeerStats are one peer's counters. They start at zero when the peer is
// added and survive address changes.
type PeerStats struct {
	// Addr is the peer's current address.
	Addr string
	// Connected is true while a stream to the peer is open.
	Connected bool
	// Sent counts messages written to the peer's stream.
	Sent uint64
	// Received counts messages from the peer passed to Deliver.
	Received uint64
	// Dropped counts messages to the peer that were not sent: queue full,
	// stream broken, or larger than MaxMessageBytes.
	Dropped uint64
}

// Transport sends Raft messages to the other replicas and receives theirs.
// Its methods are safe for concurrent use.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // peer goroutines and incoming stream readers

	mu     sync.RWMutex
	closed bool
	peers  map[uint64]*peer

	// deliverMu is held for reading around each Deliver call; Close takes it
	// for writing to set stopped, so no Deliver runs after Close returns.
	deliverMu sync.RWMutex
	stopped   bool

	droppedUnknown  atomic.Uint64
	receivedUnknown atomic.Uint64
	refused         atomic.Uint64
	nonMember       atomic.Uint64
}

// New returns a Transport with no peers. Register it on a gRPC server to
// receive; add peers with SetPeer to send.
func New(cfg Config) *Transport {
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Deliver == nil {
		cfg.Deliver = func(raftpb.Message) {}
	}
	// client.Dial appends to the options; clipping makes every append copy,
	// so peers dialling at once never share a backing array.
	cfg.DialOptions = slices.Clip(cfg.DialOptions)
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		cfg:    cfg,
		log:    cfg.Logger.With("self", cfg.Self),
		ctx:    ctx,
		cancel: cancel,
		peers:  map[uint64]*peer{},
	}
}

// Register adds the Raft service to s. The server's grpc.MaxRecvMsgSize must
// be at least PartBytes+PartFraming.
func (t *Transport) Register(s grpc.ServiceRegistrar) {
	pb.RegisterRaftServer(s, server{t: t})
}

// SetPeer adds peer id at addr (its peer address, where it serves the Raft
// service), or changes the address of a known peer, which reconnects at once.
// IDs 0 and Self are ignored.
func (t *Transport) SetPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.Self {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[id]; p != nil {
		p.setAddr(addr)
		return
	}
	ctx, cancel := context.WithCancel(t.ctx)
	p := &peer{
		t:           t,
		id:          id,
		ctx:         ctx,
		cancel:      cancel,
		addr:        addr,
		queue:       make(chan *raftpb.Message, t.cfg.QueueLen),
		changed:     make(chan struct{}, 1),
		snapDropped: make(chan struct{}, 1),
	}
	t.peers[id] = p
	t.wg.Add(1)
	go p.run()
}

// RemovePeer forgets peer id: its stream is closed and what is queued for it
// is dropped without callbacks. It does not wait for the peer's goroutine.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		p.cancel()
	}
}

// Send queues each message for its peer (the message's To) and returns at
// once. Messages to Self, to unknown peers, to a peer whose queue is full,
// or sent after Close are dropped and counted. The messages are encoded
// later, on the peer's goroutine: the caller must not modify them (or the
// entries and snapshot they point to) after Send, which Raft never does.
func (t *Transport) Send(msgs []raftpb.Message) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := range msgs {
		m := msgs[i]
		p := t.peers[m.To]
		if t.closed || p == nil {
			t.droppedUnknown.Add(1)
			continue
		}
		select {
		case p.queue <- &m:
		default:
			p.dropped.Add(1)
			if m.Type == raftpb.MsgSnap {
				// Reported from the peer's goroutine: Send never calls back.
				select {
				case p.snapDropped <- struct{}{}:
				default:
				}
			}
		}
	}
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := Stats{
		Peers:            make(map[uint64]PeerStats, len(t.peers)),
		DroppedUnknown:   t.droppedUnknown.Load(),
		ReceivedUnknown:  t.receivedUnknown.Load(),
		Refused:          t.refused.Load(),
		RefusedNonMember: t.nonMember.Load(),
	}
	for id, p := range t.peers {
		s.Peers[id] = PeerStats{
			Addr:      p.address(),
			Connected: p.connected.Load(),
			Sent:      p.sent.Load(),
			Received:  p.received.Load(),
			Dropped:   p.dropped.Load(),
		}
	}
	return s
}

// Close stops the transport: streams to peers are closed, streams from peers
// are ended with codes.Unavailable (the gRPC server keeps running), and Close
// waits for every goroutine the transport started. No callback runs after
// Close returns. Close may be called more than once.
func (t *Transport) Close() {
	t.mu.Lock()
	t.closed = true
	t.peers = map[uint64]*peer{}
	t.mu.Unlock()
	t.cancel()
	t.deliverMu.Lock()
	t.stopped = true
	t.deliverMu.Unlock()
	t.wg.Wait()
}

// peer is one outgoing stream and its queue, served by run.
type peer struct {
	t      *Transport
	id     uint64
	ctx    context.Context // cancelled by RemovePeer and Close
	cancel context.CancelFunc

	mu   sync.Mutex
	addr string

	queue       chan *raftpb.Message
	changed     chan struct{} // the address changed
	snapDropped chan struct{} // Send dropped a MsgSnap

	connected               atomic.Bool
	sent, received, dropped atomic.Uint64
}

func (p *peer) address() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	same := p.addr == addr
	p.addr = addr
	p.mu.Unlock()
	if !same {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// errAddrChanged ends a stream whose peer has moved.
var errAddrChanged = errors.New("peer address changed")

// run keeps a stream to the peer open until the peer is removed or the
// transport closed, reconnecting with backoff.
func (p *peer) run() {
	defer p.t.wg.Done()
	b := client.Backoff{Min: minBackoff, Max: maxBackoff}
	failing := false // the last attempt failed: log further failures quietly
	for {
		addr := p.address()
		healthy, err := p.connect(addr, failing)
		if p.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errAddrChanged) {
			b.Reset()
			failing = false
			continue
		}
		if healthy && !refused(err) {
			b.Reset()
			failing = false
		}
		p.failed(addr, err, failing)
		failing = true
		if !p.wait(b.Next()) {
			return
		}
	}
}

// refused reports an error with which the peer turned the stream down: it
// will do so again, so the backoff keeps growing and the logs stay quiet
// even though messages were written before the answer came.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unimplemented:
		return true
	}
	return false
}

// connect dials addr and runs one stream on a fresh connection: every
// attempt starts clean, so this package's backoff alone paces reconnection.
// It reports whether any message was written. recovering says the last
// attempt failed, so an open stream is worth logging.
func (p *peer) connect(addr string, recovering bool) (healthy bool, err error) {
	conn, err := client.Dial(addr, p.t.cfg.DialOptions)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	return p.stream(pb.NewRaftClient(conn), addr, recovering)
}

type opened struct {
	st  grpc.ClientStreamingClient[pb.RaftMessage, pb.RaftAck]
	err error
}

// stream opens a Raft.Send stream and writes queued messages to it until it
// breaks, the address changes or the peer goes away. Messages wait in the
// queue while the stream opens.
func (p *peer) stream(client pb.RaftClient, addr string, recovering bool) (healthy bool, err error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()

	// Open on a helper goroutine so that snapshot drops are reported and
	// address changes are seen while the connection is being made.
	open := make(chan opened, 1)
	go func() {
		st, err := client.Send(ctx)
		open <- opened{st, err}
	}()
	timer := time.NewTimer(openTimeout)
	defer timer.Stop()
	var st grpc.ClientStreamingClient[pb.RaftMessage, pb.RaftAck]
	for st == nil {
		select {
		case o := <-open:
			if o.err != nil {
				return false, o.err
			}
			st = o.st
		case <-p.snapDropped:
			p.reportSnapshot(false)
		case <-p.changed:
			cancel()
			<-open
			return false, errAddrChanged
		case <-timer.C:
			cancel()
			<-open
			return false, fmt.Errorf("no stream within %v", openTimeout)
		case <-p.ctx.Done():
			cancel()
			<-open
			return false, p.ctx.Err()
		}
	}

	// The peer answers only by ending the stream: RecvMsg returns then, with
	// its status. It also returns once ctx is cancelled.
	ended := make(chan error, 1)
	go func() { ended <- st.RecvMsg(new(pb.RaftAck)) }()
	if recovering {
		p.t.log.Info("raft stream to peer open", "peer", p.id, "addr", addr)
	}
	p.connected.Store(true)
	defer p.connected.Store(false)
	end := func(err error) (bool, error) {
		cancel()
		<-ended
		return healthy, err
	}
	for {
		select {
		case m := <-p.queue:
			b, err := p.encode(m)
			if err != nil {
				p.drop(m)
				p.t.log.Error("dropping a raft message that cannot be sent", "peer", p.id, "type", m.Type, "err", err)
				continue
			}
			if err := sendParts(st, b); err != nil {
				p.drop(m)
				if err == io.EOF { // the stream ended; RecvMsg has the reason
					return healthy, peerEnded(<-ended)
				}
				return end(err)
			}
			p.sent.Add(1)
			healthy = true
			if m.Type == raftpb.MsgSnap {
				p.reportSnapshot(true)
			}
		case err := <-ended:
			return healthy, peerEnded(err)
		case <-p.snapDropped:
			p.reportSnapshot(false)
		case <-p.changed:
			return end(errAddrChanged)
		case <-p.ctx.Done():
			return end(p.ctx.Err())
		}
	}
}

// sendParts sends the encoded message b on st, in parts of PartBytes.
func sendParts(st grpc.ClientStreamingClient[pb.RaftMessage, pb.RaftAck], b []byte) error {
	for len(b) > PartBytes {
		if err := st.Send(&pb.RaftMessage{Message: b[:PartBytes], More: true}); err != nil {
			return err
		}
		b = b[PartBytes:]
	}
	return st.Send(&pb.RaftMessage{Message: b})
}

// peerEnded turns the status a peer ended a stream with into an error.
func peerEnded(err error) error {
	if err == nil || err == io.EOF {
		return errors.New("the peer closed the stream")
	}
	return err
}

func (p *peer) encode(m *raftpb.Message) ([]byte, error) {
	if n := m.Size(); n > p.t.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%d bytes encoded exceed MaxMessageBytes (%d)", n, p.t.cfg.MaxMessageBytes)
	}
	return m.Marshal()
}

// drop counts a message that will not be sent and reports a MsgSnap.
func (p *peer) drop(m *raftpb.Message) {
	p.dropped.Add(1)
	if m.Type == raftpb.MsgSnap {
		p.reportSnapshot(false)
	}
}

// failed handles a stream that could not be opened or broke: what is queued
// is dropped (it is stale by the time the peer is back, and a MsgSnap must
// be reported), and the peer is reported unreachable.
func (p *peer) failed(addr string, err error, quiet bool) {
	level := slog.LevelWarn
	if quiet {
		level = slog.LevelDebug
	}
	p.t.log.Log(p.ctx, level, "raft stream to peer failed; reconnecting", "peer", p.id, "addr", addr, "err", err)
	for drained := false; !drained; {
		select {
		case m := <-p.queue:
			p.drop(m)
		default:
			drained = true
		}
	}
	if p.ctx.Err() == nil && p.t.cfg.OnUnreachable != nil {
		p.t.cfg.OnUnreachable(p.id)
	}
}

// wait waits d before the next attempt, or less if the address changes. It
// reports false when the peer is gone. Messages sent meanwhile stay queued
// for the next stream.
func (p *peer) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return true
		case <-p.changed:
			return true
		case <-p.snapDropped:
			p.reportSnapshot(false)
		case <-p.ctx.Done():
			return false
		}
	}
}

func (p *peer) reportSnapshot(ok bool) {
	if p.ctx.Err() == nil && p.t.cfg.OnSnapshot != nil {
		p.t.cfg.OnSnapshot(p.id, ok)
	}
}

// server is the Raft service. It is a separate type because its Send would
// clash with Transport.Send.
type server struct {
	pb.UnimplementedRaftServer
	t *Transport
}

// Send receives one peer's stream. The stream is read on a helper goroutine
// so that Close can end the call while the helper waits in Recv; gRPC
// cancels the stream when the handler returns, which ends the helper.
func (s server) Send(stream grpc.ClientStreamingServer[pb.RaftMessage, pb.RaftAck]) error {
	t := s.t
	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		return errClosed
	}
	t.wg.Add(1) // under mu, so never after Close's Wait began
	t.mu.RUnlock()
	errc := make(chan error, 1)
	go func() {
		defer t.wg.Done()
		errc <- t.receive(stream)
	}()
	select {
	case err := <-errc:
		if err == nil {
			return stream.SendAndClose(&pb.RaftAck{})
		}
		return err
	case <-t.ctx.Done():
		return errClosed
	}
}

var errClosed = status.Error(codes.Unavailable, "peers: the raft transport is closed")

// receive reads, checks and delivers messages until the stream ends: nil
// when the sender closed it, an InvalidArgument status for a bad message.
func (t *Transport) receive(stream grpc.ClientStreamingServer[pb.RaftMessage, pb.RaftAck]) error {
	var sender uint64
	if t.cfg.Sender != nil {
		var err error
		if sender, err = t.cfg.Sender(stream.Context()); err != nil {
			t.refused.Add(1)
			return err
		}
	}
	var parts []byte // the parts of a message received so far
	joining := false
	for {
		rm, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		b := rm.GetMessage()
		if joining || rm.GetMore() {
			if len(parts)+len(b) <= t.cfg.MaxMessageBytes {
				parts = append(parts, b...)
				if joining = rm.GetMore(); joining {
					continue
				}
				b, parts = parts, nil
			} else {
				err = fmt.Errorf("raft message of more than %d bytes (in parts) exceeds the limit of %d", len(parts)+len(b), t.cfg.MaxMessageBytes)
			}
		}
		switch {
		case err != nil:
		case len(b) > t.cfg.MaxMessageBytes:
			err = fmt.Errorf("raft message of %d bytes exceeds the limit of %d", len(b), t.cfg.MaxMessageBytes)
		default:
			var m raftpb.Message
			if m, err = decode(t.cfg.Self, b); err == nil {
				if sender != 0 && m.From != sender {
					t.refused.Add(1)
					t.log.Warn("refusing a raft stream whose message names another sender", "from", m.From, "certificate", sender)
					return status.Errorf(codes.PermissionDenied, "peers: a raft message from replica %d on the stream of replica %d (its certificate): wrong identity", m.From, sender)
				}
				if sender != 0 && !t.isPeer(sender) {
					if t.nonMember.Add(1)%100 == 1 {
						t.log.Warn("dropping raft messages from a replica that is not a member", "from", sender)
					}
					continue
				}
				if !t.deliver(m) {
					return errClosed
				}
				continue
			}
		}
		t.refused.Add(1)
		t.log.Warn("refusing a raft stream", "err", err)
		return status.Error(codes.InvalidArgument, "peers: "+err.Error())
	}
}

// isPeer reports whether id is a current peer.
func (t *Transport) isPeer(id uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[id] != nil
}

// deliver passes m to Deliver unless the transport is closed.
func (t *Transport) deliver(m raftpb.Message) bool {
	t.deliverMu.RLock()
	defer t.deliverMu.RUnlock()
	if t.stopped {
		return false
	}
	t.mu.RLock()
	p := t.peers[m.From]
	t.mu.RUnlock()
	if p != nil {
		p.received.Add(1)
	} else {
		t.receivedUnknown.Add(1)
	}
	t.cfg.Deliver(m)
	return true
}

// decode parses an incoming raftpb.Message for replica self and checks what
// Raft relies on without checking: a known message type, an entry type it
// knows in every entry. It never panics: a panic while parsing hostile bytes
// is reported as an error.
func decode(self uint64, b []byte) (m raftpb.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = raftpb.Message{}, fmt.Errorf("undecodable raft message: %v", r)
		}
	}()
	return parse(self, b)
}

// parse is decode without the recover, for the fuzz test.
func parse(self uint64, b []byte) (raftpb.Message, error) {
	var m raftpb.Message
	if err := m.Unmarshal(b); err != nil {
		return raftpb.Message{}, fmt.Errorf("undecodable raft message: %w", err)
	}
	if _, ok := raftpb.MessageType_name[int32(m.Type)]; !ok && !wire.IsReadLeaseType(int32(m.Type)) {
		return raftpb.Message{}, fmt.Errorf("raft message of unknown type %d", int32(m.Type))
	}
	if raft.IsLocalMsg(m.Type) {
		return raftpb.Message{}, fmt.Errorf("raft message of type %v, which never leaves a replica", m.Type)
	}
	if m.To != self {
		return raftpb.Message{}, fmt.Errorf("raft message to replica %d arrived at replica %d", m.To, self)
	}
	if m.From == 0 || m.From == self {
		return raftpb.Message{}, fmt.Errorf("raft message to replica %d claims to come from replica %d", self, m.From)
	}
	for i := range m.Entries {
		if _, ok := raftpb.EntryType_name[int32(m.Entries[i].Type)]; !ok {
			return raftpb.Message{}, fmt.Errorf("raft message with an entry of unknown type %d", int32(m.Entries[i].Type))
		}
	}
	return m, nil
}
