package cli

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/client"
)

// InsecureEnv, set to 1 or true, is --insecure for every subcommand.
const InsecureEnv = "LEASEHOLD_INSECURE"

// trustOptions are the flags that say how a subcommand proves who it is:
// the certificates directory, or plaintext when asked for.
type trustOptions struct {
	certsDir string
	insecure bool
	src      *certs.Source // opened by dial or serve
	flags    *pflag.FlagSet
}

func (t *trustOptions) addTrustFlags(f *pflag.FlagSet, e *env) {
	t.flags = f
	f.StringVar(&t.certsDir, "certs-dir", e.getenv(certs.DirEnv),
		"use the CA and certificate in `DIR` for mutual TLS (leasehold cert creates them; $"+certs.DirEnv+" sets the default)")
	v := e.getenv(InsecureEnv)
	f.BoolVar(&t.insecure, "insecure", v == "1" || v == "true",
		"speak plaintext, with no certificates: anyone who reaches the Manager may do anything ($"+InsecureEnv+"=1 sets it)")
}

// clientRoles are the certificates a client subcommand may present, in
// order of preference: the operator's allows everything a client may do.
var clientRoles = []certs.Role{certs.Operator, certs.Lookup, certs.Owner}

// dialOptions returns the options to dial a Manager with: the first
// certificate of clientRoles found in the certificates directory, or
// plaintext with --insecure.
func (t *trustOptions) dialOptions() ([]grpc.DialOption, error) {
	t.resolve()
	if t.insecure {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	if t.src == nil {
		src, err := t.open(clientRoles...)
		if err != nil {
			return nil, err
		}
		t.src = src
	}
	return []grpc.DialOption{certs.DialOption(t.src)}, nil
}

// resolve lets a flag given on the command line win over the environment:
// --certs-dir over $LEASEHOLD_INSECURE (--insecure over
// $LEASEHOLD_CERTS_DIR needs nothing: insecure is checked first).
func (t *trustOptions) resolve() {
	if t.flags != nil && t.flags.Changed("certs-dir") && !t.flags.Changed("insecure") {
		t.insecure = false
	}
}

// open opens the first certificate of the roles found in the directory.
func (t *trustOptions) open(roles ...certs.Role) (*certs.Source, error) {
	if t.certsDir == "" {
		return nil, usagef("no certificates: pass --certs-dir DIR or set $%s (leasehold cert create-ca makes one), or --insecure to speak plaintext", certs.DirEnv)
	}
	var first error
	for _, r := range roles {
		src, err := certs.Open(t.certsDir, r, "")
		if err == nil {
			return src, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// dial connects to the Manager replica at addr.
func (t *trustOptions) dial(addr string) (*grpc.ClientConn, error) {
	opts, err := t.dialOptions()
	if err != nil {
		return nil, err
	}
	return client.Dial(addr, opts)
}

// warnInsecure logs, loudly, a plaintext listener on a network address.
func warnInsecure(log *slog.Logger, addr string) {
	if !client.Loopback(addr) {
		log.Error("PLAINTEXT ON A NETWORK ADDRESS (--insecure): anyone who can reach it can act as any Owner, replica or operator; see docs/security.md", "addr", addr)
	}
}

// keepFresh reloads src on SIGHUP and when its files change, and warns
// before its certificate expires, until ctx ends.
func keepFresh(ctx context.Context, src *certs.Source, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := src.Reload(); err != nil {
					log.Error("SIGHUP: certificates cannot be loaded; keeping the old ones", "err", err)
				} else {
					log.Info("SIGHUP: certificates reloaded", "identity", src.Identity().String(), "expires", src.NotAfter())
				}
			}
		}
	}()
	go src.Watch(ctx, log, 0)
}
