package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// proxy forwards connections to a Manager replica. Cut, it stops
// forwarding the connections its cut selects in both directions while
// keeping them open: setCut, the clients' (Owners, Lookups, the CLI),
// while the other replicas' connections (Raft, and the streams they relay)
// go on; cutFrom, the connections one replica opened, which carry its
// Raft messages to this one (a stream carries messages one way), so this
// one's still reach it on its own connection; cutFor, the connections of
// the clients it names. It tells them apart by the
// certificate each presents: it ends the client's TLS with the certificate
// of the replica it stands for, and dials the replica with the
// certificate of the same identity as the client's, from the test's
// directory, so the replica admits each connection as it would the
// client's own.
type proxy struct {
	t       *testing.T
	lis     net.Listener
	target  string
	replica *certs.Source // the identity it presents to the clients

	mu     sync.Mutex
	cut    func(certs.Identity) bool // the connections held; nil: none
	only   map[string]bool           // the clients cut besides, by name (cutFor)
	healed chan struct{}             // closed and replaced at each change
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup

	held atomic.Int64 // chunks of cut connections held
}

// startProxy listens on addr for the replica with Raft ID replica, which
// listens on target.
func startProxy(t *testing.T, addr, target, replica string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, lis: lis, target: target, replica: sourceFor(t, certs.Replica, replica),
		healed: make(chan struct{}), conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// setCut cuts the clients' connections, or heals every cut.
func (p *proxy) setCut(on bool) {
	if !on {
		p.setCutFunc(nil)
		return
	}
	p.setCutFunc(func(id certs.Identity) bool { return id.Role != certs.Replica })
}

// cutFrom cuts the connections replica opened to this one: its messages
// here are held, this one's to it are not.
func (p *proxy) cutFrom(replica uint64) {
	name := fmt.Sprint(replica)
	p.setCutFunc(func(id certs.Identity) bool { return id.Role == certs.Replica && id.Name == name })
}

// cutFor cuts the connections of the client called name (the name in
// its certificate), or forwards them again.
func (p *proxy) cutFor(name string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.only == nil {
		p.only = map[string]bool{}
	}
	p.only[name] = on
	close(p.healed)
	p.healed = make(chan struct{})
}

func (p *proxy) setCutFunc(cut func(certs.Identity) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	close(p.healed)
	p.healed = make(chan struct{})
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	close(p.healed)
	p.healed = make(chan struct{})
	p.mu.Unlock()
	p.lis.Close()
	p.wg.Wait()
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve ends the client's TLS, learns who it is, and forwards its
// connection to the replica under the same identity.
func (p *proxy) serve(raw net.Conn) {
	cfg := p.replica.ServerTLS()
	cfg.NextProtos = []string{"h2"}
	c := tls.Server(raw, cfg)
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		raw.Close()
		return
	}
	_ = raw.SetDeadline(time.Time{})
	peer := c.ConnectionState().PeerCertificates
	if len(peer) == 0 {
		raw.Close()
		return
	}
	id, err := certs.IdentityOf(peer[0])
	if err != nil {
		raw.Close()
		return
	}
	src, err := certs.Open(p.replica.Dir(), id.Role, id.Name)
	if err != nil {
		raw.Close()
		return
	}
	ucfg := src.ClientTLS(certs.Replica)
	ucfg.NextProtos = []string{"h2"}
	u, err := tls.Dial("tcp", p.target, ucfg)
	if err != nil {
		raw.Close()
		return
	}
	if !p.track(u) {
		raw.Close()
		return
	}
	p.wg.Go(func() { p.pipe(u, c, id) })
	p.pipe(c, u, id)
}

// pipe copies from src to dst, holding each chunk while the proxy's cut
// selects the connection, opened by id.
func (p *proxy) pipe(dst, src net.Conn, id certs.Identity) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold(id) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: close both sides
		}
	}
}

// hold waits while the proxy's cut selects the connection opened by id;
// it reports false once the proxy is closed.
func (p *proxy) hold(id certs.Identity) bool {
	for {
		p.mu.Lock()
		cut := p.cut != nil && p.cut(id) || id.Role != certs.Replica && p.only[id.Name]
		closed, healed := p.closed, p.healed
		p.mu.Unlock()
		if closed {
			return false
		}
		if !cut {
			return true
		}
		p.held.Add(1)
		<-healed
	}
}
