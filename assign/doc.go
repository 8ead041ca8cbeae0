// Package assign holds leasehold's assignment policy: the rule by which the
// Manager turns a set of live owners into a desired assignment of key ranges
// to owners. PRS keeps this rule in "a single pluggable module" (P§4.1) so
// that it can be swapped — for fixed hashing in tests, for load-driven moves
// later — without touching the lease protocol. Here the module is the Policy
// interface: a pure, deterministic function from members to an Assignment.
//
// # Consistent hashing with virtual nodes
//
// ConsistentHash is the production policy, as in Centrifuge (C§2.1, C§2.1.2)
// and PRS (P§4.1): consistent hashing over the flat 64-bit key space with 64
// virtual nodes per owner. Virtual node i of owner id sits at the point
//
//	VNodeKey(id, i) = xxhash64(id + "#" + decimal(i))
//
// for i in [0, round(VNodes·Capacity)), at least one. The points are sorted
// (ties broken by owner ID, then by i) and each point owns the keys from it up
// to the next point. The ring is cut at key 0 rather than wrapped: the first
// point also owns the keys below it and the last point owns the keys up to
// 2^64, so every virtual node is exactly one Segment (one lease, C§2.1.2) and
// no range has to be split in two at the end of the key space. Of two virtual
// nodes that hash to the same point, the first in tie order owns the range and
// the other gets none.
//
// Why this policy:
//
//   - Minimal movement. Adding an owner only moves keys to it, and removing
//     one only moves its own keys, so a membership change recalls and
//     re-grants (and loses soft state on) about 1/n of the key space rather
//     than reshuffling everything (C§2.1.2: "recalls leases on the ranges that
//     are now destined for the new Owner").
//   - Few, stable leases. Each owner holds about VNodes ranges however many
//     keys there are (64 ranges of 32 bytes per owner in Centrifuge, C§2.2), so
//     lease messages and the Lookup's full copy of the table stay small.
//   - Balance. With 64 virtual nodes each owner's share of the key space is
//     within a few tens of percent of the mean; more virtual nodes give a more
//     even split (P§4.1). Capacity scales an owner's virtual nodes, which is
//     also the handle for load-driven moves (C§2.1.2 adds or removes virtual
//     nodes of owners more than 10% off the mean load).
//   - Determinism. The points depend only on owner IDs, and xxhash64 is
//     stable across processes and releases, so every manager replica and
//     every later leader computes the same assignment from the same members.
//
// Fixed is the fixed-hashing policy PRS used for tests (P§4.1): Pieces equal
// ranges dealt round-robin to the members in ID order.
//
// # Usage
//
// The Manager calls Assign whenever membership changes and diffs the result
// against its lease table to decide what to recall and grant:
//
//	var p assign.Policy = assign.ConsistentHash{} // 64 virtual nodes
//	a := p.Assign([]assign.Member{{ID: "owner-a"}, {ID: "owner-b", Capacity: 2}})
//	if err := a.Validate(); err != nil { ... }
//	owner := a.Owner(keyspace.KeyOf("alice"))
//
// Assign is a pure function: it starts no goroutines, reads no clock and
// draws no random numbers, and it may be called from any goroutine. The same
// members in any order give the same Assignment. An Assignment is a plain
// slice; the caller owns it and must not modify it while others read it.
package assign
