package protocol

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// Lease is one leased range in a lease message.
type Lease struct {
	Range keyspace.Range
	LGN   keyspace.LGN
	// Grant marks a new lease (a fresh LGN) as opposed to the renewal of a
	// lease the Owner already holds. An Owner accepts a renewal only for a
	// lease it holds and has held without a gap; a restarted Owner therefore
	// refuses renewals and the Manager learns the range is free (C§2.3).
	// Grant is only meaningful in a LeaseResponse.
	Grant bool
	// Migrated marks a grant whose state was handed over by the previous
	// holder (C§2.1.2); lookups raise no loss notification for it.
	Migrated bool
}

// LeaseRequest is an Owner's message to the Manager: a liveness signal, the
// complete set of leases it holds, and (by omission) acknowledgements of
// recalls.
type LeaseRequest struct {
	Namespace string
	Owner     string // the Owner's ID, stable across restarts
	Addr      string // where Lookups should send the Owner's requests
	// Incarnation identifies one run of the Owner process. A later run has a
	// larger Incarnation; the Manager never extends a lease to a different
	// incarnation from the one it was granted to.
	Incarnation uint64
	Seq         uint64 // this message's sequence number in the session
	AckEpoch    uint64 // the Manager epoch of the last LeaseResponse heard
	AckSeq      uint64 // the Seq of the last LeaseResponse heard (0: none)
	Held        []Lease
	// Leaving says the Owner is shutting down: it holds nothing and should be
	// removed from the membership at once.
	Leaving bool
}

// LeaseResponse is the Manager's message to an Owner: the complete set of
// leases the Owner should hold now. It answers a LeaseRequest, or is pushed
// unsolicited to recall or grant at once.
type LeaseResponse struct {
	Namespace   string
	Owner       string
	Incarnation uint64 // the Owner incarnation this is addressed to
	// Epoch names the Manager's lease table: it changes only when the
	// Manager's state is lost (a restart without a data directory). Lease
	// numbers and LGNs are only comparable within one epoch.
	Epoch  uint64
	Seq    uint64 // this message's sequence number in the session
	AckSeq uint64 // the Seq of the last LeaseRequest heard
	Leases []Lease
	// OwnerLease and Renew are the Manager's timings. The Owner adopts them,
	// so an Owner configured differently can never believe a lease longer
	// than the Manager reserves it. Zero means "keep your own".
	OwnerLease time.Duration
	Renew      time.Duration
}

// SyncRequest is a Lookup's request for the lease-table changes since LSN.
type SyncRequest struct {
	Namespace string
	ID        uint64 // chosen by the Lookup; echoed in the answer
	Epoch     uint64 // the epoch of the Lookup's copy (0: none yet)
	LSN       keyspace.LSN
}

// SyncResponse carries a delta or a snapshot of the lease table. Push
// responses are sent unsolicited as the table changes and have ID 0.
type SyncResponse struct {
	Namespace string
	ID        uint64
	Epoch     uint64
	Update    leasetable.Update
	// Sync and SyncTimeout are the Manager's timings, which the Lookup
	// adopts. Zero means "keep your own".
	Sync        time.Duration
	SyncTimeout time.Duration
}
