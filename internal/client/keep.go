package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
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
	addrs := m.addrs
	if m.spread {
		addrs = Rank(m.spreadKey, addrs)
	}
	k := &keeper[S, R, D]{log: log, what: what, m: m, open: open, sendq: sendq, decode: decode, recv: recv,
		f: newFollower(addrs)}
	k.f.spread = m.spread
	k.f.relays = m.relay
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
		addr, relay := k.f.cur, k.f.relay
		k.worked = false
		trailer, sent, err := k.stream(ctx, addr, relay, unanswered)
		k.m.setCurrent("")
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRelayDone) {
			next := k.f.unrelay()
			k.log.Info("trying the leader at "+next+" directly again, after relaying through "+addr, "stream", k.what)
			unanswered = nil
			continue
		}
		silent := errors.Is(err, errNoAnswer)
		switch {
		case silent && sent != nil:
			unanswered = sent // never answered: the next replica gets it at once
		case k.worked:
			unanswered = nil
		case sent != nil:
			unanswered = sent
		}
		hint := LeaderHint(err, trailer)
		if hint != "" && CheckAddr(hint) != nil {
			k.log.Debug("ignoring a malformed leader address", "stream", k.what, "manager", addr, "leader", hint)
			hint = ""
		}
		next, wait, followed := k.f.ended(k.worked, IsNotLeader(err), hint)
		if !k.worked && !IsNotLeader(err) {
			k.m.setFailed(addr, err)
		}
		switch {
		case Refused(err):
			// Retrying cannot lift it: say so every time, and not often.
			wait = max(wait, refusedWait)
			k.log.Error(k.what+" stream refused by the manager; retrying in "+wait.Round(time.Millisecond).String(),
				"manager", addr, "err", Describe(err))
		case k.f.relay:
			k.log.Info("the leader at "+hint+" does not answer; asking "+next+" to relay", "stream", k.what)
		case followed:
			if next != k.announced {
				k.log.Info("following leader at "+next, "stream", k.what, "refused_by", addr)
				k.announced = next
			}
		case IsNotLeader(err):
			k.log.Debug(k.what+" stream refused: the manager knows no leader", "manager", addr, "next", next)
		case !k.quiet:
			k.log.Warn(k.what+" stream to the manager ended; reconnecting", "manager", addr, "relayed", relay, "next", next, "err", err)
			k.quiet = true
		default:
			k.log.Debug(k.what+" stream to the manager ended; reconnecting", "manager", addr, "relayed", relay, "next", next, "err", err)
		}
		if wait > 0 && !k.m.pause(ctx, wait) {
			return
		}
	}
}

// errNoAnswer ends a stream on which a message went unanswered for the
// answer deadline (Managers.Liveness).
var errNoAnswer = errors.New("no answer")

// errRelayDone ends a relayed stream that has run relayAge answer waits,
// just after an answer, so the client tries the leader directly again: a
// relay is a detour for as long as the leader is out of reach, not a
// route for good.
var errRelayDone = errors.New("relayed long enough")

// relayAge is how many answer waits a relayed stream runs (8 renewals of
// an Owner: 4 s with fast timings, 2 minutes in production). Trying the
// leader again costs at most one answer wait when it is still out of
// reach, which the liveness bound allows after any answered renewal.
const relayAge = 16

// working is called once the stream to addr carried its first message.
func (k *keeper[S, R, D]) working(addr string) {
	k.worked = true
	k.m.setCurrent(addr)
	k.m.setFailed("", nil)
	if addr != k.lastWork && addr != k.announced && (k.lastWork != "" || len(k.m.addrs) > 1) {
		k.log.Info("connected to the manager at "+addr, "stream", k.what)
	}
	k.lastWork, k.quiet = addr, false
}

// stream runs one stream to addr until it ends, sending resend first if
// set and nothing newer waits; relay asks addr to relay the stream to its
// leader. It returns the stream's trailer, when the server ended it, the
// last message sent on it, and why it ended: errNoAnswer (wrapped) when a
// message went unanswered for the answer deadline.
func (k *keeper[S, R, D]) stream(ctx context.Context, addr string, relay bool, resend *S) (metadata.MD, *S, error) {
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
	octx := ctx
	if relay {
		octx = metadata.AppendToOutgoingContext(ctx, RelayKey, "1")
	}
	stream, err := k.open(octx, cc)
	if err != nil {
		return nil, nil, err
	}
	type ended struct {
		err     error
		trailer metadata.MD
	}
	recvErr := make(chan ended, 1)
	var heardN atomic.Uint64        // messages received on the stream
	heard := make(chan struct{}, 1) // a message was received
	go func() {
		first := true
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- ended{err, stream.Trailer()}
				return
			}
			heardN.Add(1)
			select {
			case heard <- struct{}{}:
			default:
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
	// The answer deadline: waiting is when the oldest message sent since
	// the last one heard (mark: the count heard then) went out.
	var (
		waiting time.Time
		wait    time.Duration
		mark    uint64
	)
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	defer deadline.Stop()
	// A relayed stream ends, once relayAge answer waits have passed, at the
	// first moment nothing it carried is unanswered.
	var expire <-chan time.Time
	expired := false
	if relay && k.m.answerWait != nil {
		if w := k.m.answerWait(); w > 0 {
			t := time.NewTimer(relayAge * w)
			defer t.Stop()
			expire = t.C
		}
	}
	done := func() (metadata.MD, *S, error) {
		cancel()
		<-recvErr
		return nil, nil, errRelayDone
	}
	var sent *S
	// send sends msg; if the stream fails, it returns how it ended.
	send := func(msg *S) *ended {
		sent = msg
		// A message heard once the send has begun may answer it: a Send
		// that returns only once the replica has taken the request (a
		// Poll) often returns after its answer has arrived.
		at, before := time.Now(), heardN.Load()
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
		if waiting.IsZero() && k.m.answerWait != nil {
			if wait = k.m.answerWait(); wait > 0 {
				waiting, mark = at, before
				deadline.Reset(max(time.Until(at.Add(wait)), 0))
			}
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
		case <-heard:
			if !waiting.IsZero() && heardN.Load() > mark {
				waiting = time.Time{}
				deadline.Stop()
			}
			if expired && waiting.IsZero() {
				return done()
			}
		case <-expire:
			expired, expire = true, nil
			if waiting.IsZero() && heardN.Load() > 0 {
				return done()
			}
		case <-deadline.C:
			if waiting.IsZero() {
				continue
			}
			if heardN.Load() > mark { // heard just now
				waiting = time.Time{}
				continue
			}
			cancel()
			<-recvErr
			return nil, sent, fmt.Errorf("%w from %s within %s", errNoAnswer, addr, wait)
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
	relay    bool   // the stream to cur asks it to relay to its leader
	relayTo  string // that leader, as the refusal named it
	silent   string // the last replica whose direct stream went unanswered or failed
	relays   bool   // replicas relay this kind of stream
	spread   bool   // any replica serves: hints into addrs are not followed (spread.go)
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

// ended records that the stream to f.cur ended, having worked or not,
// refused or not (a NotLeader refusal) with the leader its refusal named
// ("" for none), and returns the address to try next, the wait before
// trying it, and whether that follows the hint. When f.relay is set after
// it returns, the next stream asks that address to relay.
//
// A replica whose direct stream ended other than by a refusal (it broke,
// could not connect, or went unanswered for the answer deadline) is
// remembered as silent until a stream works or it refuses one, which it can
// do only if it answers. A refusal that names the silent replica as leader is not
// followed back to it: with relays, the refusing replica, which hears from
// its leader, is asked to relay the stream to it; without, or if that
// fails too, Keep tries the next address. So a leader that its followers
// reach but this client cannot (a partition, a proxy that stopped
// forwarding) still gets the client's stream, and a stalled leader costs
// one answer deadline, not one per refusal naming it.
func (f *follower) ended(worked, refused bool, hint string) (next string, wait time.Duration, followed bool) {
	if worked {
		f.failures, f.hops = 0, 0
		f.b.Reset()
		f.silent = ""
	}
	relayed := f.relay
	f.relay = false
	switch {
	case relayed: // its silence may be the relay's or the leader's
	case refused:
		if f.silent == f.cur {
			f.silent = ""
		}
	default:
		f.silent = f.cur
	}
	f.failures++
	if hint != "" && hint != f.cur && !(f.spread && slices.Contains(f.addrs, hint)) {
		if hint != f.silent {
			f.cur = hint
			if i := slices.Index(f.addrs, hint); i >= 0 {
				f.idx = i
			}
			return hint, f.hop(), true
		}
		if f.relays && !relayed {
			f.relay, f.relayTo = true, hint
			return f.cur, f.hop(), true
		}
	}
	f.idx = (f.idx + 1) % len(f.addrs)
	f.cur = f.addrs[f.idx]
	if f.failures >= len(f.addrs) {
		return f.cur, f.wait(), false // a full round failed
	}
	return f.cur, 0, false
}

// unrelay records that a relayed stream ended by itself (errRelayDone)
// after working, and returns the leader it was relayed to, to try directly
// at once.
func (f *follower) unrelay() string {
	f.failures, f.hops = 0, 0
	f.b.Reset()
	f.relay, f.silent = false, ""
	f.cur = f.relayTo
	if i := slices.Index(f.addrs, f.cur); i >= 0 {
		f.idx = i
	}
	return f.cur
}

// hop counts a hint followed (or a relay asked for) at once, and returns
// the wait before it: none, unless too many came in a row.
func (f *follower) hop() time.Duration {
	if f.hops < f.maxHops() {
		f.hops++
		return 0
	}
	return f.wait()
}

// wait starts a new round after the backoff it returns.
func (f *follower) wait() time.Duration {
	f.failures, f.hops = 0, 0
	return f.b.Next()
}
