// Package leasehold holds what the Owner and Lookup libraries share in
// their configuration: Connection, how a client reaches the Manager (its
// replicas' addresses, the namespace, the timings, the credentials, the
// logger and the metrics registry), embedded in owner.Config and
// lookup.Config; and ConfigError, the error Config.Validate of owner,
// lookup and gateway returns for a field it refuses.
//
// The libraries themselves are the packages below: owner (the servers
// that hold leases), lookup (the frontends that route by them), gateway
// (a proxy built on lookup) and manager (the service that hands the
// leases out). docs/design.md describes the layout.
//
// # Usage
//
//	conn := leasehold.Connection{
//		Manager:  "10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400",
//		CertsDir: "/etc/leasehold/certs",
//	}
//	o, err := owner.New(ctx, owner.Config{Connection: conn, ID: "kv-1", Addr: "10.0.1.1:8080"})
//	…
//	l, err := lookup.New(ctx, lookup.Config{Connection: conn})
package leasehold

import (
	"crypto/tls"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/protocol"
)

// Connection is how an Owner or a Lookup reaches the Manager: the settings
// owner.Config and lookup.Config share, embedded in both, so their fields
// are set as cfg.Manager, cfg.Insecure and so on. Each library's Config
// says what its stream does with them (the Owner's lease stream follows the
// leader; a Lookup's sync stream is served by any replica).
type Connection struct {
	// Manager is the Manager's address, host:port, or the addresses of
	// the replicas of a replicated Manager, comma-separated
	// ("10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400"). The client keeps one
	// stream open: it starts with the first address, follows the leader a
	// replica names when it refuses the stream (even one not listed), and
	// otherwise tries the addresses in turn. A replica that leaves a
	// request unanswered for the answer wait is left for the next
	// (docs/protocol.md, "Liveness"). Manager or Managers is required.
	Manager string
	// Managers lists more addresses, one per entry, after those in Manager;
	// repeats are dropped. Each must be host:port (or a gRPC target such
	// as "dns:///manager.example:7400").
	Managers []string
	// Namespace is the key space to join or follow; empty means "default".
	Namespace string
	// Timing is used until the Manager's timings arrive with its first
	// answer; the zero value means protocol.Production().
	Timing protocol.Timing
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// DialOptions replace the default gRPC dial options, for every Manager
	// replica; they must include credentials. They override the TLS fields.
	DialOptions []grpc.DialOption
	// TLS dials the Manager replicas with this configuration (mutual TLS
	// with a certificate from the group's CA; docs/security.md).
	TLS *tls.Config
	// CertsDir, when TLS is nil, is the certificates directory to dial
	// with: the client's certificate (an Owner's of its ID, owner.<ID>.crt;
	// a Lookup's, lookup.<CertName>.crt) and the CA's, re-read when they
	// change so that certificates are rotated without a restart. The
	// Manager's replicas must present replica certificates naming the host
	// dialled.
	CertsDir string
	// Insecure dials the Manager in plaintext, for a Manager run without
	// certificates (tests, loopback demos). Plaintext is only ever chosen
	// explicitly: with none of DialOptions, TLS, CertsDir and Insecure, New
	// returns an error that names them.
	Insecure bool
	// Registerer, if set, receives the client's Prometheus metrics (each
	// library's metrics.go), labelled with the namespace, and the expiry
	// of the certificate in CertsDir. New fails if they cannot be
	// registered (the same client twice on one registry).
	Registerer prometheus.Registerer
}

// A ConfigError is a field of a Config that Validate (and so New)
// refuses. Package is the package whose Config it is ("owner", "lookup",
// "gateway"); Field names the field as a user writes it ("ID", "Manager",
// "Managers[1]", "Routes[0]"); Why says what is wrong with it, with the
// value and the limit, or Err, when there is a cause of its own (an
// address that does not parse), is that cause. The message reads
// "owner: Config.ID is required" or "owner: Config.Manager: address
// "manager-2" is not host:port".
type ConfigError struct {
	Package string
	Field   string
	Why     string
	Err     error
}

func (e *ConfigError) Error() string {
	if e.Err != nil {
		return e.Package + ": Config." + e.Field + ": " + e.Err.Error()
	}
	return e.Package + ": Config." + e.Field + " " + e.Why
}

func (e *ConfigError) Unwrap() error { return e.Err }
