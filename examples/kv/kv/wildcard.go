package kv

import (
	"fmt"
	"net"
)

// wildcard reports whether addr, host:port, names no host: ":8001",
// "0.0.0.0:8001", "[::]:8001". A server listening there serves every
// interface, but the address is no name for it: every server started with
// the same arguments (the pods of a Deployment) would share it.
func wildcard(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// checkWildcards refuses what would give every server of a Deployment one
// ID, or advertise an address no other host reaches: a wildcard Listen
// without an ID or an Advertise of its own, and a wildcard ID or Advertise.
func checkWildcards(cfg ServerConfig) error {
	switch {
	case wildcard(cfg.ID):
		return fmt.Errorf("kv: the ID %q is a wildcard address, which every server listening there would share: give each server its own (in Kubernetes, the pod's name)", cfg.ID)
	case wildcard(cfg.Advertise):
		return fmt.Errorf("kv: the advertised address %q is a wildcard, which no client can dial: give the address clients reach this server at (in Kubernetes, the pod's IP and the port)", cfg.Advertise)
	case wildcard(cfg.Listen) && cfg.ID == "":
		return fmt.Errorf("kv: listening on %s (every interface), the server needs an ID of its own (--id; in Kubernetes, the pod's name): the listen address would be every server's", cfg.Listen)
	case wildcard(cfg.Listen) && cfg.Advertise == "":
		return fmt.Errorf("kv: listening on %s (every interface), the server needs the address clients reach it at (--advertise; in Kubernetes, the pod's IP and the port)", cfg.Listen)
	}
	return nil
}
