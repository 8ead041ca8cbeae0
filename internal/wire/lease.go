package wire

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// LeaseRequestToPB converts an Owner's LeaseRequest to its wire form. It
// returns nil for nil.
func LeaseRequestToPB(r *protocol.LeaseRequest) *leaseholdv1.LeaseRequest {
	if r == nil {
		return nil
	}
	return &leaseholdv1.LeaseRequest{
		Namespace:   r.Namespace,
		Owner:       r.Owner,
		Addr:        r.Addr,
		Incarnation: r.Incarnation,
		Seq:         r.Seq,
		AckEpoch:    r.AckEpoch,
		AckSeq:      r.AckSeq,
		Held:        leasesToPB(r.Held),
		HeldAsAcked: r.HeldAsAcked,
		Leaving:     r.Leaving,
		Draining:    r.Draining,
		Handed:      handedToPB(r.Handed),
		Capacity:    r.Capacity,
		Load:        loadToPB(r.Load),
		HotKeys:     keysToPB(r.HotKeys),
		WindowNanos: int64(r.Window),
		Zone:        r.Zone,
		InSync:      inSyncToPB(r.InSync),
	}
}

// LeaseRequestFromPB converts and validates a LeaseRequest from the wire. It
// requires a namespace and checks every lease's range and LGN, but not the
// protocol rules the Manager's core enforces (an owner ID, an incarnation, a
// sequence number).
func LeaseRequestFromPB(m *leaseholdv1.LeaseRequest) (*protocol.LeaseRequest, error) {
	const msg = "LeaseRequest"
	if m == nil {
		return nil, fmt.Errorf("%w: nil %s", ErrInvalid, msg)
	}
	if err := checkString(m.GetNamespace(), true); err != nil {
		return nil, invalid(msg+".namespace", err)
	}
	if err := checkString(m.GetOwner(), false); err != nil {
		return nil, invalid(msg+".owner", err)
	}
	if err := checkString(m.GetAddr(), false); err != nil {
		return nil, invalid(msg+".addr", err)
	}
	held, err := leasesFromPB(msg+".held", m.GetHeld())
	if err != nil {
		return nil, err
	}
	if m.GetHeldAsAcked() && len(held) > 0 {
		return nil, fmt.Errorf("%w: %s: held_as_acked set and %d leases in held; the compact form lists none",
			ErrInvalid, msg, len(held))
	}
	handed, err := handedFromPB(msg+".handed", m.GetHanded())
	if err != nil {
		return nil, err
	}
	if err := checkCapacity(m.GetCapacity()); err != nil {
		return nil, invalid(msg+".capacity", err)
	}
	load, err := loadFromPB(msg+".load", m.GetLoad())
	if err != nil {
		return nil, err
	}
	hot, err := keysFromPB(msg+".hot_keys", m.GetHotKeys())
	if err != nil {
		return nil, err
	}
	if err := checkDuration(m.GetWindowNanos()); err != nil {
		return nil, invalid(msg+".window_nanos", err)
	}
	if w := m.GetWindowNanos(); w > 0 && w < int64(protocol.MinLoadWindow) {
		return nil, invalid(msg+".window_nanos", fmt.Errorf("%s is shorter than the %s allowed (protocol.MinLoadWindow)", time.Duration(w), protocol.MinLoadWindow))
	}
	if err := checkZone(m.GetZone()); err != nil {
		return nil, invalid(msg+".zone", err)
	}
	inSync, err := inSyncFromPB(msg+".in_sync", m.GetInSync())
	if err != nil {
		return nil, err
	}
	return &protocol.LeaseRequest{
		Zone:        m.GetZone(),
		InSync:      inSync,
		Namespace:   m.GetNamespace(),
		Owner:       m.GetOwner(),
		Addr:        m.GetAddr(),
		Incarnation: m.GetIncarnation(),
		Seq:         m.GetSeq(),
		AckEpoch:    m.GetAckEpoch(),
		AckSeq:      m.GetAckSeq(),
		Held:        held,
		HeldAsAcked: m.GetHeldAsAcked(),
		Leaving:     m.GetLeaving(),
		Draining:    m.GetDraining(),
		Handed:      handed,
		Capacity:    m.GetCapacity(),
		Load:        load,
		HotKeys:     hot,
		Window:      time.Duration(m.GetWindowNanos()),
	}, nil
}

// LeaseResponseToPB converts the Manager's LeaseResponse to its wire form. It
// returns nil for nil.
func LeaseResponseToPB(r *protocol.LeaseResponse) *leaseholdv1.LeaseResponse {
	if r == nil {
		return nil
	}
	return &leaseholdv1.LeaseResponse{
		Namespace:       r.Namespace,
		Owner:           r.Owner,
		Incarnation:     r.Incarnation,
		Epoch:           r.Epoch,
		Seq:             r.Seq,
		AckSeq:          r.AckSeq,
		Leases:          leasesToPB(r.Leases),
		RenewHeld:       r.RenewHeld,
		OwnerLeaseNanos: int64(r.OwnerLease),
		RenewNanos:      int64(r.Renew),
		Handovers:       handoversToPB(r.Handovers),
		Drain:           uint32(r.Drain),
		Standbys:        standbysToPB(r.Standbys),
		StandbyFor:      standbysToPB(r.StandbyFor),
	}
}

// LeaseResponseFromPB converts and validates a LeaseResponse from the wire.
// It checks every lease's range and LGN and that the timings are not
// negative; the Owner's core checks that the response is addressed to it.
func LeaseResponseFromPB(m *leaseholdv1.LeaseResponse) (*protocol.LeaseResponse, error) {
	const msg = "LeaseResponse"
	if m == nil {
		return nil, fmt.Errorf("%w: nil %s", ErrInvalid, msg)
	}
	if err := checkString(m.GetNamespace(), false); err != nil {
		return nil, invalid(msg+".namespace", err)
	}
	if err := checkString(m.GetOwner(), false); err != nil {
		return nil, invalid(msg+".owner", err)
	}
	if err := checkDuration(m.GetOwnerLeaseNanos()); err != nil {
		return nil, invalid(msg+".owner_lease_nanos", err)
	}
	if err := checkDuration(m.GetRenewNanos()); err != nil {
		return nil, invalid(msg+".renew_nanos", err)
	}
	leases, err := leasesFromPB(msg+".leases", m.GetLeases())
	if err != nil {
		return nil, err
	}
	if m.GetRenewHeld() && len(leases) > 0 {
		return nil, fmt.Errorf("%w: %s: renew_held set and %d leases in leases; the compact form lists none",
			ErrInvalid, msg, len(leases))
	}
	handovers, err := handoversFromPB(msg+".handovers", m.GetHandovers())
	if err != nil {
		return nil, err
	}
	if err := checkDrain(m.GetDrain()); err != nil {
		return nil, invalid(msg+".drain", err)
	}
	standbys, err := standbysFromPB(msg+".standbys", m.GetStandbys())
	if err != nil {
		return nil, err
	}
	standbyFor, err := standbysFromPB(msg+".standby_for", m.GetStandbyFor())
	if err != nil {
		return nil, err
	}
	return &protocol.LeaseResponse{
		Standbys:    standbys,
		StandbyFor:  standbyFor,
		Namespace:   m.GetNamespace(),
		Owner:       m.GetOwner(),
		Incarnation: m.GetIncarnation(),
		Epoch:       m.GetEpoch(),
		Seq:         m.GetSeq(),
		AckSeq:      m.GetAckSeq(),
		Leases:      leases,
		RenewHeld:   m.GetRenewHeld(),
		OwnerLease:  time.Duration(m.GetOwnerLeaseNanos()),
		Renew:       time.Duration(m.GetRenewNanos()),
		Handovers:   handovers,
		Drain:       protocol.Drain(m.GetDrain()),
	}, nil
}

func leasesToPB(ls []protocol.Lease) []*leaseholdv1.Lease {
	if len(ls) == 0 {
		return nil
	}
	// One allocation per kind instead of two per lease.
	out := make([]*leaseholdv1.Lease, len(ls))
	leases := make([]leaseholdv1.Lease, len(ls))
	ranges := make([]leaseholdv1.Range, len(ls))
	for i := range ls {
		l, m, r := &ls[i], &leases[i], &ranges[i]
		r.Start, r.End = uint64(l.Range.Start), uint64(l.Range.End)
		m.Range = r
		m.Lgn = uint64(l.LGN)
		m.Grant = l.Grant
		m.Migrated = l.Migrated
		m.Promoted = l.Promoted
		out[i] = m
	}
	return out
}

// leasesFromPB converts the leases of field where (e.g.
// "LeaseRequest.held").
func leasesFromPB(where string, ms []*leaseholdv1.Lease) ([]protocol.Lease, error) {
	if len(ms) > MaxLeases {
		return nil, fmt.Errorf("%w: %s: %d leases; at most %d allowed", ErrInvalid, where, len(ms), MaxLeases)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]protocol.Lease, len(ms))
	for i, m := range ms {
		if m == nil {
			return nil, fmt.Errorf("%w: %s[%d]: nil lease", ErrInvalid, where, i)
		}
		r, err := rangeFromPB(m.GetRange())
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %v", ErrInvalid, where, i, err)
		}
		if m.GetLgn() == 0 {
			return nil, fmt.Errorf("%w: %s[%d]: lease on %v has LGN 0; a lease needs a non-zero LGN",
				ErrInvalid, where, i, r)
		}
		out[i] = protocol.Lease{
			Range:    r,
			LGN:      keyspace.LGN(m.GetLgn()),
			Grant:    m.GetGrant(),
			Migrated: m.GetMigrated(),
			Promoted: m.GetPromoted(),
		}
	}
	return out, nil
}
