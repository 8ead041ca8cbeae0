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
