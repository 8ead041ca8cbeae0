// Package replica is one Manager replica: the Raft node that replicates
// internal/lease's State, runs the leader's lease.Core, serves Lookups from
// the applied State (the Feed), changes the group's membership and keeps
// its quorum read leases. It is deterministic: it opens no sockets, starts no
// goroutines and reads no clock; manager.Server drives it with real time
// and a network, internal/sim with virtual ones.
//
// It sits in the module's internal/ rather than under manager/, where Go's
// internal rule would let only manager import it: the simulation
// (internal/sim), the operator tools (cmd/internal/cli: backup and restore
// replay its log) and the lookup tests reach it too. Embedders see only
// the manager package.
package replica
