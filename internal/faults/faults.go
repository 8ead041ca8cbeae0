// Package faults holds switches that break one protocol rule each. They exist
// so the simulation can prove its checkers catch each broken rule; no product
// code path sets them, and external packages cannot import this one.
package faults

// Set selects the rules to break. The zero value breaks none.
type Set struct {
	// PromoteEarly makes the Manager promote a lease's in-sync standby as
	// soon as the holder has missed a renewal, before the holder's
	// reservation has run out (docs/design.md rule 21): the old holder,
	// only slow or cut off, still believes its lease and acknowledges
	// writes the promoted standby never sees.
	PromoteEarly bool
	// InSyncWholeLease makes the Manager record a standby's report that
	// its copy is filled as covering the whole lease, as it once did,
	// instead of the pieces the report names (docs/design.md rule 23): a
	// piece its holder had dropped before the fill, then listed again
	// under the lease, is promoted onto the standby's empty copy.
	InSyncWholeLease bool
	// PromotionLeaderLocal makes a new Manager leader ignore the
	// replicated promotion marks (docs/design.md rule 21), as when only
	// the leader that promoted knew a grant was a promotion: a promoted
	// grant its standby had not acknowledged when the leader changed is
	// listed as a renewal, which the standby refuses (a lease it never
	// held), and the range is freed with the copy kept for it.
	PromotionLeaderLocal bool
	// PromotionPushEarly makes a new Manager leader push to an Owner with
	// a replicated promoted grant pending before the Owner's first request
	// (docs/design.md rule 21): the push answers no request of its run, so
	// the Owner cannot take the grant from it, yet acknowledges it; the
	// leader takes the grant for seen, forgets it, and lists the lease as
	// a renewal, which the Owner refuses.
	PromotionPushEarly bool
	// AckBeforeStandby makes the simulation's holders acknowledge a write
	// as soon as they send it to the standby, before the standby has
	// stored it (docs/design.md rule 24).
	AckBeforeStandby bool
	// StandbyAcceptsStale makes a standby's Owner accept a replicated
	// write whatever holder, LGN and SGN it names
	// (owner.Core.CheckStandbyWrite; docs/design.md rule 24): a stale
	// holder's late write overwrites what the current holder acknowledged.
	StandbyAcceptsStale bool
	// PairedBeforeGranted makes the Owner report a lease's pairing
	// (OwnershipChange.Paired) before the lease's grant, as it once did
	// (docs/design.md rule 24): an application filling on the pairing
	// copies a range whose state it has not taken up yet, and the standby
	// is recorded in sync with a partial copy.
	PairedBeforeGranted bool
	// StandbyForFromRaced makes the Owner take the list of leases it
	// stands by for from a raced message whose grants it declined: a
	// promoted grant's standby drops its copy before the grant is resent.
	StandbyForFromRaced bool
	// NoRaceFilter makes the Manager and the Owner accept messages that
	// raced (C§2.3.2, Figure 7) instead of dropping them.
	NoRaceFilter bool
	// TimerAtReceipt starts the Owner's lease timer when a response arrives
	// instead of when the answered request was sent (C§2.3.1).
	TimerAtReceipt bool
	// ReuseLGN makes the Manager give a new grant the LGN the range had
	// before, instead of a fresh one (C§2.3, P§4.1).
	ReuseLGN bool
	// IgnoreSnapshotDiff makes a Lookup install snapshots without diffing
	// them against its copy (P§4.2).
	IgnoreSnapshotDiff bool
	// MarkFromCopyBlind makes the compact pushes of the simulation mark
	// FromCopy every change whose range was one segment just before it,
	// and OwnerFromCopy every one whose key before was held by its Owner,
	// ignoring the changes before it in the delta
	// (leasetable.MarkFromCopy): a Lookup then reads ranges and owners
	// from its copy at From that were not so there.
	MarkFromCopyBlind bool
	// AnswerBeforeCommit makes a Manager leader send its answers as soon as
	// its Core makes them, before their Raft entry commits: a deposed
	// leader can then still renew (the first failover rule,
	// docs/design.md rule 8).
	AnswerBeforeCommit bool
	// NoTakeoverReservation makes a new Manager leader grant free ranges at
	// once instead of reserving every range for a ManagerLease (the second
	// failover rule, docs/design.md rule 10).
	NoTakeoverReservation bool
	// MigrateUnhanded makes the Manager grant a range its holder gave up
	// without reporting a handover to the next Owner all the same, marked
	// migrated: a declined or late planned move must fall back to a recall
	// that reports the state lost (C§2.1.2).
	MigrateUnhanded bool
	// CompactAsAccepted makes the Owner say HeldAsAcked when it holds
	// exactly the leases of the last response it accepted, instead of those
	// of the message it acknowledges: after a raced recall it acknowledges
	// the recall while still holding the range, and the Manager, expanding
	// the compact form against the recall, releases the range.
	CompactAsAccepted bool
	// RenewHeldSubset makes the Manager send RenewHeld when every lease it
	// lists renews one the request held, without checking that it lists
	// them all: a recall is lost in the compact form, and the Owner renews
	// the range past the Manager's reservation.
	RenewHeldSubset bool
	// FreeAtRestart makes the Manager free an Owner's ranges in the table
	// as soon as a new incarnation of it speaks, instead of leaving them to
	// the old run until their reservations end: a second live process with
	// the same ID then acknowledges writes after the loss was reported,
	// and no later change reports them.
	FreeAtRestart bool
	// ForgetHolder makes the Manager forget an Owner as soon as it is not a
	// member, whatever it is owed: an entry of the table still naming it
	// is no longer known for an earlier run's when a run of that ID comes
	// back, and its first request frees it before its reservation ends,
	// while the old process may still hold the lease.
	ForgetHolder bool
	// LateHandoverDone makes the Owner hand a range over when the
	// application reports its handover done after the handover's deadline,
	// and the Manager grant it migrated when that report comes after its
	// own: writes the application took on the range after the deadline
	// are lost with no loss reported.
	LateHandoverDone bool
	// RetakeGone makes an Owner take up every piece a repeated grant lists,
	// including a piece of the lease it has given up since (recalled,
	// refused, expired, handed over), instead of refusing that piece until
	// the Manager has answered a request sent after the give-up.
	RetakeGone bool
	// NoStreamLiveness makes the simulation's Owners and Lookups stay on a
	// Manager replica that stopped answering, as a client whose stream has
	// no keepalive and no deadline on an answer does: a stalled leader
	// with an open connection then costs every lease.
	NoStreamLiveness bool
	// ReadLeaseServeExpired makes a read-lease holder keep serving reads
	// from its copy after its lease ran out: cut off from the leader, it
	// answers with a state the group has since moved past.
	ReadLeaseServeExpired bool
	// ReadLeaseAckEarly makes the leader treat an entry as visible to
	// reads, and acknowledge the writes in it, once Raft commits it,
	// without waiting for every holder whose lease may last to append it.
	ReadLeaseAckEarly bool
	// ReadLeaseStaleGrant makes a replica grant a read lease in the term the
	// asking holder names though it has since moved on to a later term: it
	// voted there, and so promised not to support the older term's leader.
	ReadLeaseStaleGrant bool
	// ReadLeaseCountUnacked makes the leader count a read-lease holder for
	// a lease after every promise it makes, whether or not the holder
	// acknowledged an earlier one: a holder the leader's messages do not
	// reach (a one-way cut) keeps asking, is counted for ever, and every
	// answer resting on an entry past its log waits as long.
	ReadLeaseCountUnacked bool
	// ReadLeaseFromNewest makes a holder time its lease from its newest
	// ask instead of from the ask of the round it acknowledged, while the
	// leader counts it only from the promise it acknowledged: after a lost
	// promise the holder serves past the leader's count.
	ReadLeaseFromNewest bool
	// ReadLeaseForgetRemoved makes the leader stop counting a holder the
	// moment it applies the holder's removal, and a new leader not count a
	// holder removed just before it took over: a removed holder that has
	// not applied its removal serves under a lease the leader no longer
	// waits for.
	ReadLeaseForgetRemoved bool
	// ReadLeaseDeposedGrant makes a replica promise as the leader while it
	// has a Core, though Raft has made it a follower in the steps since its
	// last Advance (a later term's heartbeat): it stamps the promise with
	// the new term and its stale commit index.
	ReadLeaseDeposedGrant bool
	// ReadLeaseConfBlind makes a holder take a lease from a majority of its
	// own voters whatever voters the leader's promise names: a holder whose
	// configuration lags counts a majority of voters the group has left.
	ReadLeaseConfBlind bool
	// FreshAtReceipt makes a Lookup count its copy as fresh as the time a
	// push or heartbeat that vouches for freshness arrives, instead of the
	// send time of the request it names plus the replica's elapsed time
	// (shrunk by the drift): a message that spent long on the way, or
	// that a stalled replica built before it stalled, then passes for
	// newer than it is.
	FreshAtReceipt bool
	// FreshWithoutDrift makes a Lookup add the replica's elapsed time to
	// the named request's send time as it is, without dividing it by
	// 1+MaxDrift: a replica whose clock runs fast then vouches for a time
	// the Lookup's clock has not reached when the message is built.
	FreshWithoutDrift bool
	// HeartbeatUnserved makes a Manager replica vouch for freshness in its
	// pushes and heartbeats whether or not it could answer a poll when it
	// builds them: a deposed leader or a follower cut off from the leader
	// then keeps its Lookups fresh on a table that has stopped moving.
	HeartbeatUnserved bool
	// ReadReplicaPromoted makes a leader promote a read replica once it
	// has caught up, as it does a learner added to become a voter: the
	// read replica then votes and counts toward the quorum.
	ReadReplicaPromoted bool
	// ReadReplicaStale lets a read replica answer Lookups whenever it knows
	// a leader, without the ReadIndex proof of rule 17: cut off from the
	// group, it goes on answering from a table that has stopped moving.
	ReadReplicaStale bool
}

// Owner and Lookup break the rules of s in an owner.Core or a lookup.Core
// (passed as core). Those packages are public, and no public config may
// name this internal package, so neither config carries a Set: each
// package assigns its hook here in init, and the simulation calls it on a
// Core it has just made, before its first step. Only this module can
// import this package, so no embedder can break a rule.
var (
	Owner  func(core any, s Set)
	Lookup func(core any, s Set)
)
