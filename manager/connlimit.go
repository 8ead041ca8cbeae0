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
// connection past it is answered, in HTTP/2, with a GOAWAY whose debug data
// names the limit (a gRPC client reports it in its error), and closed;
// with certificates, after a TLS handshake, so that a client reads it
// rather than a TLS error, and only if it presents a valid certificate.
// At most maxRefusing are being answered at once; past that a connection
// is closed unanswered. Each refusal is counted, and logged (quietLog).
//
// A connection holds its slot from its accept: through the handshake (at
// most 10 s, grpc.ConnectionTimeout) and, once served, until it closes.
// A client without a valid certificate is refused at the handshake
// (certs.ServerCredentials), which closes its connection and frees the
// slot at once.
//
// It also closes every connection it accepted when told to (closeAll): gRPC's
// Stop waits for connections still in their handshake, up to the handshake
// timeout, so a few connections that never speak would hold a stopping
// replica back.
func (s *Server) limitListener(lis net.Listener) *connLimit {
	return &connLimit{Listener: lis, s: s, slots: make(chan struct{}, s.cfg.MaxConnections), open: map[*slotConn]bool{},
		refusing: make(chan struct{}, maxRefusing)}
}

// maxRefusing caps the connections past MaxConnections being answered at
// once: each costs a TLS handshake.
const maxRefusing = 32

type connLimit struct {
	net.Listener
	s        *Server
	slots    chan struct{}
	refusing chan struct{}

	mu     sync.Mutex
	open   map[*slotConn]bool
	closed bool
}

// closeAll closes every connection accepted and not yet closed, and any
// accepted from now on.
func (l *connLimit) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*slotConn, 0, len(l.open))
	for c := range l.open {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			sc := &slotConn{Conn: c}
			sc.free = func() {
				<-l.slots
				l.mu.Lock()
				delete(l.open, sc)
				l.mu.Unlock()
			}
			l.mu.Lock()
			closed := l.closed
			if !closed {
				l.open[sc] = true
			}
			l.mu.Unlock()
			if closed {
				_ = sc.Close()
				continue
			}
			return sc, nil
		default:
		}
		l.s.limitRefused(limitConnections)
		why := fmt.Sprintf("leasehold: this replica has %d connections open, the most allowed (MaxConnections, leasehold manager --%s)",
			cap(l.slots), limitConnections)
		l.s.quiet.warn(l.s.cfg.Logger, limitConnections, "refused a connection", "why", why, "from", c.RemoteAddr().String())
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				refuseConn(c, why, l.s.cfg.Certs)
			}()
		default:
			_ = c.Close()
		}
	}
}

// refuseConn answers a connection it will not serve, then closes it. With
// src, it first completes the TLS handshake the client expects
// (certs.ServerTLS: a client without a valid certificate learns nothing
// more). Then it speaks just enough HTTP/2 to answer the client's first
// call with a gRPC status, ResourceExhausted saying why, which a gRPC
// client reports as the call's error; and a GOAWAY whose debug data says
// it too, for a client that sends no call within a second.
func refuseConn(c net.Conn, why string, src *certs.Source) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if src != nil {
		cfg := src.ServerTLS()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Server(c, cfg)
		if tc.Handshake() != nil {
			return
		}
		c = tc
	}
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
