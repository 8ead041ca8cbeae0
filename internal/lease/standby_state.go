// The replicated pairings of holder and standby (docs/design.md rules
// 21-24): what every replica knows of the standbys, so that a new leader
// promotes only a standby the old one recorded in sync.

package lease

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// StandbyRecord is the pairing of a holder's lease with its standby. A
// record whose Owner is empty says the lease has no standby under SGN:
// it was dropped, and the holder is told so.
type StandbyRecord struct {
	LGN    keyspace.LGN   `json:"l"` // the holder's lease
	Range  keyspace.Range `json:"r"` // the span of the lease's pieces when the pairing was made
	Holder string         `json:"h"`
	// SGN is the pairing's standby number, fresh for each naming, drop and
	// promotion. In a Change, 0 forgets LGN's record (its lease ended).
	SGN         protocol.SGN `json:"s"`
	Owner       string       `json:"o,omitempty"` // the standby; empty: none
	Addr        string       `json:"a,omitempty"`
	Incarnation uint64       `json:"i,omitempty"`
	Zone        string       `json:"z,omitempty"`
	InSync      bool         `json:"y,omitempty"` // some piece of the standby's copy is filled under SGN (Synced says which)
	// Synced are the pieces of the lease whose copy the standby reported
	// filled under SGN (rule 23): a fill covers the pieces its holder held
	// when it copied them, not the whole lease, and only these pieces are
	// promoted (rule 21). A record in sync without Synced (written before
	// the mark was per piece) promotes nothing: its pieces are freed and
	// their loss reported.
	Synced []keyspace.Range `json:"ys,omitempty"`
}

func (n *nsState) applyStandby(r *StandbyRecord) error {
	switch {
	case r == nil:
		return errors.New("standby change without a record")
	case r.LGN == 0:
		return errors.New("standby record without an LGN")
	case r.SGN == 0:
		delete(n.standbys, r.LGN)
		return nil
	case r.Holder == "" || !r.Range.Valid():
		return fmt.Errorf("standby record of LGN %d without a holder or a range", r.LGN)
	case r.Owner == "" && (r.InSync || len(r.Synced) > 0):
		return fmt.Errorf("standby record of LGN %d in sync without a standby", r.LGN)
	}
	for _, p := range r.Synced {
		if !p.Valid() {
			return fmt.Errorf("standby record of LGN %d: piece %v in sync is empty or reversed", r.LGN, p)
		}
	}
	n.standbys[r.LGN] = *r
	n.sgn = max(n.sgn, r.SGN)
	return nil
}

// standbyList returns the pairings by LGN.
func (n *nsState) standbyList() []StandbyRecord {
	if len(n.standbys) == 0 {
		return nil
	}
	out := make([]StandbyRecord, 0, len(n.standbys))
	for _, r := range n.standbys {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b StandbyRecord) int { return cmp.Compare(a.LGN, b.LGN) })
	return out
}

// Standbys returns a namespace's pairings of holder and standby, by the
// holder's LGN, for status. A pairing is in sync when its standby is
// recorded filled on every piece the lease has now — what promotion would
// take whole if the holder were lost — not on some of them.
func (s *State) Standbys(ns string) []protocol.StandbyInfo {
	n := s.ns[ns]
	if n == nil {
		return nil
	}
	var out []protocol.StandbyInfo
	var pieces map[keyspace.LGN][]keyspace.Range // the holders' pieces, read once
	for _, r := range n.standbyList() {
		if pieces == nil && r.InSync {
			pieces = n.piecesByLGN()
		}
		out = append(out, protocol.StandbyInfo{Range: r.Range, LGN: r.LGN, Holder: r.Holder, Standby: r.Owner,
			Zone: r.Zone, SGN: r.SGN, InSync: pairingInSync(r, pieces)})
	}
	return out
}

// piecesByLGN returns the table's pieces of every lease, by LGN.
func (n *nsState) piecesByLGN() map[keyspace.LGN][]keyspace.Range {
	out := map[keyspace.LGN][]keyspace.Range{}
	n.table.Each(func(seg leasetable.Segment) bool {
		if seg.Entry.Owner != "" {
			out[seg.Entry.LGN] = append(out[seg.Entry.LGN], seg.Range)
		}
		return true
	})
	return out
}
