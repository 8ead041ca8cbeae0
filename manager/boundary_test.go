package manager_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// Tests of the Manager's client boundary against strangers and callers
// outside their role: what a refused call leaves behind, and who holds a
// connection.

// tlsManager is a Manager serving mutual TLS on 127.0.0.1 with replica 1's
// certificate, and the CA that signs its callers' certificates.
type tlsManager struct {
	ca   *certs.CA
	srv  *manager.Server
	addr string
}

func startTLSManager(t testing.TB, cfg manager.Config) *tlsManager {
	t.Helper()
	dir := t.TempDir()
	m := &tlsManager{}
	var err error
	if m.ca, err = certs.CreateCA(dir, "", 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(dir, m.ca, certs.Identity{Role: certs.Replica, Name: "1"}, []string{"127.0.0.1"}, 0); err != nil {
		t.Fatal(err)
	}
	if cfg.Certs, err = certs.Open(dir, certs.Replica, "1"); err != nil {
		t.Fatal(err)
	}
	if cfg.Timing == (protocol.Timing{}) {
		cfg.Timing = protocol.Fast()
	}
	if m.srv, err = manager.NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return m
}

// cert issues a client certificate for id.
func (m *tlsManager) cert(t testing.TB, id certs.Identity) *tls.Certificate {
	t.Helper()
	c, k, err := m.ca.Issue(id, nil, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// rawCodec sends and receives messages as the bytes given: a client that
// sends what no encoder would.
type rawCodec struct{}

func (rawCodec) Name() string                  { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}

// undecodable is a message of type d that does not decode: size bytes in
// a field d does not have (kept as unknown while decoding), then bad UTF-8
// in d's first string field.
func undecodable(d protoreflect.MessageDescriptor, size int) []byte {
	b := protowire.AppendTag(nil, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, size))
	for i := range d.Fields().Len() {
		if f := d.Fields().Get(i); f.Kind() == protoreflect.StringKind {
			b = protowire.AppendTag(b, f.Number(), protowire.BytesType)
			return protowire.AppendBytes(b, []byte{0xff, 0xfe})
		}
	}
	panic("no string field in " + d.FullName())
}

// cutShort is a message of any type that does not decode: size bytes in
// a field no type here has, then a tag cut off in the middle of its
// varint. It fails for types with no string field (BackupRequest), where
// undecodable's bad UTF-8 would be kept as an unknown field.
func cutShort(size int) []byte {
	b := protowire.AppendTag(nil, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, size))
	return append(b, 0x80)
}

// rawUnary calls method on conn with body and returns its error.
func rawUnary(conn *grpc.ClientConn, method string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return conn.Invoke(ctx, method, &body, new([]byte), grpc.ForceCodec(rawCodec{}))
}

// rawTwice opens the server-streaming method on conn, sends first and
// second as its request (a client that does not keep to one message), and
// returns how the call ends.
func rawTwice(conn *grpc.ClientConn, method string, first, second []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	_ = st.SendMsg(&first)
	_ = st.SendMsg(&second)
	_ = st.CloseSend()
	for {
		var b []byte
		if err := st.RecvMsg(&b); err != nil {
			return err
		}
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestRefusedCallsKeepNothing: calls whose body does not decode — 3 MiB
// in an unknown field, then bad UTF-8 — leave nothing behind on the
// Manager's heap however they are refused: by the handshake (no
// certificate), by the role check, which runs before the decoding
// interceptor (an Owner calling Drain), by the decoding interceptor (an
// operator's Drain: InvalidArgument naming the field), or by gRPC itself
// (a second request message on Backup, which takes one). Each call's
// partly decoded message used to stay in a process-wide table.
//
// It runs alone, not side by side: the heap it reads is the process's, and
// the package's other tests beside it grew that by 39 MiB in one run.
func TestRefusedCallsKeepNothing(t *testing.T) {
	m := startTLSManager(t, manager.Config{Namespaces: []string{"default"}, DataDir: t.TempDir()})
	const calls, size = 20, 3 << 20
	drain := undecodable((&pb.DrainRequest{}).ProtoReflect().Descriptor(), size)
	backup := cutShort(size)
	stranger := dialAs(t, m.addr, nil)
	ownerConn := dialAs(t, m.addr, m.cert(t, certs.Identity{Role: certs.Owner, Name: "o", Namespaces: []string{"default"}}))
	operator := dialAs(t, m.addr, m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"}))
	// Warm up the connections and the server before the first reading.
	for _, c := range []*grpc.ClientConn{stranger, ownerConn, operator} {
		_, _ = pb.NewAdminClient(c).Status(context.Background(), &pb.StatusRequest{})
	}
	before := heapInUse()
	for range calls {
		if err := rawUnary(stranger, pb.Admin_Drain_FullMethodName, drain); err == nil {
			t.Fatal("a caller without a certificate drained")
		}
		refused(t, "an Owner's undecodable drain", rawUnary(ownerConn, pb.Admin_Drain_FullMethodName, drain), codes.PermissionDenied, "may not call")
		refused(t, "an operator's undecodable drain", rawUnary(operator, pb.Admin_Drain_FullMethodName, drain), codes.InvalidArgument, "namespace", "not valid UTF-8")
		if err := rawTwice(operator, pb.Admin_Backup_FullMethodName, nil, backup); err == nil {
			t.Fatal("a backup with a second, undecodable request was served")
		}
	}
	after := heapInUse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use: %.1f MiB before %d refused calls of %d MiB each, %.1f MiB after", mib(before), 4*calls, size>>20, mib(after))
	if grew > 16<<20 {
		t.Errorf("the heap in use grew by %.1f MiB over %d refused calls of %d MiB: their messages were kept", float64(grew)/(1<<20), 4*calls, size>>20)
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// The status a caller sees is the codec's, naming the limit, whether the
// message was too large or did not decode: checked over TLS too.
func TestUndecodableOverTLS(t *testing.T) {
	testwait.Side(t)
	m := startTLSManager(t, manager.Config{MaxMessageBytes: 64 << 10})
	op := dialAs(t, m.addr, m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"}))
	d := (&pb.DrainRequest{}).ProtoReflect().Descriptor()
	refused(t, "an oversized drain", rawUnary(op, pb.Admin_Drain_FullMethodName, undecodable(d, 128<<10)), codes.ResourceExhausted, "--max-message-bytes")
	// A sender's own verdict field is refused, not obeyed.
	forged := protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType)
	forged = protowire.AppendBytes(forged, append([]byte{byte(codes.OK)}, "fine"...))
	err := rawUnary(op, pb.Admin_Status_FullMethodName, forged)
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "reserved") {
		t.Errorf("a status request carrying the codec's verdict field: %v, want InvalidArgument saying it is reserved", err)
	}
}

// TestStrangersHoldNoSlots: with MaxConnections 5, twenty clients without
// a certificate, each retrying its call, hold no slot: each connection is
// closed at the handshake, and an operator's status is answered. Such
// connections used to complete the handshake and keep their slot until
// the idle timeout, locking every certificate holder out.
func TestStrangersHoldNoSlots(t *testing.T) {
	testwait.Side(t)
	m := startTLSManager(t, manager.Config{MaxConnections: 5})
	for range 20 {
		c := dialAs(t, m.addr, nil)
		_, _ = pb.NewAdminClient(c).Status(context.Background(), &pb.StatusRequest{})
		go func() {
			// Keep retrying: a stranger that does not give up.
			for range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, _ = pb.NewAdminClient(c).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
				cancel()
			}
		}()
	}
	op := dialAs(t, m.addr, m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"}))
	var err error
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = pb.NewAdminClient(op).Status(ctx, &pb.StatusRequest{})
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("with 20 strangers connected, an operator's status: %v", err)
}

// TestConnectionLimitOverTLS: past MaxConnections, a TLS client with a
// valid certificate is told, in its error, that the limit is reached and
// which flag sets it (not a TLS error), and the refusal is counted and
// logged.
func TestConnectionLimitOverTLS(t *testing.T) {
	testwait.Side(t)
	var log syncBuf
	m := startTLSManager(t, manager.Config{MaxConnections: 2, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	cert := m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"})
	for range 2 {
		if _, err := pb.NewAdminClient(dialAs(t, m.addr, cert)).Status(context.Background(), &pb.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	before := limitRefusals(t, m.srv, "max-connections")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := pb.NewAdminClient(dialAs(t, m.addr, cert)).Status(ctx, &pb.StatusRequest{})
	if err == nil || !strings.Contains(err.Error(), "--max-connections") {
		t.Fatalf("a third connection past --max-connections 2: %v, want an error naming the limit", err)
	}
	t.Logf("the client past the limit: %v", err)
	if n := limitRefusals(t, m.srv, "max-connections") - before; n < 1 {
		t.Errorf("the refusal was not counted in leasehold_limit_refusals_total{limit=max-connections}")
	}
	if !strings.Contains(log.String(), "refused a connection") || !strings.Contains(log.String(), "--max-connections") {
		t.Errorf("the refusal was not logged: %q", log.String())
	}
}

// TestCallRateLimit: past MaxCallRate unary calls per second on one
// connection (bursts of twice that), a call is refused with
// ResourceExhausted naming the limit and its flag, and counted; another
// connection has its own budget.
func TestCallRateLimit(t *testing.T) {
	testwait.Side(t)
	m := startTLSManager(t, manager.Config{MaxCallRate: 2})
	cert := m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"})
	conn := dialAs(t, m.addr, cert)
	var refusedErr error
	for range 20 {
		if _, err := pb.NewAdminClient(conn).Status(context.Background(), &pb.StatusRequest{}); err != nil {
			refusedErr = err
			break
		}
	}
	refused(t, "a status call past --max-call-rate", refusedErr, codes.ResourceExhausted, "--max-call-rate", "one connection")
	if n := limitRefusals(t, m.srv, "max-call-rate"); n < 1 {
		t.Errorf("leasehold_limit_refusals_total{limit=max-call-rate} is %v", n)
	}
	if _, err := pb.NewAdminClient(dialAs(t, m.addr, cert)).Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Errorf("another connection's first call: %v", err)
	}
	// An undecodable body past the limit is refused for the rate, unread.
	body := undecodable((&pb.DrainRequest{}).ProtoReflect().Descriptor(), 1<<20)
	refused(t, "an undecodable drain past the limit", rawUnary(conn, pb.Admin_Drain_FullMethodName, body), codes.ResourceExhausted, "--max-call-rate")
}

// syncBuf is a log sink safe for the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStalledHandshakesHoldNoSlots: with MaxConnections 3, ten
// connections that open TCP and never start their TLS handshake hold no
// slot (one is taken only once the handshake is done), and an operator's
// status is answered at once, not after the handshake timeout.
func TestStalledHandshakesHoldNoSlots(t *testing.T) {
	testwait.Side(t)
	m := startTLSManager(t, manager.Config{MaxConnections: 3})
	for range 10 {
		c, err := net.Dial("tcp", m.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	time.Sleep(100 * time.Millisecond) // let the Manager accept them
	op := dialAs(t, m.addr, m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"}))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := pb.NewAdminClient(op).Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("with 10 stalled handshakes and --max-connections 3, an operator's status: %v", err)
	}
}

// TestStrangerReadsWhy: a client without a certificate is told why in
// the TLS alert, every time, although under TLS 1.3 it writes on (gRPC's
// preface and its call) after its side of the handshake: the Manager
// reads and drops that before closing, so no reset overtakes the alert.
func TestStrangerReadsWhy(t *testing.T) {
	testwait.Side(t)
	m := startTLSManager(t, manager.Config{})
	for i := range 30 {
		c := dialAs(t, m.addr, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := pb.NewAdminClient(c).Status(ctx, &pb.StatusRequest{})
		cancel()
		c.Close()
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("stranger %d: %v, want the TLS alert naming the missing certificate", i, err)
		}
	}
}
