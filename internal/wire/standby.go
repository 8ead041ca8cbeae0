package wire

import (
	"fmt"

	"github.com/leasehold/leasehold/keyspace"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// Standby Owners on the wire (docs/design.md rules 21-24): an Owner's
// zone and in-sync reports, the Manager's pairings of holders and
// standbys.

func checkZone(z string) error {
	if len(z) > protocol.MaxZoneLen {
		return fmt.Errorf("%d bytes long; at most %d allowed (protocol.MaxZoneLen)", len(z), protocol.MaxZoneLen)
	}
	return nil
}

func standbysToPB(ss []protocol.Standby) []*leaseholdv1.Standby {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*leaseholdv1.Standby, len(ss))
	for i, s := range ss {
		out[i] = &leaseholdv1.Standby{Range: rangeToPB(s.Range), Lgn: uint64(s.LGN), Sgn: uint64(s.SGN),
			Owner: s.Owner, Addr: s.Addr, Incarnation: s.Incarnation, InSync: s.InSync}
	}
	return out
}

// standbysFromPB converts the pairings of field where (e.g.
// "LeaseResponse.standbys").
func standbysFromPB(where string, ms []*leaseholdv1.Standby) ([]protocol.Standby, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %s: %d standbys; at most %d allowed", ErrInvalid, where, len(ms), MaxLeases)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]protocol.Standby, len(ms))
	for i, m := range ms {
		at := fmt.Sprintf("%s[%d]", where, i)
		if m == nil {
			return nil, fmt.Errorf("%w: %s: nil standby", ErrInvalid, at)
		}
		r, err := rangeFromPB(m.GetRange())
		if err != nil {
			return nil, invalid(at, err)
		}
		if m.GetLgn() == 0 || m.GetSgn() == 0 {
			return nil, fmt.Errorf("%w: %s: standby of %v has LGN %d and SGN %d; both must be non-zero",
				ErrInvalid, at, r, m.GetLgn(), m.GetSgn())
		}
		if err := checkString(m.GetOwner(), false); err != nil {
			return nil, invalid(at+".owner", err)
		}
		if err := checkString(m.GetAddr(), false); err != nil {
			return nil, invalid(at+".addr", err)
		}
		out[i] = protocol.Standby{Range: r, LGN: keyspace.LGN(m.GetLgn()), SGN: protocol.SGN(m.GetSgn()),
			Owner: m.GetOwner(), Addr: m.GetAddr(), Incarnation: m.GetIncarnation(), InSync: m.GetInSync()}
	}
	return out, nil
}

func inSyncToPB(ss []protocol.StandbySync) []*leaseholdv1.StandbySync {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*leaseholdv1.StandbySync, len(ss))
	for i, s := range ss {
		out[i] = &leaseholdv1.StandbySync{Range: rangeToPB(s.Range), Lgn: uint64(s.LGN), Sgn: uint64(s.SGN)}
	}
	return out
}

func inSyncFromPB(where string, ms []*leaseholdv1.StandbySync) ([]protocol.StandbySync, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %s: %d reports; at most %d allowed", ErrInvalid, where, len(ms), MaxLeases)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]protocol.StandbySync, len(ms))
	for i, m := range ms {
		at := fmt.Sprintf("%s[%d]", where, i)
		if m == nil {
			return nil, fmt.Errorf("%w: %s: nil report", ErrInvalid, at)
		}
		r, err := rangeFromPB(m.GetRange())
		if err != nil {
			return nil, invalid(at, err)
		}
		if m.GetLgn() == 0 || m.GetSgn() == 0 {
			return nil, fmt.Errorf("%w: %s: report on %v has LGN %d and SGN %d; both must be non-zero",
				ErrInvalid, at, r, m.GetLgn(), m.GetSgn())
		}
		out[i] = protocol.StandbySync{Range: r, LGN: keyspace.LGN(m.GetLgn()), SGN: protocol.SGN(m.GetSgn())}
	}
	return out, nil
}
