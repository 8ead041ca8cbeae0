package kv

import (
	"context"
	"net"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// network is where a Server listens and a Server or Client dials, in
// plaintext; nil, as every caller outside this package leaves it, is the
// host's TCP. The package's tests set an in-memory one (export_test.go) to
// run a Manager, servers and clients under testing/synctest, where the
// leases' waits pass in virtual time.
type network interface {
	Listen(addr string) (net.Listener, error)
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

func listenOn(n network, addr string) (net.Listener, error) {
	if n == nil {
		return net.Listen("tcp", addr)
	}
	return n.Listen(addr)
}

// dialOptions are the Manager connection's gRPC dial options over n: nil,
// the defaults, for the host's network.
func dialOptions(n network) []grpc.DialOption {
	if n == nil {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return n.DialContext(ctx, "tcp", addr) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
}

// dialOver makes t dial over n, if set.
func dialOver(t *http.Transport, n network) *http.Transport {
	if n != nil {
		t.DialContext = n.DialContext
	}
	return t
}
