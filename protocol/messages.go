package protocol

import (
	"slices"
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
	// Promoted marks a grant to the range's in-sync standby after its
	// holder's lease ended without a handover (docs/design.md rule 21):
	// the Owner serves from the copy it kept as standby. Migrated is set
	// too, so that Lookups raise no loss notification.
	Promoted bool
}

// SameHeld reports whether two lease lists name the same ranges under the
// same LGNs in the same order: all a request's Held says of each. The
// compact forms (HeldAsAcked, RenewHeld) stand for a list only when it is
// SameHeld as the one they replace.
func SameHeld(a, b []Lease) bool {
	return slices.EqualFunc(a, b, func(x, y Lease) bool { return x.Range == y.Range && x.LGN == y.LGN })
}

// LeaseRequest is an Owner's message to the Manager: a liveness signal, the
// complete set of leases it holds (in Held, or by HeldAsAcked), and (by
// omission) acknowledgements of recalls.
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
	// HeldAsAcked says the Owner holds exactly the leases listed by the
	// Manager's message AckSeq (of epoch AckEpoch), each over the range and
	// under the LGN listed, and nothing else; Held is then empty. It is an
	// encoding of Held, not a new meaning: a steady-state renewal is one
	// flag instead of the complete set. The Manager expands it only against
	// its own latest message in the session, and otherwise treats Held as
	// unknown and releases nothing on it.
	HeldAsAcked bool
	// Leaving says the Owner is shutting down: it holds nothing and should be
	// removed from the membership at once.
	Leaving bool
	// Draining asks the Manager to move every range away, handing the state
	// over (C§2.1.2), before the Owner leaves: a planned restart.
	Draining bool
	// Handed lists handovers done since the last acknowledged request: the
	// Owner gave those leases up after handing their state over.
	Handed []Handed
	// Capacity weighs the Owner's share of the load (Porcupine): an Owner
	// of capacity 2 is given twice the load of one of capacity 1. 0 means 1.
	Capacity float64
	// Load counts the requests the Owner checked per held range over the
	// last Window, and HotKeys the busiest single keys among them.
	Load    []RangeLoad
	HotKeys []KeyLoad
	Window  time.Duration
	// Zone is the Owner's failure domain (a rack, a zone; at most MaxZoneLen
	// bytes): a range's standby is put in another zone than its holder's
	// when one has capacity (docs/design.md rule 22). Empty: no zone.
	Zone string
	// InSync reports, for leases this Owner is the standby for, that the
	// application has filled its copy under the standby number given
	// (docs/design.md rule 23). The Owner repeats a report until the
	// Manager's StandbyFor says InSync.
	InSync []StandbySync
}

// MaxZoneLen is the longest Zone an Owner may give, in bytes.
const MaxZoneLen = 64

// SGN is a standby number: fresh (larger than any before in the
// namespace) every time a lease's standby is named, dropped or promoted.
// A standby accepts a replicated write only under the SGN it was last
// given, which fences writes of a holder that is no longer paired with it
// (docs/design.md rule 24), as the LGN fences a lease.
type SGN uint64

// Standby pairs a lease's holder and its standby (docs/design.md rules
// 21-24). In LeaseResponse.Standbys, sent to the holder, Owner, Addr and
// Incarnation name the standby; in LeaseResponse.StandbyFor, sent to the
// standby, they name the holder.
type Standby struct {
	Range keyspace.Range // the holder's lease's range (as granted)
	LGN   keyspace.LGN   // the holder's lease
	SGN   SGN
	// Owner, Addr and Incarnation name the peer. In Standbys an empty
	// Owner says the lease has no standby under SGN: the holder
	// acknowledges writes on its own copy, and the range is lost with it.
	Owner       string
	Addr        string
	Incarnation uint64
	// InSync says the Manager has recorded the standby's copy as filled
	// under SGN: the standby may be promoted (rule 21).
	InSync bool
}

// StandbySync is a standby's report that its copy of the holder's lease
// LGN is filled under standby number SGN (docs/design.md rule 23).
type StandbySync struct {
	Range keyspace.Range
	LGN   keyspace.LGN
	SGN   SGN
}

// MinLoadWindow is the shortest load Window a request may carry (0 means
// no report): a rate over a shorter one says little, and over a nanosecond
// turns a handful of requests into 1e28 a second. An Owner sending sooner
// keeps its counts for its next request.
const MinLoadWindow = 100 * time.Millisecond

// Handover asks the holder of a lease to hand the state of Range over to
// another Owner before giving it up: a planned move (C§2.1.2). The lease
// stays valid (and renewed) meanwhile.
type Handover struct {
	Range       keyspace.Range
	LGN         keyspace.LGN
	To          string // the next Owner's ID
	Addr        string // the next Owner's address, where the state goes
	Incarnation uint64 // the run of the next Owner the state is for
	// Within is how long the Manager waits for the handover; then it
	// recalls the range without it, and Lookups are told the state is lost.
	Within time.Duration
}

// Handed reports a handover done: the Owner gave up Range (lease LGN) after
// handing its state to To's run Incarnation.
type Handed struct {
	Range       keyspace.Range
	LGN         keyspace.LGN
	To          string
	Incarnation uint64
}

// RangeLoad is the number of requests an Owner checked on one held range.
type RangeLoad struct {
	Range    keyspace.Range
	Requests uint64
}

// KeyLoad is the number of requests an Owner checked on one key.
type KeyLoad struct {
	Key      keyspace.Key
	Requests uint64
}

// Drain is the Manager's answer to an Owner's drain request.
type Drain uint8

// The drain states.
const (
	DrainNone    Drain = iota // not draining
	DrainActive               // the Manager is moving the Owner's ranges away
	DrainWaiting              // the maintenance gate is full: asked again at each renewal
)

// LeaseResponse is the Manager's message to an Owner: the complete set of
// leases the Owner should hold now (in Leases, or by RenewHeld). It answers
// a LeaseRequest, or is pushed unsolicited to recall or grant at once.
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
	// RenewHeld says Leases is exactly the Held of the Owner's request
	// AckSeq, every lease a renewal (no grant, nothing recalled); Leases is
	// then empty. Like HeldAsAcked it is an encoding, not a new meaning: the
	// Owner expands it with the Held it sent in that request, and drops the
	// message, as if lost, if it no longer knows it.
	RenewHeld bool
	// OwnerLease and Renew are the Manager's timings. The Owner adopts them,
	// so an Owner configured differently can never believe a lease longer
	// than the Manager reserves it. Zero means "keep your own".
	OwnerLease time.Duration
	Renew      time.Duration
	// Handovers asks for planned moves of held leases (each also listed in
	// Leases, renewed, until handed over or recalled).
	Handovers []Handover
	// Drain answers a drain: by the Owner's request or an operator's.
	Drain Drain
	// Standbys lists, for each held lease of a namespace with standbys, its
	// standby (an empty Owner: none) under the latest SGN. It is listed in
	// every message, RenewHeld ones included; the Owner keeps per lease the
	// entry of the largest SGN it has seen (docs/design.md rule 24).
	Standbys []Standby
	// StandbyFor lists every lease this Owner is the standby for, each
	// naming its holder: the complete set, like Leases.
	StandbyFor []Standby
}

// SyncRequest is a Lookup's request for the lease-table changes since LSN.
type SyncRequest struct {
	Namespace string
	ID        uint64 // chosen by the Lookup; echoed in the answer
	Epoch     uint64 // the epoch of the Lookup's copy (0: none yet)
	LSN       keyspace.LSN
	// Heartbeats says the Lookup reads Request and SinceRequest: the
	// Manager may then send it heartbeats (docs/protocol.md, "Heartbeats").
	Heartbeats bool
	// MaxDrift is the MaxDrift with which the Lookup judges the freshness a
	// push or heartbeat vouches for: the larger of its own and the
	// Manager's (SyncResponse.MaxDrift). A replica vouches only on a stream
	// whose newest request says at least its own (Timing.VouchesFor).
	MaxDrift float64
}

// SyncResponse carries a delta or a snapshot of the lease table. Push
// responses are sent unsolicited as the table changes and have ID 0.
type SyncResponse struct {
	Namespace string
	ID        uint64
	Epoch     uint64
	Update    leasetable.Update
	// Sync and SyncTimeout are the Manager's timings, which the Lookup
	// adopts. Zero means "keep your own". MaxDrift, sent with them, is the
	// Manager's: the Lookup judges the freshness Request and SinceRequest
	// vouch for with it, or with its own if that is larger.
	Sync        time.Duration
	SyncTimeout time.Duration
	MaxDrift    float64
	// Request and SinceRequest let a push or a heartbeat vouch for the
	// copy's freshness without a poll: the replica that built this message
	// had received the Lookup's request Request on this stream
	// SinceRequest before, on its own clock, and could answer a poll when
	// it built it. Request 0: the message vouches for nothing. A heartbeat
	// is a push with an empty delta (docs/protocol.md, "Heartbeats").
	Request      uint64
	SinceRequest time.Duration
}
