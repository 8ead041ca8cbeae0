package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Role is what a certificate allows its holder to do in a leasehold group.
type Role string

// The roles. Each certificate names exactly one.
const (
	// Replica: a Manager replica. It serves every client and speaks Raft
	// to the other replicas; its name is its Raft ID.
	Replica Role = "replica"
	// Owner: a server that holds leases, in the namespaces its
	// certificate names; its name is its Owner ID.
	Owner Role = "owner"
	// Lookup: a frontend that follows the lease table (sync) and reads the
	// status.
	Lookup Role = "lookup"
	// Operator: a person or tool that runs the group: status, drain,
	// cluster add and remove, backup.
	Operator Role = "operator"
)

var roles = []Role{Replica, Owner, Lookup, Operator}

// Scheme is the URI scheme of the SANs that carry an identity.
const Scheme = "leasehold"

// Identity is who a certificate speaks for. It is carried in the
// certificate's URI SANs:
//
//	leasehold://<role>/<name>        exactly one: the role and the name
//	leasehold://namespace/<ns>       one per namespace the holder may use
//
// The name is path-escaped (url.PathEscape). A replica's name is its Raft
// ID in decimal; an Owner's is its Owner ID, the one it registers with. An
// Owner certificate must name at least one namespace; a Lookup or Operator
// certificate that names none may use every namespace. Other SANs (the DNS
// names and IP addresses a replica or an Owner serves at) are ordinary
// host names for the client to check.
type Identity struct {
	Role       Role
	Name       string
	Namespaces []string // empty: every namespace (never for an Owner)
}

// String describes the identity for errors and logs: `owner "kv-1"
// (namespaces default, mail)`.
func (id Identity) String() string {
	s := fmt.Sprintf("%s %q", id.Role, id.Name)
	if len(id.Namespaces) > 0 {
		s += " (namespaces " + strings.Join(id.Namespaces, ", ") + ")"
	}
	return s
}

// MayUse reports whether the identity may act in namespace ns.
func (id Identity) MayUse(ns string) bool {
	if len(id.Namespaces) == 0 {
		return id.Role != Owner
	}
	return slices.Contains(id.Namespaces, ns)
}

// ReplicaID returns a replica's Raft ID.
func (id Identity) ReplicaID() (uint64, error) {
	if id.Role != Replica {
		return 0, fmt.Errorf("certs: %s is not a replica", id)
	}
	n, err := strconv.ParseUint(id.Name, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("certs: replica name %q is not a Raft ID", id.Name)
	}
	return n, nil
}

// Validate checks that the identity can be put in a certificate.
func (id Identity) Validate() error {
	if !slices.Contains(roles, id.Role) {
		return fmt.Errorf("certs: unknown role %q (want replica, owner, lookup or operator)", id.Role)
	}
	if id.Name == "" {
		return fmt.Errorf("certs: a %s needs a name", id.Role)
	}
	if id.Role == Replica {
		if _, err := id.ReplicaID(); err != nil {
			return err
		}
	}
	if id.Role == Owner && len(id.Namespaces) == 0 {
		return fmt.Errorf("certs: owner %q needs at least one namespace", id.Name)
	}
	if id.Role == Replica && len(id.Namespaces) > 0 {
		return errors.New("certs: a replica's certificate names no namespace")
	}
	for _, ns := range id.Namespaces {
		if ns == "" {
			return fmt.Errorf("certs: %s: an empty namespace", id)
		}
	}
	return nil
}

// URIs returns the SANs that carry the identity.
func (id Identity) URIs() []*url.URL {
	us := []*url.URL{{Scheme: Scheme, Host: string(id.Role), Path: "/" + id.Name}}
	for _, ns := range id.Namespaces {
		us = append(us, &url.URL{Scheme: Scheme, Host: "namespace", Path: "/" + ns})
	}
	return us
}

// IdentityOf reads the identity a certificate carries. It does not verify
// the certificate: Verify does both.
func IdentityOf(c *x509.Certificate) (Identity, error) {
	var id Identity
	for _, u := range c.URIs {
		if u.Scheme != Scheme {
			continue
		}
		name := strings.TrimPrefix(u.Path, "/")
		if name == "" || strings.Contains(name, "/") {
			return Identity{}, fmt.Errorf("certs: certificate %q has a malformed identity %q", c.Subject.CommonName, u.String())
		}
		if u.Host == "namespace" {
			id.Namespaces = append(id.Namespaces, name)
			continue
		}
		r := Role(u.Host)
		if !slices.Contains(roles, r) {
			return Identity{}, fmt.Errorf("certs: certificate %q names an unknown role %q", c.Subject.CommonName, u.Host)
		}
		if id.Role != "" {
			return Identity{}, fmt.Errorf("certs: certificate %q names two identities", c.Subject.CommonName)
		}
		id.Role, id.Name = r, name
	}
	if id.Role == "" {
		return Identity{}, fmt.Errorf("certs: certificate %q carries no leasehold identity (a %s://<role>/<name> URI SAN)", c.Subject.CommonName, Scheme)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}
