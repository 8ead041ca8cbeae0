package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
)

// Stream is a bidirectional gRPC client stream.
type Stream[S, R any] interface {
	Send(*S) error
	Recv() (*R, error)
	CloseSend() error
	// Trailer is read once Recv has failed, for a NotLeader hint.
	Trailer() metadata.MD
}

// Keep keeps a stream to the Manager open until ctx ends, connected to one
// replica of m at a time: it sends what arrives on sendq and hands each
// message it receives, decoded, to recv. A message that fails to decode is
// logged and dropped. Messages queued while the stream is down wait in sendq
// or are dropped by the sender, as on any lossy network.
//
// It starts with the first address. When a stream ends, Keep reconnects to
// the leader that the replica named in a NotLeader refusal, at once, even
// if that address is not in the list (the group grew); otherwise it tries
// the next address in the list, at once, and waits the jittered, capped
// backoff only after every address has failed since the last working stream
// or the last wait. Following hints is bounded too: after a few hops in a
// row without a working stream, Keep waits before the next one, so replicas
// that name each other never make it spin. A stream works once a message
// arrives on it. A replica that accepts no connection within connectWait
// counts as failed, so a host that is down holds the stream up for a
// second, not for TCP's timeout.
//
// The last message sent on a stream that ended before anything arrived on
// it (a refusal) is sent again first on the next stream, unless newer ones
// wait in sendq: a client that starts with a follower's address is answered
// by the leader at once, not at its next renewal or poll. Both protocols
// take a repeated message in their stride, as they take a duplicate.
func Keep[S, R, D any](ctx context.Context, log *slog.Logger, what string, m *Managers,
	open func(context.Context, grpc.ClientConnInterface) (Stream[S, R], error), sendq <-chan *S,
	decode func(*R) (D, error), recv chan<- D) {
	k := &keeper[S, R, D]{log: log, what: what, m: m, open: open, sendq: sendq, decode: decode, recv: recv,
		f: newFollower(m.addrs)}
	if m.maxWait > 0 && m.maxWait < k.f.b.Max {
		k.f.b.Max = max(m.maxWait, k.f.b.Min)
	}
	k.run(ctx)
}

// keeper is Keep's state.
type keeper[S, R, D any] struct {
	log    *slog.Logger
	what   string
	m      *Managers
	open   func(context.Context, grpc.ClientConnInterface) (Stream[S, R], error)
	sendq  <-chan *S
	decode func(*R) (D, error)
	recv   chan<- D
	f      *follower

	// Written by the receiving goroutine while run waits for the stream.
	worked    bool   // the stream to f.cur carried a message
	lastWork  string // the address of the last stream that worked
	announced string // the last leader logged as followed
	quiet     bool   // a failure was logged at Warn since the last working stream
}

func (k *keeper[S, R, D]) run(ctx context.Context) {
	var unanswered *S
	for ctx.Err() == nil {
		addr := k.f.cur
		k.worked = false
		trailer, sent, err := k.stream(ctx, addr, unanswered)
		k.m.setCurrent("")
		if ctx.Err() != nil {
			return
		}
		if k.worked {
			unanswered = nil
		} else if sent != nil {
			unanswered = sent
		}
		hint := LeaderHint(err, trailer)
		if hint != "" && CheckAddr(hint) != nil {
			k.log.Debug("ignoring a malformed leader address", "stream", k.what, "manager", addr, "leader", hint)
			hint = ""
		}
		next, wait, followed := k.f.ended(k.worked, hint)
		switch {
		case followed:
			if next != k.announced {
				k.log.Info("following leader at "+next, "stream", k.what, "refused_by", addr)
				k.announced = next
			}
		case IsNotLeader(err):
			k.log.Debug(k.what+" stream refused: the manager knows no leader", "manager", addr, "next", next)
		case !k.quiet:
			k.log.Warn(k.what+" stream to the manager ended; reconnecting", "manager", addr, "next", next, "err", err)
			k.quiet = true
		default:
			k.log.Debug(k.what+" stream to the manager ended; reconnecting", "manager", addr, "next", next, "err", err)
		}
		if wait > 0 && !k.m.pause(ctx, wait) {
			return
		}
	}
}

// working is called once the stream to addr carried its first message.
func (k *keeper[S, R, D]) working(addr string) {
	k.worked = true
	k.m.setCurrent(addr)
	if addr != k.lastWork && addr != k.announced && (k.lastWork != "" || len(k.m.addrs) > 1) {
		k.log.Info("connected to the manager at "+addr, "stream", k.what)
	}
	k.lastWork, k.quiet = addr, false
}

// stream runs one stream to addr until it ends, sending resend first if
// set and nothing newer waits. It returns the stream's trailer, when the
// server ended it, the last message sent on it, and why it ended.
func (k *keeper[S, R, D]) stream(ctx context.Context, addr string, resend *S) (metadata.MD, *S, error) {
	cc, err := k.m.Conn(addr)
	if err == nil && cc.GetState() == connectivity.TransientFailure {
		// gRPC would try again only at the end of its backoff (up to two
		// minutes); the replica may be back, or just elected.
		cc, err = k.m.redial(addr, cc)
	}
	if err != nil {
		return nil, nil, err
	}
	if !connect(ctx, cc, connectWait) {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("no connection to %s within %s", addr, connectWait)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := k.open(ctx, cc)
	if err != nil {
		return nil, nil, err
	}
	type ended struct {
		err     error
		trailer metadata.MD
	}
	recvErr := make(chan ended, 1)
	go func() {
		first := true
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- ended{err, stream.Trailer()}
				return
			}
			if first {
				first = false
				k.working(addr)
			}
			d, err := k.decode(msg)
			if err != nil {
				k.log.Warn("dropping a malformed message from the manager", "manager", addr, "err", err)
				continue
			}
			select {
			case k.recv <- d:
			case <-ctx.Done():
				recvErr <- ended{err: ctx.Err()}
				return
			}
		}
	}()
	var sent *S
	// send sends msg; if the stream fails, it returns how it ended.
	send := func(msg *S) *ended {
		sent = msg
		if err := stream.Send(msg); err != nil {
			if err != io.EOF {
				cancel() // the client failed the stream: Recv says no more
				<-recvErr
				return &ended{err: err}
			}
			// The server ended the stream: Recv has its status.
			e := <-recvErr
			return &e
		}
		return nil
	}
	if resend != nil && len(k.sendq) == 0 {
		if e := send(resend); e != nil {
			return e.trailer, sent, e.err
		}
	}
	for {
		select {
		case msg := <-k.sendq:
			if e := send(msg); e != nil {
				return e.trailer, sent, e.err
			}
		case e := <-recvErr:
			return e.trailer, sent, e.err
		case <-ctx.Done():
			_ = stream.CloseSend()
			<-recvErr
			return nil, sent, ctx.Err()
		}
	}
}

// connectWait bounds how long Keep waits for a connection to a replica: one
// that accepts no connection (its host is down) must not hold the stream up
// while others may serve.
const connectWait = time.Second

// connect starts connecting cc if it is idle, and waits until it is ready or
// has failed (a stream opened on it then fails at once, with the cause), or
// until ctx ends or d passes. It reports whether it is ready or has failed.
func connect(ctx context.Context, cc *grpc.ClientConn, d time.Duration) bool {
	s := cc.GetState()
	if s != connectivity.Idle && s != connectivity.Connecting {
		return true
	}
	cc.Connect()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for s == connectivity.Idle || s == connectivity.Connecting {
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
		s = cc.GetState()
	}
	return true
}

// follower decides, each time a stream ends, which replica Keep tries next
// and how long it waits first. It is a plain state machine, without clock or
// network, so its rules are tested alone.
type follower struct {
	addrs    []string
	idx      int    // the list address tried last
	cur      string // the address tried last: a list address or a hinted one
	failures int    // attempts failed since the last working stream or wait
	hops     int    // hints followed at once since then
	b        Backoff
}

func newFollower(addrs []string) *follower {
	return &follower{addrs: addrs, cur: addrs[0], b: Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}}
}

// maxHops bounds the hints followed in a row without a working stream or a
// wait: enough to cross a group that changed leaders while it was asked.
func (f *follower) maxHops() int { return len(f.addrs) + 1 }

// ended records that the stream to f.cur ended, having worked or not, with
// the leader its refusal named ("" for none), and returns the address to try
// next, the wait before trying it, and whether that follows the hint.
func (f *follower) ended(worked bool, hint string) (next string, wait time.Duration, followed bool) {
	if worked {
		f.failures, f.hops = 0, 0
		f.b.Reset()
	}
	f.failures++
	if hint != "" && hint != f.cur {
		f.cur = hint
		if i := slices.Index(f.addrs, hint); i >= 0 {
			f.idx = i
		}
		if f.hops < f.maxHops() {
			f.hops++
			return hint, 0, true
		}
		return hint, f.wait(), true
	}
	f.idx = (f.idx + 1) % len(f.addrs)
	f.cur = f.addrs[f.idx]
	if f.failures >= len(f.addrs) {
		return f.cur, f.wait(), false // a full round failed
	}
	return f.cur, 0, false
}

// wait starts a new round after the backoff it returns.
func (f *follower) wait() time.Duration {
	f.failures, f.hops = 0, 0
	return f.b.Next()
}
