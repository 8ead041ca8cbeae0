package gateway

import (
	"errors"
	"io"
	"sync"
)

// errAttemptOver is what a body handed to an attempt that has ended reads.
var errAttemptOver = errors.New("gateway: the attempt this body was sent with is over")

// replayBody streams a request body (a gRPC call's messages, which may
// keep coming while the answer does) to one attempt at an Owner at a time,
// keeping what it has read from the start, up to a bound, so that a
// refused call can be sent again from its first byte. The Owner contract
// has an Owner refuse before it answers, so a refusal comes early and
// little is kept; once an answer is relayed (commit), or the bound is
// passed, nothing more is kept and the call can no longer be sent again.
//
// One goroutine reads the client's body, one read at a time and only when
// an attempt wants more, so a slow Owner slows the client as it would
// without the gateway. An attempt waiting for the client's next message
// ends at once when the attempt is over: the HTTP/2 transport waits for
// the body's reader before it lets a refused answer go.
type replayBody struct {
	src   io.ReadCloser
	limit int64
	want  chan struct{} // an attempt wants more (capacity 1)
	done  chan struct{} // closed by close: the pump stops
	once  sync.Once     // starts the pump

	mu   sync.Mutex
	log  []byte        // guarded by mu; what was read from src, from offset base on
	base int64         // guarded by mu; the stream offset of log[0]
	keep bool          // guarded by mu; log starts at offset 0 and will keep doing so
	err  error         // guarded by mu; src's error (io.EOF at the end), once read
	more chan struct{} // guarded by mu; closed and replaced when log or err changes
	live *attemptBody  // guarded by mu; the latest attempt's body
}

func newReplayBody(src io.ReadCloser, limit int64) *replayBody {
	return &replayBody{src: src, limit: limit, keep: true, want: make(chan struct{}, 1), done: make(chan struct{}), more: make(chan struct{})}
}

// close stops the pump; the request is answered.
func (b *replayBody) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.done:
	default:
		close(b.done)
	}
}

// pump reads the client's body, a read each time an attempt wants more.
func (b *replayBody) pump() {
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-b.want:
		case <-b.done:
			return
		}
		n, err := b.src.Read(buf)
		b.mu.Lock()
		b.log = append(b.log, buf[:n]...)
		if b.keep && b.base+int64(len(b.log)) > b.limit {
			b.keep = false // too long to hold: the live attempt is the last
		}
		b.trimLocked()
		if err != nil {
			b.err = err
		}
		close(b.more)
		b.more = make(chan struct{})
		b.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// attempt returns a body that reads the stream from its first byte for a
// new attempt, and ends the previous attempt's; ok is false once the start
// is no longer kept.
func (b *replayBody) attempt() (body io.ReadCloser, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.keep {
		return nil, false
	}
	if b.live != nil {
		b.live.endLocked()
	}
	b.live = &attemptBody{b: b, over: make(chan struct{})}
	return b.live, true
}

// commit stops keeping the stream: the live attempt's answer is relayed
// and the call will not be sent again.
func (b *replayBody) commit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keep = false
	b.trimLocked()
}

// trimLocked drops what the live attempt has read, unless it is kept.
func (b *replayBody) trimLocked() {
	if b.keep || b.live == nil {
		return
	}
	if n := b.live.pos - b.base; n > 0 {
		b.log = append(b.log[:0], b.log[n:]...)
		b.base = b.live.pos
	}
}

// attemptBody is one attempt's view of a replayBody.
type attemptBody struct {
	b     *replayBody
	pos   int64         // guarded by b.mu; the next stream offset to read
	over  chan struct{} // closed when the attempt is over
	ended bool          // guarded by b.mu
}

func (a *attemptBody) endLocked() {
	if !a.ended {
		a.ended = true
		close(a.over)
	}
}

func (a *attemptBody) Read(p []byte) (int, error) {
	b := a.b
	for {
		b.mu.Lock()
		if a.ended {
			b.mu.Unlock()
			return 0, errAttemptOver
		}
		if end := b.base + int64(len(b.log)); a.pos < end {
			n := copy(p, b.log[a.pos-b.base:])
			a.pos += int64(n)
			b.trimLocked()
			b.mu.Unlock()
			return n, nil
		}
		if b.err != nil {
			err := b.err
			b.mu.Unlock()
			return 0, err
		}
		more := b.more
		b.mu.Unlock()
		b.once.Do(func() { go b.pump() })
		select {
		case b.want <- struct{}{}:
		default: // already asked
		}
		select {
		case <-more:
		case <-a.over:
			return 0, errAttemptOver
		case <-b.done:
			return 0, errAttemptOver
		}
	}
}

// Close ends the attempt's view; the stream stays open for the next.
func (a *attemptBody) Close() error {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.endLocked()
	return nil
}
