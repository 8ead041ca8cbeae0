package protocol

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// DefaultNamespace is the namespace every Manager serves.
const DefaultNamespace = "default"

// The Manager's status, as manager.Server.Snapshot and the Admin service's
// Status report it (leasehold status): the types are defined here, below
// both the Manager's lease rules that count them and the server that
// reports them, so that each is defined once.

// Stats counts the leader's lease work since it took over (zero on a
// follower), and the Lookup syncs this replica served.
type Stats struct {
	LeaseRequests uint64 // accepted or not
	SyncRequests  uint64
	Grants        uint64 // ranges granted with a fresh LGN
	Recalls       uint64 // ranges omitted from a holder's message to move them
	Releases      uint64 // ranges freed by acknowledgement (recall or refusal)
	Expiries      uint64 // ranges freed because their reservation ran out
	OwnerRestarts uint64 // new incarnations seen
	Migrations    uint64 // ranges granted with the previous holder's state (planned moves)
	Plans         uint64 // rebalancing rounds planned
	PlannedMoves  uint64 // ranges the rounds moved
	PlanErrors    uint64 // rounds the policy refused
	RacesDropped  uint64 // requests dropped by the race filter (C§2.3.2)
	StaleDropped  uint64 // duplicates and messages of dead incarnations
	Forgotten     uint64 // Owner records forgotten: no member, owed nothing
	// Standby Owners (docs/design.md rules 21-24).
	StandbysNamed  uint64        // standbys named (each a fresh SGN)
	StandbysFilled uint64        // standbys reported in sync
	StandbysLost   uint64        // standbys dropped: dead, restarted, draining or leaving
	Promotions     uint64        // ranges granted to their in-sync standby after the holder's lease ended
	FillTime       time.Duration // the sum of the fills' times: named to reported in sync
	LastFill       time.Duration // the latest fill's time
}

// OwnerInfo describes one Owner. A follower knows only what is replicated:
// ID, address, incarnation, membership and what the Owner holds.
type OwnerInfo struct {
	ID, Addr    string
	Incarnation uint64
	Member      bool
	Ranges      int     // lease-table segments held
	Share       float64 // fraction of the key space held
	Load        float64 // requests per second over the last report
	Capacity    float64 // 0 means 1
	Draining    bool
	HotKeys     []KeyLoad // requests per second, estimated
	// Zone is the Owner's failure domain; StandbyRanges the leases it is
	// the standby for, StandbyInSync how many of them are filled.
	Zone          string
	StandbyRanges int
	StandbyInSync int
}

// StandbyInfo describes one lease's standby as the replicated state
// records it (docs/design.md rules 21-24), for leasehold status and the
// dashboard.
type StandbyInfo struct {
	Range   keyspace.Range // the holder's lease's range, as granted
	LGN     keyspace.LGN   // the holder's lease
	Holder  string
	Standby string // the standby Owner's ID
	Zone    string // the standby's zone
	SGN     SGN
	InSync  bool // filled on every piece the lease has: the standby would be promoted on all of it
}
