package manager

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasehold/leasehold/internal/peers"
	"github.com/leasehold/leasehold/manager/config"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// The limits a replica's listener enforces on its clients, with the flags
// that set them. Each refusal names the limit and its flag, and is counted
// in leasehold_limit_refusals_total{limit}. docs/operations.md lists them.
const (
	limitMessage     = "max-message-bytes"
	limitConnections = "max-connections"
	limitRate        = "max-request-rate"
	limitOwners      = "max-owners"
	limitRanges      = "max-ranges"
)

// Defaults of the listener's limits (ServerConfig).
const (
	DefaultMaxConnections    = 50000
	DefaultMaxStreamsPerConn = 10000
	DefaultIdleTimeout       = 5 * time.Minute
)

// newLimitRefusals counts the refusals of each limit.
func newLimitRefusals() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_limit_refusals_total",
		Help: "Requests, messages and connections refused for a limit, by the flag that sets it.",
	}, []string{"limit"})
	for _, l := range []string{limitMessage, limitConnections, limitRate, limitOwners, limitRanges} {
		c.WithLabelValues(l)
	}
	return c
}

// limitRefused counts one refusal of limit.
func (s *Server) limitRefused(limit string) { s.metrics.limits.WithLabelValues(limit).Inc() }

// limitOptions are the listener's limits as gRPC server options: the codec
// that checks each message's size for its service before decoding it and
// turns a message that does not decode into InvalidArgument, the
// interceptors that report both, streams per connection, and the idle
// timeout. GRPCOptions includes them.
func (s *Server) limitOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(limitCodecV2{limitCodec{s}}),
		grpc.ChainUnaryInterceptor(s.decodeUnary),
		grpc.ChainStreamInterceptor(s.decodeStream),
		grpc.MaxConcurrentStreams(uint32(s.cfg.MaxStreamsPerConn)),
		// A connection whose handshake does not finish in time is closed.
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.StatsHandler(unreadRefusals{s}),
	}
	if s.cfg.IdleTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.cfg.IdleTimeout}))
	}
	return opts
}

// limitCodec is the proto codec with two checks on the way in. The size of
// a message is checked against its service's limit before it is decoded:
// a part of a Raft message may be as large as peers.PartBytes, every other
// message as large as MaxMessageBytes. And a message that does not decode
// (bad UTF-8 in a string, a truncated field) is the sender's fault. gRPC
// turns any codec error into Internal, so the codec leaves its verdict in
// the message itself instead (refuseMessage) and the interceptors answer
// it: ResourceExhausted naming the limit, or InvalidArgument naming the
// field. The verdict lives and dies with the message, whatever refuses the
// call first: an interceptor before the decoding one (the role check), or
// gRPC itself (a second request on a server-streaming call). A side table
// kept the partly decoded message of every call refused before the
// decoding interceptor took its verdict, and a stranger could fill the
// heap with them.
//
// gRPC itself refuses a message over the server's MaxRecvMsgSize (the
// larger of the two limits) from its length prefix, before reading its
// body, and answers it at once with its own status ("grpc: received
// message larger than max (N vs. M)"), which names no flag: the price of
// never reading it; unreadRefusals still counts it.
type limitCodec struct{ s *Server }

func (limitCodec) Name() string { return "proto" }

func (limitCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("leasehold: cannot encode %T", v)
	}
	return proto.Marshal(m)
}

func (c limitCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("leasehold: cannot decode into %T", v)
	}
	limit, name := c.s.cfg.MaxMessageBytes, "MaxMessageBytes, leasehold manager --"+limitMessage
	if _, raft := v.(*pb.RaftMessage); raft {
		limit, name = peers.PartBytes+peers.PartFraming, "a Raft message part, peers.PartBytes"
	}
	if len(data) > limit {
		c.s.limitRefused(limitMessage)
		refuseMessage(m, codes.ResourceExhausted, fmt.Sprintf(
			"leasehold: a %s of %d bytes is larger than the %d allowed (%s)", m.ProtoReflect().Descriptor().Name(), len(data), limit, name))
		return nil
	}
	if err := proto.Unmarshal(data, m); err != nil {
		what := err.Error()
		if f := badUTF8Field(m.ProtoReflect().Descriptor(), data); f != "" {
			what = "field " + f + " is not valid UTF-8"
		}
		refuseMessage(m, codes.InvalidArgument, fmt.Sprintf("leasehold: a %s does not decode: %s", m.ProtoReflect().Descriptor().Name(), what))
		return nil
	}
	if verdictOf(m) != nil {
		// A sender's own "verdict" would choose the status of its call.
		refuseMessage(m, codes.InvalidArgument, fmt.Sprintf("leasehold: a %s carries field number %d, which is reserved", m.ProtoReflect().Descriptor().Name(), verdictField))
	}
	return nil
}

// verdictField is the field number under which the codec leaves its
// verdict on a message it refused, as an unknown field: the status code in
// one byte, then the message. No leasehold message uses it (it is the
// largest field number protobuf allows), and one that arrives with it is
// refused.
const verdictField = protowire.MaxValidNumber

// refuseMessage empties m, so that nothing of what was partly decoded is
// kept, and leaves in it the status its call is to be answered with.
func refuseMessage(m proto.Message, code codes.Code, msg string) {
	proto.Reset(m)
	b := protowire.AppendTag(nil, verdictField, protowire.BytesType)
	b = protowire.AppendBytes(b, append([]byte{byte(code)}, msg...))
	m.ProtoReflect().SetUnknown(b)
}

// verdictOf returns the status refuseMessage left in m, or nil.
func verdictOf(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	u := pm.ProtoReflect().GetUnknown()
	for len(u) > 0 {
		num, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return nil
		}
		u = u[n:]
		if num == verdictField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(u)
			if n < 0 || len(v) == 0 || codes.Code(v[0]) == codes.OK {
				return status.Error(codes.InvalidArgument, "leasehold: a message carries a malformed reserved field")
			}
			return status.Error(codes.Code(v[0]), string(v[1:]))
		}
		if n = protowire.ConsumeFieldValue(num, typ, u); n < 0 {
			return nil
		}
		u = u[n:]
	}
	return nil
}

// unreadRefusals counts, under max-message-bytes, the messages gRPC refuses
// from their length prefix (larger than every service's limit): they never
// reach limitCodec, and for a unary call not even the interceptors.
type unreadRefusals struct{ s *Server }

func (unreadRefusals) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (unreadRefusals) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (unreadRefusals) HandleConn(context.Context, stats.ConnStats) {}

func (h unreadRefusals) HandleRPC(_ context.Context, st stats.RPCStats) {
	end, ok := st.(*stats.End)
	if !ok || end.Error == nil {
		return
	}
	if s, _ := status.FromError(end.Error); s.Code() == codes.ResourceExhausted && strings.HasPrefix(s.Message(), "grpc: received message larger than max") {
		h.s.limitRefused(limitMessage)
	}
}

// limitCodecV2 is limitCodec as gRPC's CodecV2, which lets a message be
// handed to gRPC in pieces: a Lookup's message whose update is shared with
// other streams (encodedSync) goes as its own fields and the shared
// update's bytes, encoded once for all (encode.go).
type limitCodecV2 struct{ c limitCodec }

func (limitCodecV2) Name() string { return "proto" }

func (c limitCodecV2) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedSync); ok {
		return e.marshal()
	}
	if m, ok := v.(*pb.SyncResponse); ok && m.Update != nil {
		updateEncodings.Add(1)
	}
	b, err := c.c.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c limitCodecV2) Unmarshal(data mem.BufferSlice, v any) error {
	return c.c.Unmarshal(data.Materialize(), v)
}

// badUTF8Field returns the path of the first string field of a message of
// type d, encoded in b, that is not valid UTF-8 ("held.owner"), or "".
// (The proto decoder's own error does not name the field.)
func badUTF8Field(d protoreflect.MessageDescriptor, b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := d.Fields().ByNumber(num)
		switch {
		case fd == nil:
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return string(fd.Name())
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			if sub := badUTF8Field(fd.Message(), v); sub != "" {
				return string(fd.Name()) + "." + sub
			}
		}
	}
	return ""
}

func (s *Server) decodeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := verdictOf(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) decodeStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, decodeCheck{ss})
}

// decodeCheck is a stream whose RecvMsg answers the codec's verdict.
type decodeCheck struct{ grpc.ServerStream }

func (d decodeCheck) RecvMsg(m any) error {
	if err := d.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return verdictOf(m)
}

// limitListener caps the connections open at once at MaxConnections. A
// connection past it is answered, in HTTP/2, with a GOAWAY whose debug data
// names the limit (a gRPC client reports it in its error), and closed.
//
// It also closes every connection it accepted when told to (closeAll): gRPC's
// Stop waits for connections still in their handshake, up to the handshake
// timeout, so a few connections that never speak would hold a stopping
// replica back.
func (s *Server) limitListener(lis net.Listener) *connLimit {
	return &connLimit{Listener: lis, s: s, slots: make(chan struct{}, s.cfg.MaxConnections), open: map[*slotConn]bool{}}
}

type connLimit struct {
	net.Listener
	s     *Server
	slots chan struct{}

	mu     sync.Mutex
	open   map[*slotConn]bool
	closed bool
}

// closeAll closes every connection accepted and not yet closed, and any
// accepted from now on.
func (l *connLimit) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*slotConn, 0, len(l.open))
	for c := range l.open {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			sc := &slotConn{Conn: c}
			sc.free = func() {
				<-l.slots
				l.mu.Lock()
				delete(l.open, sc)
				l.mu.Unlock()
			}
			l.mu.Lock()
			closed := l.closed
			if !closed {
				l.open[sc] = true
			}
			l.mu.Unlock()
			if closed {
				_ = sc.Close()
				continue
			}
			return sc, nil
		default:
		}
		l.s.limitRefused(limitConnections)
		go refuseConn(c, fmt.Sprintf("leasehold: this replica has %d connections open, the most allowed (MaxConnections, leasehold manager --%s)",
			cap(l.slots), limitConnections))
	}
}

// refuseConn answers a connection it will not serve with the server's
// HTTP/2 preface and a GOAWAY saying why, then closes it.
func refuseConn(c net.Conn, why string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	f := http2.NewFramer(c, c)
	if f.WriteSettings() != nil || f.WriteGoAway(0, http2.ErrCodeEnhanceYourCalm, []byte(why)) != nil {
		return
	}
	// Let the client read it: a close with its preface unread would send a
	// reset that may overtake the GOAWAY.
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// slotConn frees its slot when closed, once.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// rateError refuses a stream past MaxRequestRate.
func (s *Server) rateError() error {
	s.limitRefused(limitRate)
	return status.Errorf(codes.ResourceExhausted, "leasehold: more than %g requests per second on one stream (MaxRequestRate, leasehold manager --%s)",
		s.cfg.MaxRequestRate, limitRate)
}

// countLimit counts a refusal of the core's limits, named in err.
func (s *Server) countLimit(err error) {
	for _, l := range []string{limitOwners, limitRanges} {
		if strings.Contains(err.Error(), "--"+l) {
			s.limitRefused(l)
		}
	}
}

// setLimitDefaults fills in and checks the listener's limits.
func (c *ServerConfig) setLimitDefaults() error {
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxConnections", &c.MaxConnections, DefaultMaxConnections}, {"MaxStreamsPerConn", &c.MaxStreamsPerConn, DefaultMaxStreamsPerConn}} {
		if *f.v < 0 {
			return &config.FieldError{Field: f.name, Err: fmt.Errorf("%d is negative", *f.v)}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.MaxMessageBytes < 0 {
		return &config.FieldError{Field: "MaxMessageBytes", Err: fmt.Errorf("%d is negative", c.MaxMessageBytes)}
	}
	if c.MaxRequestRate < 0 {
		return &config.FieldError{Field: "MaxRequestRate", Err: fmt.Errorf("%g is negative", c.MaxRequestRate)}
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return nil
}
