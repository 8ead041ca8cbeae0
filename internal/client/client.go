// Package client is the client side of the leasehold protocol: what the
// Owner and Lookup libraries (owner.New, lookup.New) share to reach a
// Manager. It holds the in-order upcall queue (Upcalls), the list of Manager
// replicas and the stream that follows their leader (Managers, Keep),
// reconnection backoff, the gRPC dial and keepalive defaults, the trust
// settings (Trust) and the configuration check of the shared connection
// settings (Normalize).
//
// What only a Manager replica uses lives with the Manager: the server's
// keepalive and window options in internal/peers (derived from KeepaliveTime
// and StreamWindow here, so each is defined once), the relayed-stream
// marker in manager. One server-side function stays: NotLeader, the
// refusal. Its message and trailer are the convention LeaderHint and
// IsNotLeader parse, so writer and reader are kept in one file
// (managers.go) where they cannot drift apart; and the fake Manager of the
// clients' tests (clienttest) refuses with it too, which it could not do
// from manager without building a Manager into every client's tests.
package client

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/protocol"
)

// Upcalls delivers values to a callback on one goroutine, in order, never
// concurrently, without ever blocking the sender: the queue grows instead.
type Upcalls[T any] struct {
	mu     sync.Mutex
	queue  []T
	signal chan struct{}
	done   chan struct{}
}

// NewUpcalls starts the delivery goroutine; fn may be nil (values dropped).
func NewUpcalls[T any](fn func(T)) *Upcalls[T] {
	u := &Upcalls[T]{signal: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(u.done)
		for range u.signal {
			for {
				u.mu.Lock()
				if len(u.queue) == 0 {
					u.mu.Unlock()
					break
				}
				v := u.queue[0]
				u.queue = u.queue[1:]
				u.mu.Unlock()
				if fn != nil {
					fn(v)
				}
			}
		}
	}()
	return u
}

// Push queues v for delivery.
func (u *Upcalls[T]) Push(v T) {
	u.mu.Lock()
	u.queue = append(u.queue, v)
	u.mu.Unlock()
	select {
	case u.signal <- struct{}{}:
	default:
	}
}

// Close delivers what is queued and stops the goroutine. Push must not be
// called after Close.
func (u *Upcalls[T]) Close() {
	close(u.signal)
	<-u.done
}

// Backoff is a jittered exponential backoff between Min and Max.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(2*b.cur, b.Max)
	}
	return b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
}

// Reset starts over from Min.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Dial connects to a Manager address lazily (the connection is made on
// first use and remade as needed). Without options it uses plaintext.
// Every connection pings its server when it has heard nothing for
// KeepaliveTime and is closed when a ping goes unanswered for
// KeepaliveTimeout (options in opts may override that).
func Dial(addr string, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts = append([]grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true,
	})}, opts...)
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)),
		grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow))
	return grpc.NewClient(addr, opts...)
}

// StreamWindow and ConnWindow are the HTTP/2 flow-control windows of every
// Manager connection, client and server side (the server's options are
// peers.WindowServerOptions). Setting them turns off
// gRPC's bandwidth-delay estimation, which otherwise answers nearly every
// message received with an HTTP/2 ping and its acknowledgement (17 bytes
// each way, and a write of its own) — for a renewal or a sync as many
// frames again as the message itself. The windows are large enough that
// no Owner or Lookup message (at most MaxMessageBytes, 4 MiB by default)
// waits for one, and a Raft snapshot between replicas crosses in 64 MiB /
// ConnWindow round trips.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 16 << 20
)

// Keepalive: a connection that has heard nothing from its server for
// KeepaliveTime sends an HTTP/2 ping, and is closed, failing its streams,
// when no answer comes within KeepaliveTimeout. A process that is stopped
// or stuck, or a proxy that stopped forwarding, leaves the TCP connection
// open and would otherwise hold a stream forever; the kernel answers TCP,
// only the process answers a ping. KeepaliveTime is gRPC's smallest (it
// raises anything shorter), so for streams whose clients expect answers
// sooner the answer deadline (Managers.Liveness) acts first; keepalive
// covers the connections without one: Raft's peer streams, which carry
// messages one way, and idle connections. The server's half, which must
// permit these pings, is peers.KeepaliveServerOptions.
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// Normalize fills in the defaults of c ("default" namespace, production
// timings, a discarding logger), merges its Manager addresses and reports a
// setting the Manager would refuse, as a *leasehold.ConfigError naming the
// package (owner, lookup) and the field, or the *protocol.TimingError of
// its Timing. On success c.Manager is the merged list, comma-separated,
// and c.Managers the same list.
func Normalize(pkg string, c *leasehold.Connection) error {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Timing == (protocol.Timing{}) {
		c.Timing = protocol.Production()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	addrs, err := managerList(pkg, c.Manager, c.Managers)
	if err != nil {
		return err
	}
	c.Manager, c.Managers = strings.Join(addrs, ","), addrs
	if err := CheckName(pkg, "Namespace", c.Namespace); err != nil {
		return err
	}
	return c.Timing.Validate()
}

// managerList merges Config.Manager (a comma-separated list) and
// Config.Managers (one address per entry), naming the bad field and entry
// in a *leasehold.ConfigError.
func managerList(pkg, list string, more []string) ([]string, error) {
	addrs, err := SplitManagers(list)
	if err != nil {
		return nil, &leasehold.ConfigError{Package: pkg, Field: "Manager", Err: err}
	}
	for i, a := range more {
		a = strings.TrimSpace(a)
		if err := CheckAddr(a); err != nil {
			return nil, &leasehold.ConfigError{Package: pkg, Field: fmt.Sprintf("Managers[%d]", i), Err: err}
		}
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, &leasehold.ConfigError{Package: pkg, Field: "Manager", Why: "(the Manager's address, or a comma-separated list of its replicas' addresses) is required"}
	}
	return addrs, nil
}

// CheckName reports a name the wire protocol would refuse.
func CheckName(pkg, field, s string) error {
	if len(s) > wire.MaxStringLen || !utf8.ValidString(s) {
		return &leasehold.ConfigError{Package: pkg, Field: field, Why: fmt.Sprintf("must be valid UTF-8 of at most %d bytes", wire.MaxStringLen)}
	}
	return nil
}
