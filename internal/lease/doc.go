// Package lease is the paper's Manager: the lease rules of the Centrifuge
// Manager (docs/design.md rules 1 to 12 and 15) as a deterministic Core over
// a replicated State. The Core takes clock readings and Owners' lease
// requests and answers with a Round: the Changes to record in the State and
// the messages to send once they are recorded. It opens no sockets, starts
// no goroutines, reads no clock and knows nothing of how its State is
// replicated; internal/replica runs it on the leader of a group of
// replicas, and internal/sim runs it in the simulation.
//
// Its files are named by the rules they enforce:
//
//   - core.go: the Core, its sessions and namespaces, and how a Round is made.
//   - state.go: the replicated State and its Changes (rule 8).
//   - core_limits.go, core_orphans.go, core_rebalance.go,
//     core_reservations.go: the limits on Owners and ranges, orphaned
//     grants of earlier incarnations, load-aware rebalancing, and the
//     reservations that keep a key from two holders.
//   - core_broken.go: the broken twins of the rules, for the simulation.
//   - ordered.go: the sorted sets the timers and reservations are kept in.
package lease
