package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// AuthInfo is what ServerCredentials learn of a client at the handshake:
// the TLS state, and either the identity its certificate carries or why
// the certificate was not accepted.
type AuthInfo struct {
	credentials.TLSInfo
	Identity Identity
	Err      error
}

// AuthType names the credentials.
func (AuthInfo) AuthType() string { return "leasehold-tls" }

type serverCreds struct {
	credentials.TransportCredentials
	src     *Source
	refused func(why error)
}

// ServerCredentials are a gRPC server's mutual TLS credentials
// (ServerTLS): a client whose certificate is missing or not valid is
// refused at the handshake, and its connection closed, so it holds no
// slot and makes no call; refused, if not nil, is told why (for the
// server's log and metrics). The identity of every other client is in
// each call's context (PeerIdentity).
func ServerCredentials(src *Source, refused func(why error)) credentials.TransportCredentials {
	return serverCreds{credentials.NewTLS(src.ServerTLS()), src, refused}
}

// Handshaken is a connection whose TLS handshake a listener already made
// with ServerTLS: ServerCredentials take it as it is, and read the
// client's identity from its state.
type Handshaken interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

func (c serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if h, ok := raw.(Handshaken); ok {
		if st := h.ConnectionState(); st.HandshakeComplete {
			id, verr := c.src.Verify(st.PeerCertificates)
			return raw, AuthInfo{TLSInfo: credentials.TLSInfo{State: st,
				CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, Identity: id, Err: verr}, nil
		}
	}
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		if why, ok := RefusedAtHandshake(err); ok && c.refused != nil {
			c.refused(why)
		}
		return nil, nil, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		_ = conn.Close()
		return nil, nil, errors.New("certs: not a TLS connection")
	}
	id, verr := c.src.Verify(info.State.PeerCertificates)
	return conn, AuthInfo{TLSInfo: info, Identity: id, Err: verr}, nil
}

func (c serverCreds) Clone() credentials.TransportCredentials {
	return serverCreds{c.TransportCredentials.Clone(), c.src, c.refused}
}

// ClientCredentials are a gRPC client's mutual TLS credentials: each
// handshake uses ClientTLSFor the dialled host, with the files as they are
// then.
func ClientCredentials(src *Source, want ...Role) credentials.TransportCredentials {
	return &clientCreds{src: src, want: want}
}

type clientCreds struct {
	src      *Source
	want     []Role
	override string
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	if c.override != "" {
		host = c.override
	}
	cfg := c.src.ClientTLSFor(host, c.want...)
	cfg.NextProtos = []string{"h2"}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, credentials.TLSInfo{State: conn.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("certs: client credentials cannot serve")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

func (c *clientCreds) OverrideServerName(name string) error { c.override = name; return nil }

// DialOption dials a Manager replica with src's certificate.
func DialOption(src *Source) grpc.DialOption {
	return grpc.WithTransportCredentials(ClientCredentials(src, Replica))
}

// ErrNoTLS says a call did not arrive over ServerCredentials.
var ErrNoTLS = errors.New("certs: the connection is not mutual TLS")

// PeerIdentity returns the identity of the client of a call served with
// ServerCredentials, or why it has none.
func PeerIdentity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, ErrNoTLS
	}
	ai, ok := p.AuthInfo.(AuthInfo)
	if !ok {
		return Identity{}, ErrNoTLS
	}
	return ai.Identity, ai.Err
}

// Collector exports the time left on the current certificate,
// leasehold_certificate_expiry_seconds{role,name}, so that an alert fires
// before it expires.
func (s *Source) Collector() prometheus.Collector {
	id := s.Identity()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "leasehold_certificate_expiry_seconds",
		Help:        "Seconds until this process's certificate expires (it is reloaded from the certificates directory without a restart).",
		ConstLabels: prometheus.Labels{"role": string(id.Role), "name": id.Name},
	}, func() float64 { return s.NotAfter().Sub(s.now()).Seconds() })
}
