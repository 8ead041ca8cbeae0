package manager_test

import (
	"context"
	"crypto/tls"
	"flag"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

var boundaryCalls = flag.Int("boundary.calls", 0, "TestStrangerHeap: the calls of each attack (0 skips it; docs/security.md reports 10000)")

// TestStrangerHeap measures the Manager's heap in use (after a collection)
// before and after each of four attacks of -boundary.calls calls, each
// call's body 3 MiB in an unknown field followed by bad UTF-8, against a
// Manager serving TLS with its default limits:
//
//   - anonymous: no certificate, a new connection for each call;
//   - wrong role: an Owner's certificate calling Drain;
//   - undecodable: an operator's certificate calling Drain;
//   - second message: an operator's Backup with a second, undecodable request.
//
// The callers with a certificate open a new connection every 40 calls,
// within --max-call-rate's burst, so that every call is read and decoded
// (one connection would be refused unread past its budget). Run it with
//
//	go test ./manager -count=1 -timeout 60m -run TestStrangerHeap -v -boundary.calls=10000
func TestStrangerHeap(t *testing.T) {
	n := *boundaryCalls
	if n == 0 {
		t.Skip("set -boundary.calls to run")
	}
	m := startTLSManager(t, manager.Config{Namespaces: []string{"default"}, DataDir: t.TempDir()})
	const size = 3 << 20
	body := undecodable((&pb.DrainRequest{}).ProtoReflect().Descriptor(), size)
	ownerCert := m.cert(t, certs.Identity{Role: certs.Owner, Name: "o", Namespaces: []string{"default"}})
	opCert := m.cert(t, certs.Identity{Role: certs.Operator, Name: "alice"})
	// rotating dials a new connection every 40 calls.
	rotating := func(cert *tls.Certificate, call func(*grpc.ClientConn) error) func(i int) error {
		var conn *grpc.ClientConn
		t.Cleanup(func() {
			if conn != nil {
				conn.Close()
			}
		})
		return func(i int) error {
			if i%40 == 0 {
				if conn != nil {
					conn.Close()
				}
				conn = dialOnce(t, m.addr, cert)
			}
			return call(conn)
		}
	}
	attacks := []struct {
		name string
		call func(i int) error
	}{
		{"anonymous", func(int) error {
			conn := dialOnce(t, m.addr, nil)
			defer conn.Close()
			return rawUnary(conn, pb.Admin_Drain_FullMethodName, body)
		}},
		{"wrong role", rotating(ownerCert, func(c *grpc.ClientConn) error { return rawUnary(c, pb.Admin_Drain_FullMethodName, body) })},
		{"undecodable", rotating(opCert, func(c *grpc.ClientConn) error { return rawUnary(c, pb.Admin_Drain_FullMethodName, body) })},
		{"second message", rotating(opCert, func(c *grpc.ClientConn) error {
			return rawTwice(c, pb.Admin_Backup_FullMethodName, nil, cutShort(size))
		})},
	}
	start := heapInUse()
	t.Logf("heap in use at the start: %.1f MiB", mib(start))
	for _, a := range attacks {
		before := heapInUse()
		began := time.Now()
		for i := range n {
			if err := a.call(i); err == nil {
				t.Fatalf("%s: call %d was served", a.name, i)
			}
		}
		after := heapInUse()
		t.Logf("%-15s %d calls of %d MiB in %v: heap in use %.1f MiB before, %.1f MiB after (%+.1f MiB)",
			a.name, n, size>>20, time.Since(began).Round(time.Second), mib(before), mib(after), mib(after)-mib(before))
		if after > before+8<<20 {
			t.Errorf("%s: the heap in use grew by %.1f MiB", a.name, mib(after)-mib(before))
		}
	}
	_, _ = pb.NewAdminClient(dialAs(t, m.addr, opCert)).Status(context.Background(), &pb.StatusRequest{})
	end := heapInUse()
	t.Logf("heap in use at the end: %.1f MiB (%+.1f MiB since the start)", mib(end), mib(end)-mib(start))
}

// dialOnce is dialAs for a connection the caller closes: no cleanup is
// kept for it, so that ten thousand of them leave nothing on the heap.
func dialOnce(t *testing.T, addr string, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}
