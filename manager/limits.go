package manager

import (
	"context"
	"fmt"
	"github.com/leasehold/leasehold"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasehold/leasehold/internal/peers"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// The limits a replica's listener enforces on its clients, with the flags
// that set them. Each refusal names the limit and its flag, and is counted
// in leasehold_limit_refusals_total{limit}. docs/operations.md lists them.
const (
	limitMessage     = "max-message-bytes"
	limitConnections = "max-connections"
	limitRate        = "max-request-rate"
	limitCallRate    = "max-call-rate"
	limitOwners      = "max-owners"
	limitRanges      = "max-ranges"
)

// Defaults of the listener's limits (Config).
const (
	DefaultMaxConnections    = 50000
	DefaultMaxStreamsPerConn = 10000
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultMaxCallRate       = 20
)

// newLimitRefusals counts the refusals of each limit.
func newLimitRefusals() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_limit_refusals_total",
		Help: "Requests, messages and connections refused for a limit, by the flag that sets it.",
	}, []string{"limit"})
	for _, l := range []string{limitMessage, limitConnections, limitRate, limitCallRate, limitOwners, limitRanges} {
		c.WithLabelValues(l)
	}
	return c
}

// limitRefused counts one refusal of limit.
func (s *Server) limitRefused(limit string) { s.metrics.limits.WithLabelValues(limit).Inc() }

// limitOptions are the listener's limits as gRPC server options: the codec
// that checks each message's size for its service before decoding it and
// turns a message that does not decode into InvalidArgument, the
// interceptors that report both, the unary calls per second on one
// connection (callRate), streams per connection, and the idle timeout.
// GRPCOptions includes them. callRate is gRPC's tap handle, of which a
// server has one: a server built with GRPCOptions cannot set its own.
func (s *Server) limitOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(limitCodecV2{limitCodec{s}, &s.updateEncodings}),
		grpc.ChainUnaryInterceptor(s.decodeUnary),
		grpc.ChainStreamInterceptor(s.decodeStream),
		grpc.MaxConcurrentStreams(uint32(s.cfg.MaxStreamsPerConn)),
		// A connection whose handshake does not finish in time is closed.
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.StatsHandler(limitStats{s}),
		grpc.InTapHandle(s.callRate),
	}
	if s.cfg.IdleTimeout > 0 {
		// gRPC keeps one set of keepalive parameters: these replace
		// KeepaliveServerOptions', so they start from them.
		kp := peers.KeepaliveServerParameters()
		kp.MaxConnectionIdle = s.cfg.IdleTimeout
		opts = append(opts, grpc.KeepaliveParams(kp))
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

// limitStats counts, under max-message-bytes, the messages gRPC refuses
// from their length prefix (larger than every service's limit): they never
// reach limitCodec, and for a unary call not even the interceptors. It
// also gives each connection its own budget of unary calls (callRate).
type limitStats struct{ s *Server }

func (limitStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// TagConn's context is the parent of the context of every call on the
// connection, the tap's included.
func (h limitStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &clientConn{calls: newLimiter(h.s.cfg.MaxCallRate), polls: newLimiter(0)})
}
func (limitStats) HandleConn(context.Context, stats.ConnStats) {}

func (h limitStats) HandleRPC(_ context.Context, st stats.RPCStats) {
	end, ok := st.(*stats.End)
	if !ok || end.Error == nil {
		return
	}
	if s, _ := status.FromError(end.Error); s.Code() == codes.ResourceExhausted && strings.HasPrefix(s.Message(), "grpc: received message larger than max") {
		h.s.limitRefused(limitMessage)
	}
}

// unaryMethods are the Manager's unary methods, which callRate limits.
// Streams are not counted: a follower opens one on its leader for each
// Owner it relays, all at once after a leader change, over one connection;
// each stream's messages have their own limit (MaxRequestRate).
var unaryMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, d := range []*grpc.ServiceDesc{&pb.Leases_ServiceDesc, &pb.Lookups_ServiceDesc, &pb.Admin_ServiceDesc, &pb.Raft_ServiceDesc} {
		for _, md := range d.Methods {
			m["/"+d.ServiceName+"/"+md.MethodName] = true
		}
	}
	return m
}()

// callRate refuses a unary call past MaxCallRate calls per second on its
// connection (bursts of twice that), with ResourceExhausted naming the
// limit. It runs when the call's headers arrive, before its request is
// read, let alone decoded: a caller past the limit costs the Manager no
// decoding and no memory. gRPC calls it from the connection's one reader
// goroutine, so the connection's limiter needs no lock.
func (s *Server) callRate(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !unaryMethods[info.FullMethodName] {
		return ctx, nil
	}
	c := connOf(ctx)
	if c == nil {
		return ctx, nil
	}
	if n := c.open.Load(); n > 0 && info.FullMethodName == pb.Lookups_Poll_FullMethodName {
		return ctx, s.pollRate(c, n)
	}
	if c.calls.allow() {
		return ctx, nil
	}
	s.limitRefused(limitCallRate)
	return ctx, status.Errorf(codes.ResourceExhausted, "leasehold: more than %g calls per second on one connection (MaxCallRate, leasehold manager --%s)",
		s.cfg.MaxCallRate, limitCallRate)
}

// pollRate refuses a Poll past twice MaxRequestRate for each Watch open on
// its connection (bursts of twice that), before its request is read. Each
// Watch's own limit is a Sync stream's, MaxRequestRate, and a Poll past it
// ends its Watch (Poll); this one, looser, bounds what a connection's
// Polls cost before the Watch they name is known, and ends none. Polls on
// a connection with Watches open are not calls: a connection shared by
// many Lookups polls far more than MaxCallRate allows. One with none open
// has nothing to poll, and its Polls count as calls (refused after the
// role check, NotFound).
func (s *Server) pollRate(c *clientConn, watches int64) error {
	n := 2 * float64(watches) * s.cfg.MaxRequestRate
	if 2*n > c.polls.burst {
		c.polls.tokens += 2*n - c.polls.burst // a new Watch brings its burst
	}
	c.polls.rate, c.polls.burst = n, 2*n
	if c.polls.allow() {
		return nil
	}
	s.limitRefused(limitRate)
	return status.Errorf(codes.ResourceExhausted, "leasehold: more than %g polls per second for each Watch on one connection (twice MaxRequestRate, leasehold manager --%s)",
		2*s.cfg.MaxRequestRate, limitRate)
}

// limitCodecV2 is limitCodec as gRPC's CodecV2, which lets a message be
// handed to gRPC in pieces: a Lookup's message whose update is shared with
// other streams (encodedSync) goes as its own fields and the shared
// update's bytes, encoded once for all (encode.go).
type limitCodecV2 struct {
	c limitCodec
	// encodings counts the Updates the codec has marshalled: once for a
	// shared Update, once per message for any other. The tests read it.
	encodings *atomic.Int64
}

func (limitCodecV2) Name() string { return "proto" }

func (c limitCodecV2) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedSync); ok {
		return e.marshal(c.encodings)
	}
	if m, ok := v.(*pb.SyncResponse); ok && m.Update != nil {
		c.encodings.Add(1)
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
func (c *Config) setLimitDefaults() error {
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxConnections", &c.MaxConnections, DefaultMaxConnections}, {"MaxStreamsPerConn", &c.MaxStreamsPerConn, DefaultMaxStreamsPerConn}} {
		if *f.v < 0 {
			return &leasehold.ConfigError{Package: "manager", Field: f.name, Err: fmt.Errorf("%d is negative", *f.v)}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.MaxMessageBytes < 0 {
		return &leasehold.ConfigError{Package: "manager", Field: "MaxMessageBytes", Err: fmt.Errorf("%d is negative", c.MaxMessageBytes)}
	}
	if c.MaxRequestRate < 0 {
		return &leasehold.ConfigError{Package: "manager", Field: "MaxRequestRate", Err: fmt.Errorf("%g is negative", c.MaxRequestRate)}
	}
	if c.MaxCallRate < 0 {
		return &leasehold.ConfigError{Package: "manager", Field: "MaxCallRate", Err: fmt.Errorf("%g is negative", c.MaxCallRate)}
	}
	if c.MaxCallRate == 0 {
		c.MaxCallRate = DefaultMaxCallRate
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return nil
}

// quietLog logs refusals at the boundary at most once a second for each
// kind, with the number not logged since: a stranger's flood of refused
// connections must not become a flood of log lines.
type quietLog struct {
	mu      sync.Mutex
	last    map[string]time.Time
	skipped map[string]int
}

// warn logs msg at warning level, unless one of the same kind was logged
// less than a second ago.
func (q *quietLog) warn(log *slog.Logger, kind, msg string, args ...any) {
	q.mu.Lock()
	if q.last == nil {
		q.last, q.skipped = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if now.Sub(q.last[kind]) < time.Second {
		q.skipped[kind]++
		q.mu.Unlock()
		return
	}
	skipped := q.skipped[kind]
	q.last[kind], q.skipped[kind] = now, 0
	q.mu.Unlock()
	if skipped > 0 {
		args = append(args, "more_not_logged", skipped)
	}
	log.Warn(msg, args...)
}
