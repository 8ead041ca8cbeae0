package certs

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
)

// ServeHTTP serves srv on lis until it is closed: with src, over TLS with
// src's certificate (ServerTLSOpen) and only to clients with a certificate
// of the group (RequireHTTP, each request refused with 401 saying what is
// wrong with the client's certificate); with a nil src, in plain HTTP, for
// a configuration that asked for plaintext. It returns srv.Serve's error.
func ServeHTTP(srv *http.Server, lis net.Listener, src *Source) error {
	if src != nil {
		srv.Handler = RequireHTTP(src, nil, srv.Handler)
		lis = tls.NewListener(lis, src.ServerTLSOpen())
	}
	return srv.Serve(lis)
}

// OwnersOnly serves h only to Owner certificates that may use namespace ns
// ("" is "default"), with 403 naming anyone else: for an endpoint through
// which one Owner hands state to the next, which no frontend may use.
// With a nil src (plaintext), it is h.
func OwnersOnly(src *Source, ns string, h http.Handler) http.Handler {
	if src == nil {
		return h
	}
	ns = cmp.Or(ns, "default")
	return RequireHTTP(src, func(id Identity) error {
		if id.Role != Owner || !id.MayUse(ns) {
			return fmt.Errorf("%s may not use this endpoint: only the Owners of namespace %q may", id, ns)
		}
		return nil
	}, h)
}

// OpenIfSet is Open for a configuration that may ask for plaintext: with
// an empty dir it returns a nil Source, with which ServeHTTP, OwnersOnly
// and DialHTTP work in plain HTTP.
func OpenIfSet(dir string, role Role, name string) (*Source, error) {
	if dir == "" {
		return nil, nil
	}
	return Open(dir, role, name)
}

// DialHTTP is an HTTP transport to a group's servers, and their URLs'
// scheme: with src, HTTPTransport(want...) and "https"; with a nil src,
// a clone of the default transport and "http". It is a fresh
// *http.Transport either way, for the caller to tune (idle connections).
func DialHTTP(src *Source, want ...Role) (*http.Transport, string) {
	if src == nil {
		return http.DefaultTransport.(*http.Transport).Clone(), "http"
	}
	return src.HTTPTransport(want...), "https"
}
