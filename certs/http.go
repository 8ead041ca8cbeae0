package certs

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

type ctxKey struct{}

// RequireHTTP serves h only to clients whose certificate Verify accepts
// and allow (nil: any identity) admits; others get 401 or 403 with a
// message that says why. The server's TLS configuration is ServerTLS. The
// identity is in the request's context (FromHTTP).
func RequireHTTP(src *Source, allow func(Identity) error, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "leasehold: this server requires mutual TLS", http.StatusUnauthorized)
			return
		}
		id, err := src.Verify(r.TLS.PeerCertificates)
		if err != nil {
			http.Error(w, "leasehold: "+err.Error(), http.StatusUnauthorized)
			return
		}
		if allow != nil {
			if err := allow(id); err != nil {
				http.Error(w, "leasehold: "+err.Error(), http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, id)))
	})
}

// FromHTTP returns the identity RequireHTTP found for a request.
func FromHTTP(r *http.Request) (Identity, bool) {
	id, ok := r.Context().Value(ctxKey{}).(Identity)
	return id, ok
}

// HTTPTransport is an HTTP client transport that dials with src's
// certificate and accepts servers of the roles in want whose certificate
// names the host dialled (ClientTLSFor).
func (s *Source) HTTPTransport(want ...Role) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			d := &tls.Dialer{Config: s.ClientTLSFor(host, want...)}
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}
