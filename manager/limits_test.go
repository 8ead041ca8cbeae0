package manager_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// firstErr sends m on a new lease stream and returns the status it ends with.
func firstErr(t *testing.T, conn *grpc.ClientConn, m *pb.LeaseRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewLeasesClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(m)
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

// TestClientLimitsBeforeDecoding: a client message over MaxMessageBytes is
// refused for its size before it is decoded (one that would not decode
// either is still refused for its size, naming the limit and its flag),
// and one that does not decode — bad UTF-8 in a string — is InvalidArgument
// naming the field, on the streams and on the unary calls alike.
func TestClientLimitsBeforeDecoding(t *testing.T) {
	testwait.Side(t)
	c := startManager(t, manager.Config{Timing: protocol.Fast(), MaxMessageBytes: 4 << 10, Insecure: true})
	defer c.stop(t)
	conn, err := grpc.NewClient("passthrough:///bufnet", append(c.dial(), grpc.WithDefaultCallOptions(grpc.ForceCodec(badUTF8Codec{})))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bad := badPlaceholder
	big := &pb.LeaseRequest{Namespace: "default", Owner: bad, Addr: strings.Repeat("x", 8<<10), Incarnation: 1, Seq: 1}
	if s := status.Convert(firstErr(t, conn, big)); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "--max-message-bytes") {
		t.Errorf("an oversized lease request that would not decode: %v, want ResourceExhausted naming --max-message-bytes", s.Err())
	}
	// Larger than any service accepts (a Raft message part, 1 MiB): gRPC
	// refuses it from its length prefix, before reading its body.
	huge := &pb.LeaseRequest{Namespace: "default", Owner: "h", Addr: strings.Repeat("x", 2<<20), Incarnation: 1, Seq: 1}
	before := limitRefusals(t, c.srv, "max-message-bytes")
	if s := status.Convert(firstErr(t, conn, huge)); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "larger than max") {
		t.Errorf("a lease request larger than any limit: %v, want gRPC's ResourceExhausted", s.Err())
	}
	_, err = pb.NewAdminClient(conn).Status(context.Background(), &pb.StatusRequest{Namespace: strings.Repeat("n", 2<<20)})
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "larger than max") {
		t.Errorf("a status request larger than any limit: %v, want gRPC's ResourceExhausted", err)
	}
	// Refused unread, but counted: the stream's and the unary call's.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := limitRefusals(t, c.srv, "max-message-bytes") - before
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two messages gRPC refused unread were counted %v times in leasehold_limit_refusals_total, want 2", n)
		}
	}
	utf := &pb.LeaseRequest{Namespace: "default", Owner: bad, Addr: "a:1", Incarnation: 1, Seq: 1}
	if s := status.Convert(firstErr(t, conn, utf)); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "owner") {
		t.Errorf("a lease request with bad UTF-8 in owner: %v, want InvalidArgument naming the field", s.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pb.NewAdminClient(conn).Status(ctx, &pb.StatusRequest{Namespace: bad})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "namespace") {
		t.Errorf("a status request with bad UTF-8 in namespace: %v, want InvalidArgument naming the field", err)
	}
	sync, err := pb.NewLookupsClient(conn).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = sync.Send(&pb.SyncRequest{Namespace: strings.Repeat("n", 8<<10), Id: 1})
	if _, err := sync.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-message-bytes") {
		t.Errorf("an oversized sync request: %v, want ResourceExhausted naming --max-message-bytes", err)
	}
}

// badPlaceholder is a valid string that badUTF8Codec turns into bad UTF-8
// on the wire, which the proto encoder would refuse to send.
const badPlaceholder = "\x01BAD\x01"

type badUTF8Codec struct{}

func (badUTF8Codec) Name() string { return "proto" }

func (badUTF8Codec) Marshal(v any) ([]byte, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return bytes.ReplaceAll(b, []byte(badPlaceholder), []byte{0xff, 0xfe, 'B', 'A', 'D'}), err
}

func (badUTF8Codec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

// TestConnectionLimit: with MaxConnections open, the next connection is
// answered with a GOAWAY that names the limit and its flag, and closed;
// once one closes, a new one is served.
func TestConnectionLimit(t *testing.T) {
	testwait.Side(t)
	c := startManager(t, manager.Config{Timing: protocol.Fast(), MaxConnections: 2, Insecure: true})
	defer c.stop(t)
	var open []net.Conn
	for range 2 {
		nc := handshake(t, c)
		open = append(open, nc)
	}
	extra := handshake(t, c)
	defer extra.Close()
	if why := goAway(t, extra, 5*time.Second); !strings.Contains(why, "--max-connections") {
		t.Fatalf("a connection past the limit was told %q, want the limit named", why)
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		nc := handshake(t, c)
		_ = nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		why := readGoAway(nc)
		nc.Close()
		if why == "" {
			break // served: no GOAWAY
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection after one closed is still refused: %q", why)
		}
		time.Sleep(20 * time.Millisecond)
	}
	open[1].Close()
}

// TestIdleTimeoutAndStreamLimit: a connection with no stream open is
// closed after IdleTimeout, and the server advertises MaxStreamsPerConn.
func TestIdleTimeoutAndStreamLimit(t *testing.T) {
	testwait.Side(t)
	c := startManager(t, manager.Config{Timing: protocol.Fast(), IdleTimeout: 300 * time.Millisecond, MaxStreamsPerConn: 7, Insecure: true})
	defer c.stop(t)
	nc := handshake(t, c)
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	f := http2.NewFramer(io.Discard, nc)
	streams, sawGoAway := uint32(0), false
	start := time.Now()
	for !sawGoAway {
		fr, err := f.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (no GOAWAY after %v)", err, time.Since(start))
		}
		switch fr := fr.(type) {
		case *http2.SettingsFrame:
			if v, ok := fr.Value(http2.SettingMaxConcurrentStreams); ok {
				streams = v
			}
		case *http2.GoAwayFrame:
			sawGoAway = true
		}
	}
	if streams != 7 {
		t.Errorf("the server advertised %d concurrent streams, want 7", streams)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("an idle connection was closed after %v, want about 300ms", d)
	}
}

// handshake opens a raw HTTP/2 connection to c and sends the client
// preface and settings.
func handshake(t *testing.T, c interface {
	dial() []grpc.DialOption
}) net.Conn {
	t.Helper()
	nc, err := c.(*cluster).lis.Dial()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := http2.NewFramer(nc, nil).WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return nc
}

// goAway returns the debug data of the GOAWAY nc receives within d.
func goAway(t *testing.T, nc net.Conn, d time.Duration) string {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(d))
	why := readGoAway(nc)
	if why == "" {
		t.Fatal("no GOAWAY")
	}
	return why
}

// readGoAway reads frames until a GOAWAY (its debug data) or an error ("").
func readGoAway(nc net.Conn) string {
	f := http2.NewFramer(io.Discard, nc)
	for {
		fr, err := f.ReadFrame()
		if err != nil {
			return ""
		}
		if g, ok := fr.(*http2.GoAwayFrame); ok {
			return "goaway: " + string(g.DebugData())
		}
	}
}

// limitRefusals reads leasehold_limit_refusals_total{limit}.
func limitRefusals(t *testing.T, srv *manager.Server, limit string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_limit_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
