package runtime

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
// plaintext, when Insecure or when every address is a loopback one. A
// plaintext dial to another machine without Insecure is refused: it would
// send the Owner's leases, or read the table, in the clear to anyone on the
// path. pkg prefixes the errors ("owner"). With CertsDir it also returns
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
	for _, a := range addrs {
		if !Loopback(a) {
			return nil, nil, fmt.Errorf("%s: the Manager at %s is not on this machine and no TLS is configured: set Config.CertsDir (or Config.TLS), or Config.Insecure to dial it in plaintext", pkg, a)
		}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil, nil
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
