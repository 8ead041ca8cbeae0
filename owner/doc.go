// Package owner is the Owner library: link it into a server that keeps state
// in memory, and the Manager gives the server exclusive, leased ranges of the
// key space (C§2.3, P§4.3). The server never asks for a key; it checks what
// it was given.
//
// # Usage
//
//	o, err := owner.New(ctx, owner.Config{
//		Connection: leasehold.Connection{
//			Manager:  "127.0.0.1:7400",       // the Manager
//			CertsDir: "/etc/leasehold/certs", // owner.kv-1.crt and ca.crt
//		},
//		ID:   "kv-1",          // unique, stable across restarts
//		Addr: "10.0.0.7:8080", // where frontends reach this server
//	})
//	if err != nil { ... }
//	defer o.Close(ctx) // hands the ranges back at once
//
// For a replicated Manager, give every replica's address, comma-separated
// (or in Config.Managers):
//
//	Manager: "10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400",
//
// Only the leader serves Owners, and the Owner keeps one lease stream open,
// to the leader. It starts with the first address. A replica that is not
// the leader refuses the stream naming the leader, and the Owner reconnects
// there at once, even to an address not in the list (the group grew). A
// replica that cannot be reached, or knows no leader, is skipped for the
// next address at once; only after every address has failed in a row does
// the Owner wait, with a backoff of up to 2 s, before the next round. It
// logs each switch at Info ("following leader at ADDR"). A new leader
// renews the leases its predecessor granted, under the same LeaseNums, so a
// failover is invisible to CheckLeaseNow and CheckLeaseContinuous.
//
// Serve every request with the five steps of P§2.2 (Figure 4):
//
//	func (s *Server) Put(key string, value []byte) error {
//		k := keyspace.KeyOf(key)
//		n, ok := s.owner.CheckLeaseNow(k) // (1) is this the right server?
//		if !ok {
//			return ErrNotOwner // the frontend retries after a short backoff
//		}
//		s.mu.Lock()
//		// (2) validate stored state: state stored under another lease is stale
//		// (3) operate, and store the lease number with what you store
//		s.items[key] = item{value: value, lease: n}
//		s.mu.Unlock()
//		if !s.owner.CheckLeaseContinuous(k, n) { // (4) did the lease cover it all?
//			return ErrNotOwner
//		}
//		return nil // (5) expose the result
//	}
//
// # The caller's duties
//
//   - Check before acting and after: CheckLeaseNow before, CheckLeaseContinuous
//     before anything leaves the server. Both are local reads (no message, no
//     lock, no allocation), so there is no reason to skip them.
//   - Keep the LeaseNum with stored state, and treat state stored under any
//     other LeaseNum as lost: a new LeaseNum means another server may have
//     held the key in between (C§3.2).
//   - Never rely on OnChange for correctness: it reports changes after they
//     happen, on its own goroutine (P§2.2). It is for warming and cleaning
//     up. It is called in order, on one goroutine, never concurrently.
//   - Give each server a unique ID. A restarted server may reuse its ID: it
//     starts a new incarnation, and the Manager reports its old state lost.
//
// # Standbys
//
// In a namespace with standbys (leasehold manager --standbys NS=1) the
// Manager pairs each lease with a standby Owner in another zone
// (Config.Zone), and promotes the standby, with no loss notification, when
// the holder's lease ends without a handover. The application moves the
// bytes: as holder it sends each write to StandbyOf's standby and
// acknowledges it only after CheckReplicated; as standby it stores only
// what CheckStandbyWrite accepts, and calls InSync once filled; a grant
// marked Promoted serves the copy kept. OnChange reports new pairings
// (OwnershipChange.Paired) and the leases stood by for (StandbyFor).
// standby.go and docs/standbys.md have the details; Example_standby the
// shape.
//
// # Guarantees
//
// Single copy: at no instant do two Owners believe they hold the same key,
// given clock rates within the Manager's MaxDrift of each other
// (docs/protocol.md). A lease runs from when the Owner sent the request that
// earned it, on the Owner's monotonic clock, for the Manager's OwnerLease;
// Owners adopt the Manager's timings, so they cannot disagree unsafely.
//
// # The core
//
// Core is the library's deterministic state machine (no goroutines, sockets
// or clock reads); New runs one inside its runtime. It is exported for the
// callers outside this package that drive it without a runtime: the
// simulation (internal/sim), which runs many Owner cores under a virtual
// clock, over a network that loses and reorders messages, and checks the
// guarantees on them, so that what it checks is the code New runs; and tests
// (the Manager core's tests in internal/replica drive Owner cores against
// it). Hiding it behind an internal package would split the library in two
// for them. An application uses New; Core (with CoreConfig) is for a runtime
// of one's own, another transport or clock, which then owns the duties New
// carries out (docs/design.md, "Cores and runtimes").
package owner
