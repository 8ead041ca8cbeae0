package manager

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics are the per-method gRPC server series, leasehold_grpc_server_*
// (started, handled by code, messages received and sent, and the handling
// time; for a stream, its lifetime), with the names, labels and meaning of
// go-grpc-middleware's Prometheus provider, which they replace.
//
// They are counted cheaply, because they are counted for every message: a
// method's counters are looked up once, when its streams are registered
// (initialize), and a message is one atomic add, read at scrape. The
// provider looked up each counter by its label values — hashing them, under
// a lock — at every message, a few per cent of a busy Manager's CPU.
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec
	// methods by full name ("/service/method"); a map never changed once
	// stored (initialize stores a new one), read without a lock.
	methods atomic.Pointer[map[string]*methodMetrics]
}

// methodMetrics are one method's series.
type methodMetrics struct {
	typ, service, method string
	started, received    prometheus.Counter
	sent                 prometheus.Counter
	handling             prometheus.Observer
}

var _ prometheus.Collector = (*grpcMetrics)(nil)

func newGRPCMetrics() *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "leasehold", Name: name, Help: help}, labels)
	}
	m := &grpcMetrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels...),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(labels, "grpc_code")...),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels...),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels...),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "leasehold", Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: latencyBuckets}, labels),
	}
	m.methods.Store(&map[string]*methodMetrics{})
	return m
}

// initialize creates every series of every method registered on g, at
// zero, and resolves each method's counters.
func (m *grpcMetrics) initialize(g *grpc.Server) {
	methods := maps.Clone(*m.methods.Load())
	for service, info := range g.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := "unary"
			switch {
			case mi.IsClientStream && mi.IsServerStream:
				typ = "bidi_stream"
			case mi.IsClientStream:
				typ = "client_stream"
			case mi.IsServerStream:
				typ = "server_stream"
			}
			if full := "/" + service + "/" + mi.Name; methods[full] == nil {
				methods[full] = m.method(full, typ)
			}
		}
	}
	m.methods.Store(&methods)
}

// method creates the series of full method name full, at zero.
func (m *grpcMetrics) method(full, typ string) *methodMetrics {
	service, method := "unknown", "unknown"
	if s, meth, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/"); ok {
		service, method = s, meth
	}
	mm := &methodMetrics{typ: typ, service: service, method: method,
		started:  m.started.WithLabelValues(typ, service, method),
		received: m.received.WithLabelValues(typ, service, method),
		sent:     m.sent.WithLabelValues(typ, service, method),
		handling: m.handling.WithLabelValues(typ, service, method)}
	for _, c := range allCodes {
		m.handled.WithLabelValues(typ, service, method, c.String())
	}
	return mm
}

// allCodes are the gRPC status codes, each a handled series of every method.
var allCodes = []codes.Code{codes.OK, codes.Canceled, codes.Unknown, codes.InvalidArgument, codes.DeadlineExceeded,
	codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition,
	codes.Aborted, codes.OutOfRange, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unauthenticated}

// lookup returns the series of a call: its method's, or for a method not
// registered through initialize, series looked up by label for this call.
func (m *grpcMetrics) lookup(full, typ string) *methodMetrics {
	if mm := (*m.methods.Load())[full]; mm != nil {
		return mm
	}
	return m.method(full, typ)
}

// done counts a finished call, by the code of err (a context error as the
// gRPC server reports it), and its handling time.
func (m *grpcMetrics) done(mm *methodMetrics, start time.Time, err error) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	m.handled.WithLabelValues(mm.typ, mm.service, mm.method, st.Code().String()).Inc()
	mm.handling.Observe(time.Since(start).Seconds())
}

func (m *grpcMetrics) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		mm := m.lookup(info.FullMethod, "unary")
		mm.started.Inc()
		mm.received.Inc()
		resp, err := handler(ctx, req)
		if err == nil {
			mm.sent.Inc()
		}
		m.done(mm, start, err)
		return resp, err
	}
}

func (m *grpcMetrics) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		typ := "bidi_stream"
		switch {
		case info.IsClientStream && !info.IsServerStream:
			typ = "client_stream"
		case !info.IsClientStream && info.IsServerStream:
			typ = "server_stream"
		}
		mm := m.lookup(info.FullMethod, typ)
		mm.started.Inc()
		err := handler(srv, countedStream{ServerStream: ss, m: mm})
		m.done(mm, start, err)
		return err
	}
}

// countedStream counts a stream's messages, each one atomic add.
type countedStream struct {
	grpc.ServerStream
	m *methodMetrics
}

func (s countedStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	if err == nil {
		s.m.sent.Inc()
	}
	return err
}

func (s countedStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if err == nil {
		s.m.received.Inc()
	}
	return err
}

// Describe implements prometheus.Collector.
func (m *grpcMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.started.Describe(ch)
	m.handled.Describe(ch)
	m.received.Describe(ch)
	m.sent.Describe(ch)
	m.handling.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *grpcMetrics) Collect(ch chan<- prometheus.Metric) {
	m.started.Collect(ch)
	m.handled.Collect(ch)
	m.received.Collect(ch)
	m.sent.Collect(ch)
	m.handling.Collect(ch)
}
