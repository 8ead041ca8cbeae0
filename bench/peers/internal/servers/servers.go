// Package servers runs the two servers the etcd comparison measures, each
// meant to be the only thing in its process so that the process's CPU time
// is the server's.
package servers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/certs"

	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TimingForRenew returns protocol.Production() scaled so that Renew is
// renew: every timer keeps its production ratio to Renew (production renews
// every 15 s, so renew = 1s gives OwnerLease 4s, ManagerLease 4.33s, Sync 2s,
// SyncTimeout 5s, LogRetention 20s).
func TimingForRenew(renew time.Duration) protocol.Timing {
	p := protocol.Production()
	scale := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * float64(renew) / float64(p.Renew))
	}
	return protocol.Timing{
		OwnerLease:   scale(p.OwnerLease),
		Renew:        renew,
		ManagerLease: scale(p.ManagerLease),
		MaxDrift:     p.MaxDrift,
		Sync:         scale(p.Sync),
		SyncTimeout:  scale(p.SyncTimeout),
		LogRetention: scale(p.LogRetention),
		BackoffMin:   scale(p.BackoffMin),
		BackoffMax:   scale(p.BackoffMax),
	}
}

// RunLeasehold serves a leasehold Manager with timing t on listen until ctx
// ends. ready is called with the address once it listens. With certsDir it
// serves mutual TLS with replica 1's certificate there (MakeCerts).
func RunLeasehold(ctx context.Context, listen string, t protocol.Timing, certsDir string, ready func(addr string)) error {
	cfg := manager.Config{Insecure: certsDir == "", Timing: t}
	if certsDir != "" {
		src, err := certs.Open(certsDir, certs.Replica, "1")
		if err != nil {
			return err
		}
		cfg.Certs = src
	}
	srv, err := manager.NewServer(cfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ready(lis.Addr().String())
	return srv.Serve(ctx, lis)
}

// RunEtcd runs a single-member embedded etcd with its data in dir, serving
// clients on listen (host:port; port 0 picks one), until ctx ends. ready is
// called with the client address once the server is ready. fsync stays on,
// as in production. With certsDir it serves clients mutual TLS (client
// certificate required) with the same certificate as the leasehold
// Manager's.
func RunEtcd(ctx context.Context, dir, listen, certsDir string, ready func(addr string)) error {
	clientAddr, err := freeAddr(listen)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(clientAddr)
	peerAddr, err := freeAddr(net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	cu := url.URL{Scheme: "http", Host: clientAddr}
	if certsDir != "" {
		cu.Scheme = "https"
	}
	pu := url.URL{Scheme: "http", Host: peerAddr}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if certsDir != "" {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       filepath.Join(certsDir, "replica.1.crt"),
			KeyFile:        filepath.Join(certsDir, "replica.1.key"),
			TrustedCAFile:  filepath.Join(certsDir, certs.CAFile),
			ClientCertAuth: true,
		}
	}
	cfg.LogLevel = "fatal" // its shutdown logs errors; start-up failures are returned
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd: not ready after 60s")
	}
	ready(clientAddr)
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// freeAddr resolves a port-0 address to a free port (briefly racy, fine
// on a benchmark machine).
func freeAddr(listen string) (string, error) {
	if _, port, err := net.SplitHostPort(listen); err != nil || port != "0" {
		return listen, err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// MakeCerts makes, in dir, a CA and the certificates of the comparison:
// replica 1 (also the etcd server's) at 127.0.0.1, the owners named by
// ownerIDs, and one lookup (also every etcd client's).
func MakeCerts(dir string, ownerIDs []string) error {
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		return err
	}
	ids := []certs.Identity{{Role: certs.Replica, Name: "1"}, {Role: certs.Lookup, Name: "bench"}}
	for _, id := range ownerIDs {
		ids = append(ids, certs.Identity{Role: certs.Owner, Name: id, Namespaces: []string{protocol.DefaultNamespace}})
	}
	for _, id := range ids {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 0); err != nil {
			return err
		}
	}
	return nil
}

// ClientTLS is the TLS configuration of an etcd client: the lookup's
// certificate, the CA of dir, the server checked as 127.0.0.1.
func ClientTLS(dir string) (*tls.Config, error) {
	return transport.TLSInfo{
		CertFile:      filepath.Join(dir, "lookup.bench.crt"),
		KeyFile:       filepath.Join(dir, "lookup.bench.key"),
		TrustedCAFile: filepath.Join(dir, certs.CAFile),
		ServerName:    "127.0.0.1",
	}.ClientConfig()
}
