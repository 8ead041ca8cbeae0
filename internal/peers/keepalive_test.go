package peers

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold/internal/client"
)

// stallConn is a connection that can be made to stall, as one to a stopped
// process does: open, taking writes, delivering nothing either way.
type stallConn struct {
	net.Conn
	s      *staller
	once   sync.Once
	closed chan struct{}
}

// Close ends what waits on the connection, as closing a socket does.
func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

type staller struct {
	mu      sync.Mutex
	stalled bool
	closed  chan struct{}
}

func (s *staller) wait(c *stallConn) {
	s.mu.Lock()
	stalled := s.stalled
	s.mu.Unlock()
	if stalled {
		select {
		case <-s.closed:
		case <-c.closed:
		}
	}
}

func (c *stallConn) Read(b []byte) (int, error) {
	c.s.wait(c)
	n, err := c.Conn.Read(b)
	c.s.wait(c)
	return n, err
}

// Write takes what is written while stalled and delivers none of it, as a
// socket buffer does for a peer that stopped reading.
func (c *stallConn) Write(b []byte) (int, error) {
	c.s.mu.Lock()
	stalled := c.s.stalled
	c.s.mu.Unlock()
	if stalled {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// TestKeepaliveNoticesAStalledPeer: the stream to a peer that stops
// answering while its connection stays open breaks within KeepaliveTime and
// KeepaliveTimeout (virtual time), and the peer is reported unreachable,
// which slows Raft down to probing it. With keepalive pushed out of reach
// (a ping only after an hour) nothing notices: the stream only ever writes,
// so no answer is missed.
func TestKeepaliveNoticesAStalledPeer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []grpc.DialOption
		noticed bool
	}{
		{"keepalive", nil, true},
		{"no keepalive", []grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Hour})}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lis := bufconn.Listen(1 << 20)
				b := New(Config{Self: 2})
				srv := grpc.NewServer(KeepaliveServerOptions()...)
				b.Register(srv)
				go srv.Serve(lis)
				defer srv.Stop()
				defer b.Close()

				st := &staller{closed: make(chan struct{})}
				unreachable := make(chan uint64, 16)
				a := New(Config{Self: 1,
					DialOptions: append([]grpc.DialOption{
						grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
							c, err := lis.DialContext(ctx)
							return &stallConn{Conn: c, s: st, closed: make(chan struct{})}, err
						}),
						grpc.WithTransportCredentials(insecure.NewCredentials()),
					}, tc.opts...),
					OnUnreachable: func(id uint64) {
						select {
						case unreachable <- id:
						default:
						}
					},
				})
				defer func() { close(st.closed); a.Close() }()
				a.SetPeer(2, "passthrough:///b")
				a.Send([]raftpb.Message{hb(1, 2, 1)})
				for a.Stats().Peers[2].Sent == 0 {
					time.Sleep(10 * time.Millisecond)
				}
				st.mu.Lock()
				st.stalled = true
				st.mu.Unlock()
				stalledAt := time.Now()
				bound := client.KeepaliveTime + client.KeepaliveTimeout + time.Second
				for time.Since(stalledAt) < bound && len(unreachable) == 0 {
					a.Send([]raftpb.Message{hb(1, 2, 2)}) // heartbeats go on, into the stalled connection
					time.Sleep(100 * time.Millisecond)
				}
				if noticed := len(unreachable) > 0; noticed != tc.noticed {
					t.Fatalf("peer reported unreachable within %s of the stall: %v, want %v", bound, noticed, tc.noticed)
				}
				if tc.noticed {
					t.Logf("reported unreachable %s after the stall", time.Since(stalledAt))
				}
			})
		})
	}
}
