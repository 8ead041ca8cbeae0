package wire

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// SyncRequestToPB converts a Lookup's SyncRequest to its wire form. It
// returns nil for nil.
func SyncRequestToPB(r *protocol.SyncRequest) *leaseholdv1.SyncRequest {
	if r == nil {
		return nil
	}
	return &leaseholdv1.SyncRequest{
		Namespace: r.Namespace,
		Id:        r.ID,
		Epoch:     r.Epoch,
		Lsn:       uint64(r.LSN),
		NamesOnce: r.Heartbeats,
		MaxDrift:  r.MaxDrift,
	}
}

// SyncRequestFromPB converts and validates a SyncRequest from the wire. It
// requires a namespace.
func SyncRequestFromPB(m *leaseholdv1.SyncRequest) (*protocol.SyncRequest, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil SyncRequest", ErrInvalid)
	}
	if err := checkString(m.GetNamespace(), true); err != nil {
		return nil, invalid("SyncRequest.namespace", err)
	}
	if err := checkDrift(m.GetMaxDrift()); err != nil {
		return nil, invalid("SyncRequest.max_drift", err)
	}
	return &protocol.SyncRequest{
		Namespace: m.GetNamespace(),
		ID:        m.GetId(),
		Epoch:     m.GetEpoch(),
		LSN:       keyspace.LSN(m.GetLsn()),
		// A Lookup that says names_once reads heartbeats too: both came
		// with the same release of the sync stream.
		Heartbeats: m.GetNamesOnce(),
		MaxDrift:   m.GetMaxDrift(),
	}, nil
}

// SyncResponseToPB converts the Manager's SyncResponse, with its delta or
// snapshot, to its wire form. It returns nil for nil.
func SyncResponseToPB(r *protocol.SyncResponse) *leaseholdv1.SyncResponse {
	if r == nil {
		return nil
	}
	return &leaseholdv1.SyncResponse{
		Namespace:         r.Namespace,
		Id:                r.ID,
		Epoch:             r.Epoch,
		Update:            UpdateToPB(&r.Update),
		SyncNanos:         int64(r.Sync),
		SyncTimeoutNanos:  int64(r.SyncTimeout),
		MaxDrift:          r.MaxDrift,
		Request:           r.Request,
		SinceRequestNanos: int64(r.SinceRequest),
	}
}

// SyncResponseFromPB converts and validates a SyncResponse from the wire. The
// update is required; see UpdateFromPB for what is checked.
func SyncResponseFromPB(m *leaseholdv1.SyncResponse) (*protocol.SyncResponse, error) {
	const msg = "SyncResponse"
	if m == nil {
		return nil, fmt.Errorf("%w: nil %s", ErrInvalid, msg)
	}
	if err := checkString(m.GetNamespace(), false); err != nil {
		return nil, invalid(msg+".namespace", err)
	}
	if err := checkDuration(m.GetSyncNanos()); err != nil {
		return nil, invalid(msg+".sync_nanos", err)
	}
	if err := checkDuration(m.GetSyncTimeoutNanos()); err != nil {
		return nil, invalid(msg+".sync_timeout_nanos", err)
	}
	if err := checkDrift(m.GetMaxDrift()); err != nil {
		return nil, invalid(msg+".max_drift", err)
	}
	if err := checkDuration(m.GetSinceRequestNanos()); err != nil {
		return nil, invalid(msg+".since_request_nanos", err)
	}
	if m.GetUpdate() == nil {
		return nil, invalid(msg+".update", errors.New("missing update"))
	}
	u, err := updateFromPB(msg+".update", m.GetUpdate())
	if err != nil {
		return nil, err
	}
	return &protocol.SyncResponse{
		Namespace:    m.GetNamespace(),
		ID:           m.GetId(),
		Epoch:        m.GetEpoch(),
		Update:       u,
		Sync:         time.Duration(m.GetSyncNanos()),
		SyncTimeout:  time.Duration(m.GetSyncTimeoutNanos()),
		MaxDrift:     m.GetMaxDrift(),
		Request:      m.GetRequest(),
		SinceRequest: time.Duration(m.GetSinceRequestNanos()),
	}, nil
}

// UpdateToPB converts a lease-table delta or snapshot to its wire form. It
// returns nil for nil.
func UpdateToPB(u *leasetable.Update) *leaseholdv1.Update {
	if u == nil {
		return nil
	}
	m := &leaseholdv1.Update{
		From:     uint64(u.From),
		To:       uint64(u.To),
		Snapshot: u.Snapshot,
		Merged:   u.Merged,
	}
	// A snapshot has thousands of segments: allocate the messages of each
	// kind in one slice rather than three allocations per item.
	if n := len(u.Changes); n > 0 {
		m.Changes = make([]*leaseholdv1.Change, n)
		changes := make([]leaseholdv1.Change, n)
		ranges := make([]leaseholdv1.Range, n)
		entries := make([]leaseholdv1.Entry, n)
		for i := range u.Changes {
			c, pc, r, e := &u.Changes[i], &changes[i], &ranges[i], &entries[i]
			r.Start, r.End = uint64(c.Range.Start), uint64(c.Range.End)
			entryToPB(&c.Entry, e)
			pc.Lsn, pc.Range, pc.Entry, pc.ViaFree = uint64(c.LSN), r, e, c.ViaFree
			m.Changes[i] = pc
		}
	}
	if n := len(u.Segments); n > 0 {
		m.Segments = make([]*leaseholdv1.Segment, n)
		segs := make([]leaseholdv1.Segment, n)
		ranges := make([]leaseholdv1.Range, n)
		entries := make([]leaseholdv1.Entry, n)
		for i := range u.Segments {
			s, ps, r, e := &u.Segments[i], &segs[i], &ranges[i], &entries[i]
			r.Start, r.End = uint64(s.Range.Start), uint64(s.Range.End)
			entryToPB(&s.Entry, e)
			ps.Range, ps.Entry = r, e
			m.Segments[i] = ps
		}
	}
	return m
}

// UpdateFromPB converts and validates a lease-table delta or snapshot from
// the wire: every range valid, every entry valid (leasetable.Entry.Validate),
// at most MaxUpdateItems items, and no segments in a delta nor changes in a
// snapshot. It leaves to leasetable.View.Apply whether the LSNs follow on and
// whether a snapshot covers the key space.
func UpdateFromPB(m *leaseholdv1.Update) (leasetable.Update, error) {
	if m == nil {
		return leasetable.Update{}, fmt.Errorf("%w: nil Update", ErrInvalid)
	}
	return updateFromPB("Update", m)
}

func updateFromPB(where string, m *leaseholdv1.Update) (leasetable.Update, error) {
	changes, segments := m.GetChanges(), m.GetSegments()
	if n := len(changes) + len(segments); n > MaxUpdateItems {
		return leasetable.Update{}, fmt.Errorf("%w: %s: %d changes and segments; at most %d allowed",
			ErrInvalid, where, n, MaxUpdateItems)
	}
	u := leasetable.Update{
		From:     keyspace.LSN(m.GetFrom()),
		To:       keyspace.LSN(m.GetTo()),
		Snapshot: m.GetSnapshot(),
		Merged:   m.GetMerged(),
	}
	if u.Snapshot && u.Merged {
		return leasetable.Update{}, fmt.Errorf("%w: %s: a snapshot cannot be merged", ErrInvalid, where)
	}
	if u.Snapshot && len(changes) > 0 {
		return leasetable.Update{}, fmt.Errorf("%w: %s: snapshot carries %d changes; a snapshot has only segments",
			ErrInvalid, where, len(changes))
	}
	if cc := m.GetCompact(); cc != nil {
		switch {
		case u.Snapshot:
			return leasetable.Update{}, fmt.Errorf("%w: %s: a snapshot cannot carry compact changes", ErrInvalid, where)
		case len(changes)+len(segments) > 0:
			return leasetable.Update{}, fmt.Errorf("%w: %s: %v", ErrInvalid, where, errCompactAndChanges)
		}
		if err := compactFromPB(where, &u, cc); err != nil {
			return leasetable.Update{}, err
		}
		return u, nil
	}
	if !u.Snapshot && len(segments) > 0 {
		return leasetable.Update{}, fmt.Errorf("%w: %s: delta carries %d segments; a delta has only changes",
			ErrInvalid, where, len(segments))
	}
	if len(changes) > 0 {
		u.Changes = make([]leasetable.Change, len(changes))
		for i, pc := range changes {
			if pc == nil {
				return leasetable.Update{}, fmt.Errorf("%w: %s.changes[%d]: nil change", ErrInvalid, where, i)
			}
			r, err := rangeFromPB(pc.GetRange())
			if err != nil {
				return leasetable.Update{}, fmt.Errorf("%w: %s.changes[%d]: %v", ErrInvalid, where, i, err)
			}
			e, err := entryFromPB(pc.GetEntry())
			if err != nil {
				return leasetable.Update{}, fmt.Errorf("%w: %s.changes[%d] on %v: %v", ErrInvalid, where, i, r, err)
			}
			if pc.GetViaFree() && (!u.Merged || e.Owner == "") {
				return leasetable.Update{}, fmt.Errorf("%w: %s.changes[%d] on %v: via_free needs a merged delta and an owner",
					ErrInvalid, where, i, r)
			}
			u.Changes[i] = leasetable.Change{LSN: keyspace.LSN(pc.GetLsn()), Range: r, Entry: e, ViaFree: pc.GetViaFree()}
		}
	}
	if len(segments) > 0 {
		u.Segments = make([]leasetable.Segment, len(segments))
		for i, ps := range segments {
			if ps == nil {
				return leasetable.Update{}, fmt.Errorf("%w: %s.segments[%d]: nil segment", ErrInvalid, where, i)
			}
			r, err := rangeFromPB(ps.GetRange())
			if err != nil {
				return leasetable.Update{}, fmt.Errorf("%w: %s.segments[%d]: %v", ErrInvalid, where, i, err)
			}
			e, err := entryFromPB(ps.GetEntry())
			if err != nil {
				return leasetable.Update{}, fmt.Errorf("%w: %s.segments[%d] on %v: %v", ErrInvalid, where, i, r, err)
			}
			u.Segments[i] = leasetable.Segment{Range: r, Entry: e}
		}
	}
	return u, nil
}
