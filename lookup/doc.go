// Package lookup is the Lookup library: link it into a frontend to route each
// request to the server that owns its key, and to learn when soft state was
// lost so clients can republish it (C§2.2, P§2.1, P§4.2).
//
// # Usage
//
//	l, err := lookup.New(ctx, lookup.Config{
//		Connection: leasehold.Connection{
//			Manager:  "127.0.0.1:7400",
//			CertsDir: "/etc/leasehold/certs", // a lookup certificate and ca.crt
//		},
//		OnLoss: func(loss lookup.Loss) {
//			// Tell the clients whose state lay in loss.Ranges to republish.
//		},
//	})
//	if err != nil { ... }
//	defer l.Close()
//	_ = l.WaitSynced(ctx) // optional: wait for the first copy of the table
//
//	route, ok := l.Lookup(keyspace.KeyOf("alice")) // a local read: ~10 ns
//	if !ok { /* no owner right now: retry after a short backoff */ }
//	send(route.Addr, request)
//
// For a replicated Manager, give every replica's address, comma-separated
// (or in Config.Managers):
//
//	Manager: "10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400",
//
// Any replica that is caught up serves Lookups, so the Lookup keeps its one
// sync stream with the first that does. It starts with the first address.
// A replica that refuses (it lags the leader) names the leader, and the
// Lookup reconnects there at once, even to an address not in the list. A
// replica that cannot be reached, or knows no leader, is skipped for the
// next address at once; only after every address has failed in a row does
// the Lookup wait, with a backoff of up to 2 s, before the next round. Its
// copy carries over from replica to replica: they serve the same table.
//
// # The caller's duties
//
//   - Lookup returns a hint (C§3.1). The owner may have moved; its Owner
//     library rejects the request, and the caller retries after a short
//     backoff. When the system is quiet, every hint is right.
//   - Act on loss notifications: a Loss means the soft state of those keys
//     may be gone. A Loss with All set means the Lookup lost touch with the
//     Manager for longer than the Manager's SyncTimeout and cannot vouch for
//     anything; it repeats while the Lookup stays cut off.
//   - Age says how old the copy is. A copy older than a copy in touch ever
//     is (CopyAge.Stale) still routes right as far as it goes, since an
//     Owner that lost a lease refuses, but it may miss changes: a frontend
//     can say so to its clients, or a balancer can prefer one in touch.
//   - OnLoss and OnUpdate are called in order, on one goroutine, never
//     concurrently; the copy that Lookup reads is already updated when they
//     run. They must not block for long: later notifications wait behind them.
//
// # Guarantee
//
// Recovery notification: every loss of an owner's soft state that the
// Manager records at time T is delivered to OnLoss before
// T + SyncTimeout × (1 + MaxDrift) (78.75 s with production timings), and
// typically within a few network delays, since changes are pushed
// (docs/protocol.md).
//
// # The core
//
// Core is the library's deterministic state machine (no goroutines, sockets
// or clock reads); New runs one inside its runtime. It is exported for the
// callers outside this package that drive it without a runtime: the
// simulation (internal/sim), which runs many Lookup cores under a virtual
// clock, over a network that loses and reorders messages, and checks the
// guarantees on them, so that what it checks is the code New runs; and tests
// (internal/wire's drift test drives a Lookup core). Hiding it behind an
// internal package would split the library in two for them. An application
// uses New; Core (with CoreConfig) is for a runtime of one's own, another
// transport or clock, which then owns the duties New carries out
// (docs/design.md, "Cores and runtimes").
package lookup
