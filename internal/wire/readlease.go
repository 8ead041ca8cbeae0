package wire

// The quorum read-lease messages between Manager replicas (internal/replica,
// readlease.go) travel as raftpb.Messages of types Raft does not use, on the
// replicas' Raft transport: the replica takes them before Raft sees them,
// and the transport (internal/peers) accepts these types besides Raft's own.
const (
	ReadLeaseAsk     int32 = 0x4c51 // a holder asks a voter for a promise
	ReadLeasePromise int32 = 0x4c52 // a voter's promise
	ReadLeaseVisible int32 = 0x4c53 // the leader's visible bound
)

// IsReadLeaseType reports whether a raft message type is a read-lease one.
func IsReadLeaseType(t int32) bool {
	return t == ReadLeaseAsk || t == ReadLeasePromise || t == ReadLeaseVisible
}
