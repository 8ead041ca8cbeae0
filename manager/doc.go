// Package manager runs the Manager of leasehold: the service that hands
// Owners exclusive leases on ranges of a key space and keeps Lookups in
// step with the lease table (the Centrifuge Manager, docs/design.md).
//
// A Server is one replica of the Manager. A group of replicas elects a
// leader with Raft; the leader runs the lease rules (internal/lease) and
// answers an Owner only once what it decided has committed, so a new
// leader can carry every lease on (docs/design.md rules 8 to 10). A
// follower relays Owners' streams to the leader and serves Lookups from
// its own copy while it is caught up.
//
// The package is the Manager's face: Config and its Validate, Server and
// its gRPC services (Leases for Owners, Lookups, Admin for operators, Raft
// between replicas), the status a Server publishes (Snapshot), its metrics
// and its health handler. The lease rules, the replicated state and the
// Raft node are internal; the leasehold command (leasehold manager) is the
// usual way to run a Server.
//
// # Usage
//
// Fill in a Config, make a Server and serve it on a listener until the
// context ends:
//
//	srv, err := manager.NewServer(manager.Config{
//		Certs:   src,                // mutual TLS (certs.Source); or Insecure: true on loopback
//		DataDir: "/var/lib/leasehold", // survive restarts with the same epoch
//		ID:      1,
//		Peers:   []manager.Peer{{ID: 1, Addr: "m1:7400"}, {ID: 2, Addr: "m2:7400"}, {ID: 3, Addr: "m3:7400"}},
//	})
//	if err != nil {
//		return err // a *leasehold.ConfigError names the field at fault
//	}
//	lis, err := net.Listen("tcp", ":7400")
//	if err != nil {
//		return err
//	}
//	return srv.Serve(ctx, lis)
//
// Serve runs the replica's loop and the gRPC server together. An embedder
// with its own gRPC server calls Register and GRPCOptions instead, and
// runs Run itself. Snapshot reads the published status; Collector exports
// it to Prometheus, HandleHealth serves /healthz and /readyz.
//
// The zero Config (with Insecure) is a one-replica Manager that keeps its
// state in memory, serving the default namespace (protocol.DefaultNamespace)
// with production timings. Every replica of a group must be given the same
// Timing, Namespaces, policies and read-lease settings; Validate fills in
// the defaults and refuses unsafe timings (protocol.Timing.Validate).
package manager
