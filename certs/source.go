package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The reasons Verify refuses a certificate; its errors wrap one of them
// and say whose certificate it was.
var (
	ErrNoCertificate = errors.New("no certificate was presented")
	ErrUnknownCA     = errors.New("signed by an unknown authority (not this group's CA)")
	ErrExpired       = errors.New("expired or not yet valid")
	ErrNoIdentity    = errors.New("carries no valid leasehold identity")
)

// Source is one process's TLS material: the CA certificates it trusts and
// the certificate and key it presents, read from a certificates directory.
// It re-reads the files when they change (checked at most once a second,
// on a handshake or a Watch tick) and on Reload, so a certificate or the
// CA is rotated without a restart: new connections use the new files,
// established ones keep going. A Source is safe for concurrent use.
type Source struct {
	dir, base string
	cur       atomic.Pointer[material]
	now       func() time.Time

	mu      sync.Mutex // guards checked
	checked time.Time  // when the files' times were last compared
}

type material struct {
	cert  tls.Certificate
	leaf  *x509.Certificate
	id    Identity
	pool  *x509.CertPool
	stamp string // the files' sizes and times, to notice a change
}

// Open loads the CA certificates (ca.crt) and the certificate of the given
// role from dir. name picks the certificate (replica.<name>.crt); when
// empty, dir must hold exactly one certificate of that role.
func Open(dir string, role Role, name string) (*Source, error) {
	if dir == "" {
		return nil, fmt.Errorf("certs: no certificates directory (pass --certs-dir or set %s; see leasehold cert --help), or run with --insecure", DirEnv)
	}
	base := FileBase(Identity{Role: role, Name: name})
	if old := OldFileBase(Identity{Role: role, Name: name}); name != "" && old != base && !exists(filepath.Join(dir, base+".crt")) && exists(filepath.Join(dir, old+".crt")) {
		base = old // written before names kept to a Secret's key
	}
	// A directory whose one certificate of the role is not named after
	// its holder (a volume cert-manager's csi-driver fills when a pod
	// starts, named before the pod is) opens if it is name's: checked below.
	only := name != "" && !exists(filepath.Join(dir, base+".crt"))
	if name == "" || only {
		found, _ := filepath.Glob(filepath.Join(dir, string(role)+".*.crt"))
		switch len(found) {
		case 0:
			if !only {
				return nil, fmt.Errorf("certs: %s holds no %s certificate (%s.<name>.crt); create one with leasehold cert create-%s", dir, role, role, role)
			}
		case 1:
			base = strings.TrimSuffix(filepath.Base(found[0]), ".crt")
		default:
			if !only {
				return nil, fmt.Errorf("certs: %s holds %d %s certificates; say which one", dir, len(found), role)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, base+".crt")); err != nil {
		return nil, fmt.Errorf("certs: %s holds no certificate for %s %q (%s.crt); create it with leasehold cert create-%s", dir, role, name, base, role)
	}
	s := &Source{dir: dir, base: base, now: time.Now}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	if m.id.Role != role {
		return nil, fmt.Errorf("certs: %s.crt is the certificate of %s, not of a %s", filepath.Join(dir, base), m.id, role)
	}
	if only && m.id.Name != name {
		return nil, fmt.Errorf("certs: %s holds no certificate for %s %q (%s.crt), and its one %s certificate, %s.crt, is %s's", dir, role, name, FileBase(Identity{Role: role, Name: name}), role, base, m.id)
	}
	s.cur.Store(m)
	s.checked = s.now()
	return s, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (s *Source) files() [3]string {
	return [3]string{filepath.Join(s.dir, CAFile), filepath.Join(s.dir, s.base+".crt"), filepath.Join(s.dir, s.base+".key")}
}

func (s *Source) stamp() string {
	var b strings.Builder
	for _, f := range s.files() {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

func (s *Source) load() (*material, error) {
	f := s.files()
	stamp := s.stamp()
	cas, err := readCerts(f[0])
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	cert, err := tls.LoadX509KeyPair(f[1], f[2])
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", f[1], err)
	}
	leaf := cert.Leaf
	id, err := IdentityOf(leaf)
	if err != nil {
		return nil, err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: s.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("certs: %s: %w", f[1], describe(leaf, err))
	}
	return &material{cert: cert, leaf: leaf, id: id, pool: pool, stamp: stamp}, nil
}

// Reload re-reads the files now. If they are unusable (a certificate that
// the CA did not sign, a key that does not match), the Source keeps what
// it had and returns the error.
func (s *Source) Reload() error {
	m, err := s.load()
	if err != nil {
		return err
	}
	if !sameIdentity(m.id, s.cur.Load().id) {
		return fmt.Errorf("certs: the new %s.crt is for %s, not %s: kept the old one", s.base, m.id, s.cur.Load().id)
	}
	s.cur.Store(m)
	return nil
}

func sameIdentity(a, b Identity) bool {
	return a.Role == b.Role && a.Name == b.Name && slices.Equal(a.Namespaces, b.Namespaces)
}

// fresh returns the current material, reloading first if the files
// changed since they were last checked, at most once a second.
func (s *Source) fresh() *material {
	s.mu.Lock()
	due := s.now().Sub(s.checked) >= time.Second
	if due {
		s.checked = s.now()
	}
	s.mu.Unlock()
	if due && s.stamp() != s.cur.Load().stamp {
		_ = s.Reload() // a bad file keeps the old material; Watch logs why
	}
	return s.cur.Load()
}

// Identity is who this process's certificate says it is.
func (s *Source) Identity() Identity { return s.cur.Load().id }

// NotAfter is when the current certificate expires.
func (s *Source) NotAfter() time.Time { return s.cur.Load().leaf.NotAfter }

// Dir is the certificates directory.
func (s *Source) Dir() string { return s.dir }

// Verify checks a peer's certificate chain (leaf first) against the CA
// certificates now trusted, and returns the identity it carries. Its
// errors say whose certificate it was and what is wrong with it: none
// (ErrNoCertificate), another CA's (ErrUnknownCA), expired (ErrExpired),
// or no identity (ErrNoIdentity).
func (s *Source) Verify(chain []*x509.Certificate) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, fmt.Errorf("certs: %w (dial with the certificate from leasehold cert create-...)", ErrNoCertificate)
	}
	m := s.fresh()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: m.pool, Intermediates: inter, CurrentTime: s.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return Identity{}, fmt.Errorf("certs: %w", describe(chain[0], err))
	}
	id, err := IdentityOf(chain[0])
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrNoIdentity, err)
	}
	return id, nil
}

// describe turns an x509 verification error into one that names the
// certificate and the reason.
func describe(c *x509.Certificate, err error) error {
	who := fmt.Sprintf("certificate %q", c.Subject.CommonName)
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("%s is %w: issued by %q", who, ErrUnknownCA, c.Issuer.CommonName)
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		return fmt.Errorf("%s is %w: valid from %s to %s", who, ErrExpired,
			c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%s: %w", who, err)
}

// ServerTLS is the configuration of a listener that serves only the
// group's certificate holders: it presents the current certificate and
// refuses, at the handshake, a client that presents none ("certificate
// required") or one that Verify does not accept ("bad certificate"), so
// that a stranger's connection ends there and holds nothing of the server
// (a connection slot, a stream). The handshake's error on the server says
// what was wrong (RefusedAtHandshake), for the server's log; the client
// sees only the TLS alert.
func (s *Source) ServerTLS() *tls.Config {
	c := s.ServerTLSOpen()
	c.ClientAuth = tls.RequireAnyClientCert
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if _, err := s.Verify(cs.PeerCertificates); err != nil {
			return &handshakeRefusal{err}
		}
		return nil
	}
	return c
}

// ServerTLSOpen is the configuration of a listener that also serves
// callers without a certificate, such as the health endpoints a load
// balancer probes: it asks every client for a certificate but does not
// refuse one at the handshake. Each request is then checked (RequireHTTP),
// and refused with a message that says what was wrong.
func (s *Source) ServerTLSOpen() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.fresh().cert, nil
		},
	}
}

// handshakeRefusal is ServerTLS's refusal of a client's certificate.
type handshakeRefusal struct{ err error }

func (r *handshakeRefusal) Error() string { return r.err.Error() }
func (r *handshakeRefusal) Unwrap() error { return r.err }

// RefusedAtHandshake says whether err, a server's handshake error with
// ServerTLS, is the refusal of the client's certificate (missing or not
// valid), and if so returns why, naming the certificate: an error that
// wraps ErrNoCertificate, ErrUnknownCA, ErrExpired or ErrNoIdentity, or
// another of Verify's. Any other handshake error (a timeout, a client that
// went away, a scanner) is not.
func RefusedAtHandshake(err error) (error, bool) {
	if err == nil {
		return nil, false
	}
	var r *handshakeRefusal
	if errors.As(err, &r) {
		return r.err, true
	}
	// crypto/tls's own check of tls.RequireAnyClientCert.
	if strings.Contains(err.Error(), "didn't provide a certificate") {
		return fmt.Errorf("certs: %w", ErrNoCertificate), true
	}
	return nil, false
}

// ClientTLS is the configuration of a client: it presents the current
// certificate and accepts a server whose certificate the CA signed and
// whose role is one of want (any, if none). It does not check the server's
// host name, which it does not know: ClientTLSFor does, and the gRPC
// credentials (ClientCredentials) and HTTPTransport use it. Its errors say
// what failed.
func (s *Source) ClientTLS(want ...Role) *tls.Config { return s.ClientTLSFor("", want...) }

// ClientTLSFor is ClientTLS for a server dialled as host (a DNS name or an
// IP address; "" skips the check), which its certificate's DNS or IP SANs
// must name.
func (s *Source) ClientTLSFor(host string, want ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: host,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &s.fresh().cert, nil
		},
		// The chain is verified by VerifyConnection, against the CA
		// certificates as they are now, with errors that say what is wrong.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := s.Verify(cs.PeerCertificates)
			if err != nil {
				return fmt.Errorf("leasehold: the server presented a bad certificate: %w", err)
			}
			if len(want) > 0 && !slices.Contains(want, id.Role) {
				return fmt.Errorf("leasehold: the server presented the certificate of %s, not of a %s: wrong identity", id, joinRoles(want))
			}
			if host != "" {
				if err := cs.PeerCertificates[0].VerifyHostname(host); err != nil {
					return fmt.Errorf("leasehold: the server's certificate (%s) is not for %q: wrong identity: %w", id, host, err)
				}
			}
			return nil
		},
	}
}

func joinRoles(rs []Role) string {
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = string(r)
	}
	return strings.Join(ss, " or ")
}

// WarnBefore is how long before its certificate expires Watch starts
// warning: 30 days, or a fifth of the certificate's lifetime if shorter.
func WarnBefore(c *x509.Certificate) time.Duration {
	return min(30*24*time.Hour, c.NotAfter.Sub(c.NotBefore)/5)
}

// Watch reloads the files when they change and logs a warning when the
// certificate is about to expire, every interval (0: 10 s), until ctx
// ends. A failed reload is logged and the old material kept.
func (s *Source) Watch(ctx context.Context, log *slog.Logger, interval time.Duration) {
	if interval == 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var warned time.Time
	for {
		if st := s.stamp(); st != s.cur.Load().stamp {
			if err := s.Reload(); err != nil {
				log.Error("certificates changed but cannot be loaded; keeping the old ones", "dir", s.dir, "err", err)
			} else {
				log.Info("certificates reloaded", "dir", s.dir, "identity", s.Identity().String(), "expires", s.NotAfter())
			}
		}
		m := s.cur.Load()
		if left := m.leaf.NotAfter.Sub(s.now()); left < WarnBefore(m.leaf) && s.now().Sub(warned) >= time.Hour {
			warned = s.now()
			log.Warn("certificate expires soon: create a new one with leasehold cert and it is loaded without a restart",
				"identity", m.id.String(), "expires", m.leaf.NotAfter, "left", left.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
