package kv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"

	"google.golang.org/grpc/test/bufconn"
)

// Net is an in-memory network for the tests that run under
// testing/synctest: every listener is a bufconn listener at an address of
// its own, 10.77.0.N:8000 (an IP address, which gRPC's resolver takes as
// it is), and a dial to an address nothing listens on is refused. Create
// it inside the bubble.
type Net struct {
	mu   sync.Mutex
	lis  map[string]*bufconn.Listener
	next int
}

// NewNet returns an empty network.
func NewNet() *Net { return &Net{lis: map[string]*bufconn.Listener{}} }

// Listen listens at a new address; addr, the address asked for, is
// ignored (tests ask for 127.0.0.1:0).
func (n *Net) Listen(string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	addr := fmt.Sprintf("10.77.%d.%d:8000", n.next/250, n.next%250+1)
	l := bufconn.Listen(1 << 20)
	n.lis[addr] = l
	return &memListener{Listener: l, addr: memAddr(addr), close: func() {
		n.mu.Lock()
		delete(n.lis, addr)
		n.mu.Unlock()
	}}, nil
}

// DialContext connects to the listener at addr.
func (n *Net) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.lis[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
	}
	return l.DialContext(ctx)
}

// HTTPClient returns an HTTP client that dials over n; close its idle
// connections before the bubble ends.
func (n *Net) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: n.DialContext}}
}

// Over returns cfg with its server listening and dialing over n.
func Over(cfg ServerConfig, n *Net) ServerConfig {
	cfg.net = n
	return cfg
}

// ClientOver returns cfg with its client dialing over n.
func ClientOver(cfg ClientConfig, n *Net) ClientConfig {
	cfg.net = n
	return cfg
}

type memListener struct {
	*bufconn.Listener
	addr  memAddr
	close func()
	once  sync.Once
}

func (l *memListener) Addr() net.Addr { return l.addr }

func (l *memListener) Close() error {
	l.once.Do(l.close)
	return l.Listener.Close()
}

type memAddr string

func (memAddr) Network() string  { return "tcp" }
func (a memAddr) String() string { return string(a) }
