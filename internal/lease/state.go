// The replicated State and its Changes (docs/design.md rule 8).

package lease

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// State is the Manager's replicated state (docs/design.md rule 8): the epoch, the
// namespaces with their lease tables and LGN counters, the owners and their
// incarnations, and the Manager replicas' addresses. Every replica applies
// the same committed Changes in the same order and so holds the same State,
// LSN for LSN. Timers, sessions, sequence numbers and reservations are not
// here: they belong to the leader alone and are rebuilt by a new one — but
// for the Seq a promoted grant was first listed in (promote_state.go),
// which a new leader needs to list it as the grant it is.
//
// A State is not safe for concurrent use.
type State struct {
	epoch     uint64
	retention time.Duration
	ns        map[string]*nsState
	peers     map[uint64]string // replica ID → address
	readers   map[uint64]bool   // the peers that are read replicas (readreplicas.go)
}

type nsState struct {
	table   *leasetable.Table
	lgn     keyspace.LGN // the largest LGN ever recorded
	owners  map[string]OwnerRecord
	desired assign.Assignment // the load-aware desired assignment, if any
	// standbys are the pairings of holder and standby by the holder's
	// lease (docs/design.md rules 21-24), and sgn the largest SGN ever
	// recorded (standby.go).
	standbys map[keyspace.LGN]StandbyRecord
	sgn      protocol.SGN
	// promoted marks the leases granted by promotion until their standby
	// acknowledges the grant or they end, in this epoch (promote_state.go).
	promoted map[keyspace.LGN]PromotedGrant
}

// OwnerRecord is the replicated part of what the Manager knows of an owner.
type OwnerRecord struct {
	Addr        string  `json:"a,omitempty"`
	Incarnation uint64  `json:"i"`
	Member      bool    `json:"m,omitempty"` // alive and given a share of the key space
	Capacity    float64 `json:"c,omitempty"` // the Owner's weight; 0 means 1
	Draining    bool    `json:"d,omitempty"` // moving every range away before it leaves
	// Since is the largest LGN the table had recorded when this
	// incarnation first spoke: an entry of this owner with an LGN at or
	// below it was granted to an earlier run (see Core's orphans).
	Since keyspace.LGN `json:"g,omitempty"`
	// Zone is the Owner's failure domain (docs/design.md rule 22).
	Zone string `json:"z,omitempty"`
}

// Op is the kind of a Change.
type Op uint8

// The Change operations.
const (
	OpEpoch     Op = iota + 1 // set the epoch (once, by the first leader)
	OpNamespace               // create namespace NS
	OpSet                     // set Range of NS's table to Entry
	OpOwner                   // record Owner of NS as Record
	OpForget                  // forget Owner of NS
	OpPeer                    // record replica Peer at Addr ("" removes it)
	OpDesired                 // set NS's desired assignment to Desired
	OpStandby                 // record NS's pairing Standby (SGN 0: forget Standby.LGN's)
	OpPromoted                // record NS's promotion mark Promoted (Seq 0: forget Promoted.LGN's)
)

// Change is one mutation of the State. The leader's Core emits Changes; the
// replicated log carries them to every replica.
type Change struct {
	Op     Op               `json:"op"`
	NS     string           `json:"ns,omitempty"`
	Epoch  uint64           `json:"ep,omitempty"`
	Range  keyspace.Range   `json:"r"`
	Entry  leasetable.Entry `json:"e"`
	Owner  string           `json:"o,omitempty"`
	Record OwnerRecord      `json:"rec"`
	Peer   uint64           `json:"p,omitempty"`
	Addr   string           `json:"a,omitempty"`
	// Reader marks the replica OpPeer records as a read replica: a Raft
	// learner that is never promoted (readreplicas.go).
	Reader bool `json:"rr,omitempty"`
	// Desired is a load-aware desired assignment (OpDesired).
	Desired assign.Assignment `json:"d,omitempty"`
	// Standby is a pairing of holder and standby (OpStandby).
	Standby *StandbyRecord `json:"sb,omitempty"`
	// Promoted marks a lease granted by promotion (OpPromoted).
	Promoted *PromotedGrant `json:"pg,omitempty"`
}

// ErrCorrupt is wrapped by the errors of Apply and DecodeState: a committed
// change that cannot be applied means the replicated log is damaged.
var ErrCorrupt = errors.New("lease: corrupt replicated state")

// NewState returns an empty State whose tables keep their change logs for
// retention.
func NewState(retention time.Duration) *State {
	return &State{retention: retention, ns: map[string]*nsState{}, peers: map[uint64]string{}, readers: map[uint64]bool{}}
}

// Epoch returns the epoch, 0 until the first leader set it.
func (s *State) Epoch() uint64 { return s.epoch }

// Table returns a namespace's lease table (nil if unknown), for reading only.
func (s *State) Table(ns string) *leasetable.Table {
	if n := s.ns[ns]; n != nil {
		return n.table
	}
	return nil
}

// Namespaces returns the namespace names, sorted.
func (s *State) Namespaces() []string {
	out := make([]string, 0, len(s.ns))
	for name := range s.ns {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Owners returns a namespace's owner records.
func (s *State) Owners(ns string) map[string]OwnerRecord {
	if n := s.ns[ns]; n != nil {
		return n.owners
	}
	return nil
}

// Peers returns the replicas' addresses by ID.
func (s *State) Peers() map[uint64]string { return s.peers }

// Apply applies changes in order, stamping table changes with now (the local
// clock, used only to age the change log). It stops at the first change it
// cannot apply and returns an error wrapping ErrCorrupt.
func (s *State) Apply(now time.Time, changes []Change) error {
	for i, c := range changes {
		if err := s.apply(now, c); err != nil {
			return fmt.Errorf("%w: change %d (%+v): %v", ErrCorrupt, i, c, err)
		}
	}
	return nil
}

func (s *State) apply(now time.Time, c Change) error {
	if c.Op == OpEpoch {
		if c.Epoch == 0 {
			return errors.New("epoch 0")
		}
		s.epoch = c.Epoch
		return nil
	}
	if c.Op == OpPeer {
		if c.Peer == 0 {
			return errors.New("peer ID 0")
		}
		if c.Addr == "" {
			delete(s.peers, c.Peer)
		} else {
			s.peers[c.Peer] = c.Addr
		}
		s.setReader(c.Peer, c.Addr != "" && c.Reader)
		return nil
	}
	if c.Op == OpNamespace {
		if _, ok := s.ns[c.NS]; !ok {
			s.ns[c.NS] = &nsState{table: leasetable.New(s.retention), owners: map[string]OwnerRecord{}, standbys: map[keyspace.LGN]StandbyRecord{},
				promoted: map[keyspace.LGN]PromotedGrant{}}
		}
		return nil
	}
	n := s.ns[c.NS]
	if n == nil {
		return fmt.Errorf("unknown namespace %q", c.NS)
	}
	switch c.Op {
	case OpSet:
		if !c.Range.Valid() {
			return fmt.Errorf("invalid range %v", c.Range)
		}
		if err := c.Entry.Validate(); err != nil {
			return err
		}
		n.table.Set(now, c.Range, c.Entry)
		n.lgn = max(n.lgn, c.Entry.LGN)
	case OpOwner:
		if c.Owner == "" || c.Record.Incarnation == 0 {
			return errors.New("owner record without ID or incarnation")
		}
		n.owners[c.Owner] = c.Record
	case OpForget:
		delete(n.owners, c.Owner)
	case OpDesired:
		if len(c.Desired) > 0 {
			if err := c.Desired.Validate(); err != nil {
				return err
			}
		}
		n.desired = slices.Clone(c.Desired)
	case OpStandby:
		return n.applyStandby(c.Standby)
	case OpPromoted:
		return n.applyPromoted(c.Promoted)
	default:
		return fmt.Errorf("unknown op %d", c.Op)
	}
	return nil
}

// stateImage is the encoded form of a State: a snapshot's data.
type stateImage struct {
	Epoch      uint64            `json:"epoch"`
	Namespaces []nsImage         `json:"namespaces"`
	Peers      map[uint64]string `json:"peers,omitempty"`
	Readers    []uint64          `json:"readers,omitempty"` // the read replicas among Peers
}

type nsImage struct {
	Name     string                 `json:"name"`
	LSN      keyspace.LSN           `json:"lsn"`
	LGN      keyspace.LGN           `json:"lgn"`
	Segments []leasetable.Segment   `json:"segments"`
	Owners   map[string]OwnerRecord `json:"owners,omitempty"`
	Desired  assign.Assignment      `json:"desired,omitempty"`
	Standbys []StandbyRecord        `json:"standbys,omitempty"`
	SGN      protocol.SGN           `json:"sgn,omitempty"`
	// Promoted is absent from a snapshot written before promotions were
	// marked: it decodes as none.
	Promoted []PromotedGrant `json:"promoted,omitempty"`
}

// Encode returns the State as a snapshot's data. The change logs are
// not included: a Lookup further behind than the snapshot gets a snapshot
// of the table, as it would after LogRetention.
func (s *State) Encode() []byte {
	img := stateImage{Epoch: s.epoch, Peers: s.peers, Readers: s.ReadReplicas()}
	for _, name := range s.Namespaces() {
		n := s.ns[name]
		img.Namespaces = append(img.Namespaces, nsImage{Name: name, LSN: n.table.LSN(), LGN: n.lgn,
			Segments: n.table.Segments(), Owners: n.owners, Desired: n.desired, Standbys: n.standbyList(), SGN: n.sgn,
			Promoted: n.promotedList()})
	}
	b, err := json.Marshal(img)
	if err != nil {
		panic(fmt.Sprintf("lease: encoding state: %v", err)) // plain data: cannot fail
	}
	return b
}

// DecodeState rebuilds a State from Encode's output.
func DecodeState(data []byte, retention time.Duration) (*State, error) {
	var img stateImage
	if err := json.Unmarshal(data, &img); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, err)
	}
	s := NewState(retention)
	s.epoch = img.Epoch
	for id, addr := range img.Peers {
		s.peers[id] = addr
	}
	for _, id := range img.Readers {
		s.setReader(id, s.peers[id] != "")
	}
	for _, ni := range img.Namespaces {
		t := leasetable.New(retention)
		if err := t.Restore(ni.LSN, ni.Segments); err != nil {
			return nil, fmt.Errorf("%w: snapshot of namespace %q: %v", ErrCorrupt, ni.Name, err)
		}
		owners := map[string]OwnerRecord{}
		for id, r := range ni.Owners {
			owners[id] = r
		}
		standbys := map[keyspace.LGN]StandbyRecord{}
		for _, r := range ni.Standbys {
			standbys[r.LGN] = r
		}
		promoted := map[keyspace.LGN]PromotedGrant{}
		for _, p := range ni.Promoted {
			promoted[p.LGN] = p
		}
		s.ns[ni.Name] = &nsState{table: t, lgn: ni.LGN, owners: owners, desired: ni.Desired, standbys: standbys, sgn: ni.SGN,
			promoted: promoted}
	}
	return s, nil
}

// Clone returns a deep copy (without the change logs, which only the
// replicas' own Lookup feeds read).
func (s *State) Clone() *State {
	c, err := DecodeState(s.Encode(), s.retention)
	if err != nil {
		panic(fmt.Sprintf("lease: cloning state: %v", err)) // our own encoding
	}
	return c
}

func sortedOwnerIDs(m map[string]OwnerRecord) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmp.Compare)
	return ids
}

// Refound turns s into the State of a new group of one, replica id at
// addr, under a new epoch (larger than s's and at least epoch): leases
// granted after s was saved are unknown, so its LGNs must never be
// confused with theirs.
func (s *State) Refound(id uint64, addr string, epoch uint64) {
	for p := range s.peers {
		delete(s.peers, p)
	}
	clear(s.readers)
	s.peers[id] = addr
	s.epoch = max(epoch, s.epoch+1)
	// No session's Seqs carry over into the new epoch, so no request can
	// acknowledge a promoted grant's first message: a mark kept would list
	// the lease as a promoted grant to an Owner that may hold it long
	// since (promote_state.go).
	for _, n := range s.ns {
		clear(n.promoted)
	}
}
