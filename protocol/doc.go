// Package protocol defines the messages of the leasehold lease protocol and its
// timing profiles. The messages are plain Go values exchanged by the
// deterministic cores (lease.Core, owner.Core, lookup.Core); the runtimes
// carry them over gRPC and the simulation carries them over a faulty virtual
// network. docs/protocol.md explains every field and the safety argument.
//
// Two exchanges make up the protocol:
//
//   - Owner ↔ Manager (C§2.3, P§4.3): an Owner sends a LeaseRequest listing
//     the complete set of leases it holds; the Manager answers with a
//     LeaseResponse listing the complete set the Owner should now hold, each
//     marked as a grant or a renewal. Both directions carry the race filter of
//     C§2.3.2 Figure 7: the sender's sequence number, and the epoch and
//     sequence number it last heard from the receiver.
//   - Lookup ↔ Manager (C§2.2.1, P§4.2): a Lookup asks for the lease-table
//     changes since its LSN and gets a delta or a snapshot; the Manager also
//     pushes deltas as they happen.
package protocol
