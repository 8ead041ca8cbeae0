package gateway

import (
	"net/http"

	"github.com/leasehold/leasehold/lookup"
)

// The gateway dials two kinds of peers: the Manager, through each
// namespace's Lookup, and the Owners, over HTTP/1.1 and, for gRPC, HTTP/2
// in cleartext. Both are set up here and nowhere else, so that transport
// security (credentials for the Lookups, a TLS config for the Owners) is
// passed through in one place.

// ownerTransports returns the transports to the Owners: one for HTTP, one
// for gRPC (HTTP/2 with prior knowledge). Config.Transport, if set, is
// both.
func (cfg *Config) ownerTransports() (http1, grpc http.RoundTripper) {
	if cfg.Transport != nil {
		return cfg.Transport, cfg.Transport
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConnsPerHost = 256
	h2 := http.DefaultTransport.(*http.Transport).Clone()
	h2.Proxy = nil
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetUnencryptedHTTP2(true)
	return t, h2
}

// lookupConfig returns the configuration of a namespace's Lookup.
func (cfg *Config) lookupConfig(namespace string, onLoss func(lookup.Loss)) lookup.Config {
	return lookup.Config{Manager: cfg.Manager, Namespace: namespace, Timing: cfg.Timing, Logger: cfg.Logger, OnLoss: onLoss}
}
