package kv

import (
	"errors"
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
		got, err := s.fillCopy(owner.Pairing{Range: keyspace.Full, Lease: f.n, SGN: 4, Peer: "kv-3"})
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
