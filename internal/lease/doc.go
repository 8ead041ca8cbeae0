// Package lease is the paper's Manager: the lease rules of the Centrifuge
// Manager (docs/design.md rules 1 to 13, 16 and 18) as a deterministic Core over
// a replicated State. The Core takes clock readings and Owners' lease
// requests and answers with a Round: the Changes to record in the State and
// the messages to send once they are recorded. It opens no sockets, starts
// no goroutines, reads no clock and knows nothing of how its State is
// replicated; internal/replica runs it on the leader of a group of
// replicas, and internal/sim runs it in the simulation.
//
// Its files are named by the rules they enforce, each file's comment
// naming its rules in docs/design.md:
//
//   - core.go: the Core, its sessions and namespaces, and the Round (rule 8).
//   - state.go: the replicated State and its Changes (rule 8).
//   - request.go: a lease request's way in, and the race filter (rules 1,
//     11, 16 and 18).
//   - renew.go: the answer to an Owner, which renews what it lists and
//     recalls what it omits (rules 2, 4, 6 and 16).
//   - grant.go: grants under fresh LGNs (rules 3 and 5).
//   - release.go and orphans.go: releases, and an earlier incarnation's
//     ranges (rules 7 and 11).
//   - expiry.go: the timers, and a range freed when its reservation ends
//     (rules 3 and 12).
//   - handover.go and rebalance.go: handovers, migrations, drains and the
//     desired assignment (rule 13).
//   - takeover.go and reservations.go: a new Manager or leader reserves
//     everything before it grants (rules 3, 9 and 10).
//   - limits.go: the limits on Owners and ranges.
//   - broken.go: the broken twins of the rules, for the simulation.
//   - ordered.go: the sorted sets the timers and reservations are kept in.
package lease
