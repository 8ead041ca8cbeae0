package bench

import (
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/certs"
)

// loopbackTrust is the trust boundary of a loopback run with --tls: a
// throwaway CA in a temporary directory that signs the Manager's replica
// certificate (for 127.0.0.1), an operator certificate for the driver to
// read the Manager's metrics with, one Owner certificate per Owner ID (its
// namespace the default one) and one Lookup certificate per Lookup slot,
// so every client shakes hands with a certificate of its own, as in
// production. A nil *loopbackTrust is plaintext.
type loopbackTrust struct {
	dir string
}

// lookupName names the certificate of Lookup slot j (a restarted Lookup
// reuses its slot's).
func lookupName(j int) string { return fmt.Sprintf("lookup-%05d", j) }

// newLoopbackTrust issues the certificates of a point with the given
// Owners and Lookups.
func newLoopbackTrust(owners, lookups int) (*loopbackTrust, error) {
	dir, err := os.MkdirTemp("", "leasehold-loopback-certs")
	if err != nil {
		return nil, err
	}
	t := &loopbackTrust{dir: dir}
	ca, err := certs.CreateCA(dir, "", 24*time.Hour, false)
	if err != nil {
		t.close()
		return nil, err
	}
	// The replica, and the operator the driver reads the Manager's metrics
	// as (loopback_metrics.go).
	// Replicas 1 to maxReplicaID: the leader, and read replicas
	// (loopback_replica.go).
	ids := []certs.Identity{{Role: certs.Operator, Name: "bench"}}
	for id := 1; id <= maxReplicaID; id++ {
		ids = append(ids, certs.Identity{Role: certs.Replica, Name: fmt.Sprint(id)})
	}
	for k := range owners {
		ids = append(ids, certs.Identity{Role: certs.Owner, Name: ownerID(k), Namespaces: []string{"default"}})
	}
	for j := range lookups {
		ids = append(ids, certs.Identity{Role: certs.Lookup, Name: lookupName(j)})
	}
	for _, id := range ids {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 24*time.Hour); err != nil {
			t.close()
			return nil, fmt.Errorf("issuing the certificate of %s: %w", id, err)
		}
	}
	return t, nil
}

// managerArgs are the Manager's flags for its listener: its certificates,
// or plaintext.
func (t *loopbackTrust) managerArgs() []string {
	if t == nil {
		return []string{"--insecure"}
	}
	return []string{"--certs-dir", t.dir}
}

// creds returns the client credentials of the certificate of role and
// name: mutual TLS with it, expecting a replica at the other end; nil when
// plaintext.
func (t *loopbackTrust) creds(role certs.Role, name string) (credentials.TransportCredentials, error) {
	if t == nil {
		return nil, nil
	}
	src, err := certs.Open(t.dir, role, name)
	if err != nil {
		return nil, err
	}
	return certs.ClientCredentials(src, certs.Replica), nil
}

func (t *loopbackTrust) close() {
	if t != nil {
		_ = os.RemoveAll(t.dir)
	}
}
