package kv

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// TestFillSettlesFirst: a fill started before the upcall reporting its
// lease's grant copies the state the grant carries — the copy a promoted
// grant takes up, the values a migrated one was handed — and waits while
// the grant is not known to carry state or not; never an empty copy the
// standby would report in sync.
func TestFillSettlesFirst(t *testing.T) {
	for _, kind := range []string{"promoted", "migrated", "unknown"} {
		f := &fakeLeases{}
		holderLease := owner.LeaseNum{Epoch: 1, LGN: 7}
		roles := &fakeRoles{leases: f, holder: &owner.Pairing{Range: keyspace.Full, Peer: "kv-1", Lease: holderLease, SGN: 3}}
		s := newStore()
		s.setRoles(f, roles)
		switch kind {
		case "promoted", "unknown":
			err := s.replicate(replica{from: "kv-1", r: keyspace.Full, lease: holderLease, sgn: 3, fill: true, first: true,
				entries: []replicaEntry{{Key: "a", Value: []byte("kept"), Seq: 1}}})
			if err != nil {
				t.Fatal(err)
			}
		case "migrated":
			s.receive(keyspace.Full, holderLease, []entry{{Key: "a", Value: []byte("kept")}}, time.Now().Add(time.Hour))
		}
		// The range is granted here, with a new standby, and the fill
		// starts before the upcall reports the grant.
		f.grant(9)
		f.promoted, f.migrated = kind == "promoted", kind == "migrated"
		roles.holder = nil
		got, _, err := s.fillCopy(owner.Pairing{Range: keyspace.Full, Lease: f.n, SGN: 4, Peer: "kv-3"})
		if kind == "unknown" {
			if !errors.Is(err, errArriving) {
				t.Errorf("a grant not known to carry state: fill %v, %v; want %v", got, err, errArriving)
			}
			continue
		}
		if err != nil || len(got) != 1 || got[0].Key != "a" || string(got[0].Value) != "kept" {
			t.Errorf("a %s grant not yet reported: fill %+v, %v; want a = kept", kind, got, err)
		}
	}
}

// TestFillGoesOnAfterFirstPieceRecalled: a fill goes on while any piece
// of its lease keeps the pairing, not only the range's first.
func TestFillGoesOnAfterFirstPieceRecalled(t *testing.T) {
	n := owner.LeaseNum{Epoch: 1, LGN: 9}
	sb := owner.Pairing{Range: keyspace.Range{Start: 0, End: 200}, Lease: n, SGN: 4, Peer: "kv-3"}
	held := []owner.Lease{{Range: keyspace.Range{Start: 100, End: 200}, Num: n}} // [0,100) recalled
	standbyOf := func(k keyspace.Key) (owner.Pairing, bool) {
		if k < 100 || k >= 200 {
			return owner.Pairing{}, false
		}
		return sb, true
	}
	if !pairingHeld(sb, held, standbyOf) {
		t.Fatal("the fill stops when the lease's first piece is recalled, though the rest keeps the pairing")
	}
	if pairingHeld(sb, nil, standbyOf) {
		t.Fatal("the fill goes on with no piece of the lease held")
	}
	other := sb
	other.SGN = 5
	if pairingHeld(sb, held, func(keyspace.Key) (owner.Pairing, bool) { return other, true }) {
		t.Fatal("the fill goes on under a pairing replaced since")
	}
}

// piecesLeases is fakeLeases holding only the pieces given.
type piecesLeases struct {
	*fakeLeases
	pieces []keyspace.Range
}

func (p piecesLeases) Held() []owner.Lease {
	var out []owner.Lease
	for _, r := range p.pieces {
		out = append(out, owner.Lease{Range: r, Num: p.n, Expiry: time.Now().Add(time.Hour)})
	}
	return out
}

// TestFillNamesHeldPieces (docs/design.md rule 23): a fill names the
// pieces of its lease this server holds when it copies them, clipped to
// the pairing's range, and no others: a piece it dropped before the copy
// is not in it, and must not be reported in sync. The standby refuses a
// fill naming pieces outside its range or before its last batch.
func TestFillNamesHeldPieces(t *testing.T) {
	f := &fakeLeases{}
	f.grant(9)
	held := []keyspace.Range{{Start: 0, End: 50}, {Start: 120, End: 300}} // [50, 120) dropped
	s := newStore()
	s.setRoles(piecesLeases{f, held}, &fakeRoles{leases: f})
	_, pieces, err := s.fillCopy(owner.Pairing{Range: keyspace.Range{Start: 0, End: 200}, Lease: f.n, SGN: 4, Peer: "kv-3"})
	want := []keyspace.Range{{Start: 0, End: 50}, {Start: 120, End: 200}}
	if err != nil || !slices.Equal(pieces, want) {
		t.Fatalf("fill names %v, %v; want %v", pieces, err, want)
	}
	m := replicateRequest{From: "kv-1", To: "kv-3", Start: 0, End: 200, Epoch: 1, LGN: 9, SGN: 4, Fill: true, Last: true,
		Pieces: []span{{Start: 150, End: 250}}}
	if err := m.validate(); err == nil {
		t.Error("a fill naming a piece outside its range passes validation")
	}
	m.Pieces, m.Last = []span{{Start: 0, End: 50}}, false
	if err := m.validate(); err == nil {
		t.Error("a fill naming pieces before its last batch passes validation")
	}
	m.Last = true
	if err := m.validate(); err != nil {
		t.Errorf("a fill's last batch naming a piece of its range: %v", err)
	}
}
