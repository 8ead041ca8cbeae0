// Package runtime holds what the Owner and Lookup runtimes share: an
// in-order upcall queue, reconnection backoff and the gRPC dial defaults.
package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
func Dial(addr string, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	return grpc.NewClient(addr, opts...)
}

// Stream is a bidirectional gRPC client stream.
type Stream[S, R any] interface {
	Send(*S) error
	Recv() (*R, error)
	CloseSend() error
}

// Keep keeps a stream to the Manager open until ctx ends, reconnecting with
// backoff: it sends what arrives on sendq and hands each message it receives,
// decoded, to recv. A message that fails to decode is logged and dropped.
// Messages queued while the stream is down wait in sendq or are dropped by
// the sender, as on any lossy network.
func Keep[S, R, D any](ctx context.Context, log *slog.Logger, what string,
	open func(context.Context) (Stream[S, R], error), sendq <-chan *S,
	decode func(*R) (D, error), recv chan<- D) {
	b := Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		err := pump(ctx, log, open, sendq, decode, recv, &b)
		if ctx.Err() != nil {
			return
		}
		log.Warn(what+" stream to the manager ended; reconnecting", "err", err)
		if !Sleep(ctx, b.Next()) {
			return
		}
	}
}

func pump[S, R, D any](ctx context.Context, log *slog.Logger,
	open func(context.Context) (Stream[S, R], error), sendq <-chan *S,
	decode func(*R) (D, error), recv chan<- D, b *Backoff) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(ctx)
	if err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			d, err := decode(m)
			if err != nil {
				log.Warn("dropping a malformed message from the manager", "err", err)
				continue
			}
			select {
			case recv <- d:
			case <-ctx.Done():
				recvErr <- ctx.Err()
				return
			}
		}
	}()
	for {
		select {
		case m := <-sendq:
			if err := stream.Send(m); err != nil {
				cancel()
				<-recvErr
				return err
			}
			b.Reset() // the stream works
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			_ = stream.CloseSend()
			<-recvErr
			return ctx.Err()
		}
	}
}

// Common holds the configuration every client runtime shares, with the
// defaults applied by Normalize.
type Common struct {
	Manager   *string
	Namespace *string
	Timing    *protocol.Timing
	Logger    **slog.Logger
}

// Normalize fills in defaults ("default" namespace, production timings, a
// discarding logger) and reports a configuration the Manager would refuse,
// naming the package (owner, lookup) in the error.
func (c Common) Normalize(pkg string) error {
	if *c.Namespace == "" {
		*c.Namespace = "default"
	}
	if *c.Timing == (protocol.Timing{}) {
		*c.Timing = protocol.Production()
	}
	if *c.Logger == nil {
		*c.Logger = slog.New(slog.DiscardHandler)
	}
	if *c.Manager == "" {
		return fmt.Errorf("%s: Config.Manager (the Manager's address) is required", pkg)
	}
	if err := CheckName(pkg, "Namespace", *c.Namespace); err != nil {
		return err
	}
	return c.Timing.Validate()
}

// CheckName reports a name the wire protocol would refuse.
func CheckName(pkg, field, s string) error {
	if len(s) > wire.MaxStringLen || !utf8.ValidString(s) {
		return fmt.Errorf("%s: Config.%s must be valid UTF-8 of at most %d bytes", pkg, field, wire.MaxStringLen)
	}
	return nil
}
