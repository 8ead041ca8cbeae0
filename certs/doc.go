// Package certs is leasehold's trust boundary: the certificates that bind
// every process of a group to an identity and a role, and the TLS
// configurations that check them.
//
// One CA signs every certificate of a group. A certificate carries its
// holder's identity in URI SANs (see Identity): its role (replica, owner,
// lookup, operator), its name (a replica's Raft ID, an Owner's ID) and, for
// an Owner, the namespaces it may hold leases in. The Manager reads the
// identity of each caller from its certificate and refuses what the role
// does not allow (docs/security.md); a replica drops Raft messages whose
// sender is not the replica its certificate names.
//
// # Usage
//
// Create the material once (the leasehold cert commands do the same):
//
//	ca, _ := certs.CreateCA(dir, "", 0, false)
//	certs.Create(dir, ca, certs.Identity{Role: certs.Replica, Name: "1"}, []string{"10.0.0.1"}, 0)
//	certs.Create(dir, ca, certs.Identity{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}}, []string{"10.0.1.1"}, 0)
//
// and in each process open its own certificate:
//
//	src, err := certs.Open(dir, certs.Owner, "kv-1")
//	cfg := owner.Config{..., TLS: src}
//
// A Source re-reads the files when they change, so replacing a
// certificate, or the CA (ca.crt may hold the old and the new CA while
// certificates are replaced), needs no restart. Watch logs a warning before
// the certificate expires, and Collector exports the time left.
package certs
