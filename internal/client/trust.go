package client

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/certs"
)

// Trust is how a client library dials the Manager: the TLS fields of
// owner.Config and lookup.Config.
type Trust struct {
	DialOptions []grpc.DialOption
	TLS         *tls.Config
	CertsDir    string
	Role        certs.Role
	Name        string // the certificate's name; "" when the directory holds one of Role
	Insecure    bool
}

// Options returns the dial options for the Manager replicas at addrs:
// DialOptions as they are; else mutual TLS with TLS, or with the
// certificate of Role in CertsDir (re-read when it changes); else
// plaintext, when Insecure. With none of them it refuses: plaintext is
// only ever chosen explicitly, since it sends the Owner's leases, or reads
// the table, in the clear to anyone on the path, and a Manager with
// certificates refuses it anyway. pkg prefixes the errors ("owner"). With CertsDir it also returns
// the Source opened there, for the caller to watch (Source.Watch) and to
// export its expiry.
func (t Trust) Options(pkg string, addrs []string) ([]grpc.DialOption, *certs.Source, error) {
	switch {
	case len(t.DialOptions) > 0:
		return t.DialOptions, nil, nil
	case t.TLS != nil:
		return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(t.TLS))}, nil, nil
	case t.CertsDir != "":
		src, err := certs.Open(t.CertsDir, t.Role, t.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: Config.CertsDir: %w", pkg, err)
		}
		return []grpc.DialOption{certs.DialOption(src)}, src, nil
	case t.Insecure:
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil, nil
	}
	return nil, nil, t.Check(pkg, addrs)
}

// Check reports a Trust that chooses nothing, the error Options returns for
// it: with none of DialOptions, TLS, CertsDir and Insecure a client has no
// way to dial.
func (t Trust) Check(pkg string, addrs []string) error {
	if len(t.DialOptions) > 0 || t.TLS != nil || t.CertsDir != "" || t.Insecure {
		return nil
	}
	return fmt.Errorf("%s: no TLS setting for the Manager at %s: set Config.TLS or Config.CertsDir for mutual TLS, or Config.Insecure: true to dial it in plaintext", pkg, strings.Join(addrs, ","))
}

// Loopback reports whether addr (host:port) names this machine's loopback
// interface: localhost, 127.0.0.0/8 or ::1.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
