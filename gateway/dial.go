package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/lookup"
)

// The gateway dials two kinds of peers: the Manager, through each
// namespace's Lookup, and the Owners, over HTTP/1.1 and, for gRPC, HTTP/2
// (in cleartext, or on mutual TLS with Config.Certs). Both are set up here and nowhere else, so that transport
// security (credentials for the Lookups, a TLS config for the Owners) is
// passed through in one place.

// ownerTransports returns the transports to the Owners: one for HTTP, one
// for gRPC (HTTP/2 with prior knowledge). Config.Transport, if set, is
// both. With Config.Certs, both are HTTPS with the gateway's certificate,
// accepting only owner certificates that name the Owner's host (the gRPC
// one HTTP/2 only).
func (cfg *Config) ownerTransports() (http1, h2 http.RoundTripper) {
	if cfg.Transport != nil {
		return cfg.Transport, cfg.Transport
	}
	if cfg.Certs != nil {
		t := cfg.Certs.HTTPTransport(certs.Owner)
		t.MaxIdleConnsPerHost = 256
		return t, h2TLS(cfg.Certs)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConnsPerHost = 256
	c := http.DefaultTransport.(*http.Transport).Clone()
	c.Proxy = nil
	c.Protocols = new(http.Protocols)
	c.Protocols.SetUnencryptedHTTP2(true)
	return t, c
}

// h2TLS is the transport for gRPC routes with certificates: HTTP/2 over
// mutual TLS (ALPN h2), with the gateway's certificate, accepting only
// owner certificates that name the Owner's host.
func h2TLS(src *certs.Source) *http.Transport {
	return &http.Transport{
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg := src.ClientTLSFor(host, certs.Owner)
			cfg.NextProtos = []string{"h2"}
			return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
		},
	}
}

// lookupConfig returns the configuration of a namespace's Lookup.
func (cfg *Config) lookupConfig(namespace string, onLoss func(lookup.Loss)) lookup.Config {
	lc := lookup.Config{Connection: leasehold.Connection{Manager: cfg.Manager, Namespace: namespace, Timing: cfg.Timing, Logger: cfg.Logger, Insecure: cfg.Certs == nil}, OnLoss: onLoss}
	if cfg.Certs != nil {
		lc.DialOptions = []grpc.DialOption{certs.DialOption(cfg.Certs)}
	}
	return lc
}
