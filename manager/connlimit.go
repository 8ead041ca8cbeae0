package manager

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/certs"
)

// limitListener caps the connections open at once at MaxConnections. A
// connection past it is answered, in HTTP/2, with a GOAWAY whose debug
// data names the limit, and closed. At most maxRefusing are being answered
// at once; past that a connection is closed unanswered. Each refusal is
// counted, and logged (quietLog).
//
// With certificates, the listener makes the TLS handshake itself
// (certs.ServerTLS), and a connection takes a slot only once its
// handshake is done: a client without a valid certificate is refused
// there and never holds one, nor does a client that connects and then
// stalls its handshake (for up to handshakeTimeout). A connection past the
// limit is answered over TLS, so that its client reads the refusal rather
// than a TLS error: the answer to its first call is ResourceExhausted
// naming the limit. At most MaxConnections (and at least minHandshakes)
// handshakes are under way at once; past that a new connection is closed
// at once.
//
// It also closes every connection it accepted when told to (closeAll): gRPC's
// Stop waits for connections still in their handshake, up to the handshake
// timeout, so a few connections that never speak would hold a stopping
// replica back.
func (s *Server) limitListener(lis net.Listener) *connLimit {
	l := &connLimit{Listener: lis, s: s, slots: make(chan struct{}, s.cfg.MaxConnections), open: map[net.Conn]bool{},
		refusing: make(chan struct{}, maxRefusing)}
	if s.cfg.Certs != nil {
		l.tls = s.cfg.Certs.ServerTLS()
		l.tls.NextProtos = []string{"h2"}
		l.handshaking = make(chan struct{}, max(s.cfg.MaxConnections, minHandshakes))
		l.ready, l.done = make(chan net.Conn), make(chan struct{})
	}
	return l
}

// handshakeTimeout bounds a connection's TLS and HTTP/2 handshakes.
const handshakeTimeout = 10 * time.Second

// minHandshakes is the fewest TLS handshakes that may be under way at
// once, however low MaxConnections is: a handshake does not hold a slot,
// and a few clients stalling theirs must not keep the others out.
const minHandshakes = 4096

// maxRefusing caps the connections being answered at once: past
// MaxConnections (refuse), or refused at the handshake (linger).
const maxRefusing = 32

type connLimit struct {
	net.Listener
	s        *Server
	slots    chan struct{}
	refusing chan struct{}

	// With certificates: the handshakes under way, the connections that
	// finished theirs and hold a slot, and the end of the accept loop
	// (acceptTLS) with its error.
	tls         *tls.Config
	handshaking chan struct{}
	ready       chan net.Conn
	once        sync.Once
	done        chan struct{}
	err         error

	mu     sync.Mutex
	open   map[net.Conn]bool // in their handshake or holding a slot
	closed bool
}

// closeAll closes every connection accepted and not yet closed, and any
// accepted from now on.
func (l *connLimit) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]net.Conn, 0, len(l.open))
	for c := range l.open {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// track records c as open, or says false once closeAll has been called.
func (l *connLimit) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.open[c] = true
	}
	return !l.closed
}

func (l *connLimit) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.open, c)
	l.mu.Unlock()
}

// slot gives c a slot, freed when it closes; full says there is none. A
// nil conn and !full: closeAll was called, and c is closed.
func (l *connLimit) slot(c net.Conn) (sc *slotConn, full bool) {
	select {
	case l.slots <- struct{}{}:
	default:
		return nil, true
	}
	sc = &slotConn{Conn: c}
	sc.free = func() {
		<-l.slots
		l.untrack(sc)
	}
	if !l.track(sc) {
		_ = sc.Close()
		return nil, false
	}
	return sc, false
}

// refuse answers c, a connection past MaxConnections (over TLS if its
// handshake is done), and closes it.
func (l *connLimit) refuse(c net.Conn) {
	l.s.limitRefused(limitConnections)
	why := fmt.Sprintf("leasehold: this replica has %d connections open, the most allowed (MaxConnections, leasehold manager --%s)",
		cap(l.slots), limitConnections)
	l.s.quiet.warn(l.s.cfg.Logger, limitConnections, "refused a connection", "why", why, "from", c.RemoteAddr().String())
	select {
	case l.refusing <- struct{}{}:
		go func() {
			defer func() { <-l.refusing }()
			refuseConn(c, why)
		}()
	default:
		_ = c.Close()
	}
}

func (l *connLimit) Accept() (net.Conn, error) {
	if l.tls != nil {
		l.once.Do(func() { go l.acceptTLS() })
		select {
		case c := <-l.ready:
			return c, nil
		case <-l.done:
			return nil, l.err
		}
	}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sc, full := l.slot(c)
		switch {
		case full:
			l.refuse(c)
		case sc != nil:
			return sc, nil
		}
	}
}

// acceptTLS accepts connections and starts the handshake of each, until
// the listener is closed.
func (l *connLimit) acceptTLS() {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			l.err = err
			close(l.done)
			return
		}
		select {
		case l.handshaking <- struct{}{}:
		default:
			l.s.limitRefused(limitConnections)
			l.s.quiet.warn(l.s.cfg.Logger, "handshakes", "closed a connection unanswered: too many TLS handshakes under way",
				"limit", cap(l.handshaking), "flag", "--"+limitConnections, "from", raw.RemoteAddr().String())
			_ = raw.Close()
			continue
		}
		if !l.track(raw) {
			<-l.handshaking
			_ = raw.Close()
			continue
		}
		go l.handshake(raw)
	}
}

// handshake makes raw's TLS handshake, then gives it a slot and hands it
// to Accept, or refuses it.
func (l *connLimit) handshake(raw net.Conn) {
	tc := tls.Server(raw, l.tls)
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	err := tc.Handshake()
	<-l.handshaking
	if err != nil {
		if why, ok := certs.RefusedAtHandshake(err); ok {
			l.s.refusedAtHandshake(why)
			l.linger(raw)
		}
		l.untrack(raw)
		_ = raw.Close()
		return
	}
	l.untrack(raw)
	_ = raw.SetDeadline(time.Time{})
	sc, full := l.slot(tc)
	switch {
	case full:
		l.refuse(tc)
	case sc != nil:
		select {
		case l.ready <- sc:
		case <-l.done:
			_ = sc.Close()
		}
	}
}

// linger lets a client refused at the handshake read the TLS alert that
// says why. Under TLS 1.3 the client has finished its side before the
// server checks its certificate, and writes on (gRPC's preface, its first
// call); closing with that unread would send a reset that may reach the
// client before the alert, which it then never reads ("broken pipe"). So
// the write side is shut (the alert is sent; the client reads it, then an
// end), and what the client writes is read and dropped for up to
// lingerTime or lingerBytes. connLimit.linger caps how many linger at once.
func linger(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

// linger lingers on c (above) if fewer than maxRefusing connections are
// being refused or lingered on, and otherwise leaves it to be closed at
// once: a flood of strangers takes no handshake slot from the others.
func (l *connLimit) linger(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
		linger(c)
		<-l.refusing
	default:
	}
}

// lingerTime and lingerBytes bound what linger reads of a refused client.
const (
	lingerTime  = time.Second
	lingerBytes = 64 << 10
)

// refuseConn answers a connection it will not serve (over TLS, if its
// handshake is done), then closes it. It speaks just enough HTTP/2 to
// answer the client's first call with a gRPC status, ResourceExhausted
// saying why, which a gRPC client reports as the call's error; and a
// GOAWAY whose debug data says it too, for a client that sends no call
// within a second.
func refuseConn(c net.Conn, why string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	f := http2.NewFramer(c, c)
	if f.WriteSettings() != nil {
		return
	}
	last := uint32(0)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	for last == 0 {
		fr, err := f.ReadFrame()
		if err != nil {
			break
		}
		switch fr := fr.(type) {
		case *http2.SettingsFrame:
			if !fr.IsAck() && f.WriteSettingsAck() != nil {
				return
			}
		case *http2.HeadersFrame:
			last = fr.StreamID
			if f.WriteHeaders(http2.HeadersFrameParam{StreamID: last, BlockFragment: refusalTrailers(why),
				EndStream: true, EndHeaders: true}) != nil {
				return
			}
		}
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if f.WriteGoAway(last, http2.ErrCodeEnhanceYourCalm, []byte(why)) != nil {
		return
	}
	// Let the client read it: a close with its data unread would send a
	// reset that may overtake the answer.
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// refusalTrailers is the HPACK block of a gRPC trailers-only response:
// ResourceExhausted with message why (printable ASCII, as gRPC's
// percent-encoding of grpc-message leaves it).
func refusalTrailers(why string) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for _, h := range [][2]string{{":status", "200"}, {"content-type", "application/grpc"},
		{"grpc-status", strconv.Itoa(int(codes.ResourceExhausted))}, {"grpc-message", why}} {
		_ = e.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	return b.Bytes()
}

// slotConn frees its slot when closed, once.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// ConnectionState is the TLS state of a connection whose handshake
// connLimit made, which the gRPC credentials then take as done
// (certs.ServerCredentials); a zero state, not complete, for another.
func (c *slotConn) ConnectionState() tls.ConnectionState {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}
