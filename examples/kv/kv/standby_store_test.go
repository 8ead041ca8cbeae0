package kv

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// fakeRoles is the standby roles of one server, over the whole key space
// but for inner, a pairing this server stands by for over a range of its
// own.
type fakeRoles struct {
	leases  *fakeLeases
	standby *owner.Pairing // as holder; nil: the lease has none
	holder  *owner.Pairing // as standby
	inner   *owner.Pairing // as standby, over inner.Range
}

// holderAt is the pairing this server stands by for at k.
func (f *fakeRoles) holderAt(k keyspace.Key) *owner.Pairing {
	if f.inner != nil && f.inner.Range.Contains(k) {
		return f.inner
	}
	return f.holder
}

func (f *fakeRoles) StandbyOf(keyspace.Key) (owner.Pairing, bool) {
	if !f.leases.held {
		return owner.Pairing{}, false
	}
	if f.standby == nil {
		return owner.Pairing{Lease: f.leases.n}, true
	}
	return *f.standby, true
}

func (f *fakeRoles) HolderOf(k keyspace.Key) (owner.Pairing, bool) {
	h := f.holderAt(k)
	if h == nil {
		return owner.Pairing{}, false
	}
	return *h, true
}

func (f *fakeRoles) CheckStandbyWrite(k keyspace.Key, from string, lease owner.LeaseNum, sgn protocol.SGN) error {
	h := f.holderAt(k)
	refuse := func(why string) error {
		return &owner.StandbyRefusal{Key: k, Holder: from, Lease: lease, SGN: sgn, Reason: why}
	}
	switch {
	case h == nil:
		return refuse("not the standby")
	case h.Peer != from || h.Lease != lease:
		return refuse("stale holder")
	case h.SGN != sgn:
		return refuse("stale SGN")
	}
	return nil
}

// TestPutWaitsForItsStandby: a write on a range with a standby is stored
// and handed back for the standby, without step (4); one whose lease is
// newer than the roles known waits for them; a range whose role names no
// standby acknowledges on its own copy.
func TestPutWaitsForItsStandby(t *testing.T) {
	f := &fakeLeases{}
	f.grant(5)
	roles := &fakeRoles{leases: f}
	s := newStore()
	s.setRoles(f, roles)

	w, err := s.putWrite("a", []byte("1"))
	if err != nil || w.standby.Peer != "" {
		t.Fatalf("no standby: %+v, %v; want a write acknowledged on its own", w, err)
	}
	roles.standby = &owner.Pairing{Range: keyspace.Full, Lease: f.n, Peer: "kv-2", Addr: "b", SGN: 3}
	w, err = s.putWrite("a", []byte("2"))
	if err != nil || w.standby.Peer != "kv-2" || w.lease != f.n || w.seq != 2 {
		t.Fatalf("with a standby: %+v, %v; want the write for kv-2, number 2", w, err)
	}
	roles.standby = &owner.Pairing{Range: keyspace.Full, Lease: owner.LeaseNum{Epoch: 1, LGN: 4}, Peer: "kv-2", SGN: 3}
	if _, err := s.putWrite("a", []byte("3")); !errors.Is(err, errStandbyUnknown) {
		t.Fatalf("roles of an older lease: %v, want %v", err, errStandbyUnknown)
	}
	if v, _ := mustGet(t, s, "a"); v != "2" {
		t.Errorf("a = %q, want 2: a write that waits is not stored", v)
	}
	roles.standby = &owner.Pairing{Range: keyspace.Full, Lease: f.n, SGN: 4} // no standby under SGN 4
	if w, err := s.putWrite("a", []byte("4")); err != nil || w.standby.Peer != "" {
		t.Fatalf("a role without a standby: %+v, %v", w, err)
	}
}

// TestStandbyFence: the standby stores only writes of the holder, lease and
// SGN it knows; the later write of a key wins whatever the order of
// arrival; the first batch of a fill replaces what was kept under another
// SGN.
func TestStandbyFence(t *testing.T) {
	lease := owner.LeaseNum{Epoch: 1, LGN: 7}
	f := &fakeLeases{}
	roles := &fakeRoles{leases: f, holder: &owner.Pairing{Range: keyspace.Full, Peer: "kv-1", Lease: lease, SGN: 3}}
	s := newStore()
	s.setRoles(f, roles)
	put := func(from string, l owner.LeaseNum, sgn protocol.SGN, key, value string, seq uint64) error {
		return s.replicate(replica{from: from, r: keyspace.Full, lease: l, sgn: sgn,
			entries: []replicaEntry{{Key: key, Value: []byte(value), Seq: seq}}})
	}
	if err := put("kv-1", lease, 3, "a", "new", 9); err != nil {
		t.Fatal(err)
	}
	if err := put("kv-1", lease, 3, "a", "old", 8); err != nil {
		t.Fatal(err)
	}
	if got := string(s.copies["a"].value); got != "new" {
		t.Errorf("a = %q after an earlier write arrived late: want new", got)
	}
	for _, c := range []struct {
		from  string
		lease owner.LeaseNum
		sgn   protocol.SGN
	}{
		{"kv-9", lease, 3},
		{"kv-1", owner.LeaseNum{Epoch: 1, LGN: 6}, 3},
		{"kv-1", lease, 2},
	} {
		if err := put(c.from, c.lease, c.sgn, "b", "x", 10); !errors.Is(err, owner.ErrNotStandby) {
			t.Errorf("from %s under %v, SGN %d: %v; want a refusal", c.from, c.lease, c.sgn, err)
		}
	}
	if _, ok := s.copies["b"]; ok {
		t.Error("a refused write was kept")
	}
	// A new naming of this standby (SGN 4): the holder's fill replaces
	// the copy of SGN 3.
	roles.holder.SGN = 4
	if err := put("kv-1", lease, 4, "c", "during the fill", 11); err != nil {
		t.Fatal(err)
	}
	err := s.replicate(replica{from: "kv-1", r: keyspace.Full, lease: lease, sgn: 4, fill: true, first: true,
		entries: []replicaEntry{{Key: "d", Value: []byte("filled"), Seq: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.copies["a"]; ok {
		t.Error("the fill under SGN 4 kept a value of SGN 3")
	}
	if string(s.copies["c"].value) != "during the fill" || string(s.copies["d"].value) != "filled" {
		t.Errorf("copies after the fill: %v", s.copies)
	}
	roles.holder = nil
	if err := put("kv-1", lease, 4, "e", "x", 12); err == nil {
		t.Error("a server that is no longer standby kept a write")
	}
	s.standbyChanged()
	if len(s.copies) != 0 {
		t.Errorf("%d copies kept after the role went", len(s.copies))
	}
}

// TestPromotedServesTheCopy: a standby granted its holder's range marked
// promoted serves the copy it kept, under its new lease, even before the
// upcall reports the grant; a grant that is not a promotion drops it.
func TestPromotedServesTheCopy(t *testing.T) {
	for _, promotedGrant := range []bool{true, false} {
		holderLease := owner.LeaseNum{Epoch: 1, LGN: 7}
		f := &fakeLeases{}
		roles := &fakeRoles{leases: f, holder: &owner.Pairing{Range: keyspace.Full, Peer: "kv-1", Lease: holderLease, SGN: 3}}
		s := newStore()
		s.setRoles(f, roles)
		err := s.replicate(replica{from: "kv-1", r: keyspace.Full, lease: holderLease, sgn: 3, fill: true, first: true,
			entries: []replicaEntry{{Key: "a", Value: []byte("kept"), Seq: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		// The holder's lease ended; the Manager grants the range here.
		f.grant(9)
		f.promoted = promotedGrant
		roles.holder = nil
		if !promotedGrant {
			// Until the upcall reports the grant, it may yet be a
			// promotion the held set shows late: the read waits.
			if _, _, err := s.get("a"); !errors.Is(err, errArriving) {
				t.Fatalf("a grant not yet reported: get: %v, want %v", err, errArriving)
			}
			s.changed(owner.OwnershipChange{Granted: f.Held()})
		}
		v, found, err := s.get("a")
		switch {
		case err != nil:
			t.Fatalf("promoted %v: get: %v", promotedGrant, err)
		case promotedGrant && (!found || string(v) != "kept"):
			t.Errorf("a promoted grant: get a = %q, %v; want the copy kept as standby", v, found)
		case !promotedGrant && found:
			t.Errorf("a grant that is not a promotion: get a = %q; want not found", v)
		}
		if copies, _ := s.copyCounts(); copies != 0 {
			t.Errorf("promoted %v: %d copies left after the grant settled", promotedGrant, copies)
		}
	}
}

// TestFillKeepsAnotherLeasesCopy: the first batch of a fill replaces what
// was kept under another SGN only on the keys of the fill's own pairing. A
// lease's range runs from its first piece to its last, so it may span a
// piece granted to another holder this server also stands by for; that
// copy is the other lease's, which may be promoted onto it, and stays.
func TestFillKeepsAnotherLeasesCopy(t *testing.T) {
	outer := owner.LeaseNum{Epoch: 1, LGN: 7}
	inner := owner.LeaseNum{Epoch: 1, LGN: 9}
	mid := keyspace.KeyOf("m")
	f := &fakeLeases{}
	roles := &fakeRoles{leases: f,
		holder: &owner.Pairing{Range: keyspace.Full, Peer: "kv-1", Lease: outer, SGN: 4},
		inner:  &owner.Pairing{Range: keyspace.Range{Start: mid, End: mid + 1}, Peer: "kv-3", Lease: inner, SGN: 2}}
	s := newStore()
	s.setRoles(f, roles)
	if err := s.replicate(replica{from: "kv-3", r: roles.inner.Range, lease: inner, sgn: 2,
		entries: []replicaEntry{{Key: "m", Value: []byte("kv-3's"), Seq: 1}}}); err != nil {
		t.Fatal(err)
	}
	s.copies["stale"] = copyItem{key: keyspace.KeyOf("stale"), value: []byte("old"), lease: outer, seq: 1, sgn: 3}
	if err := s.replicate(replica{from: "kv-1", r: keyspace.Full, lease: outer, sgn: 4, fill: true, first: true,
		entries: []replicaEntry{{Key: "d", Value: []byte("filled"), Seq: 5}}}); err != nil {
		t.Fatal(err)
	}
	if c, ok := s.copies["m"]; !ok || string(c.value) != "kv-3's" {
		t.Errorf("kv-1's fill across kv-3's piece dropped kv-3's acknowledged write: copies %v", s.copies)
	}
	if _, ok := s.copies["stale"]; ok {
		t.Error("the fill under SGN 4 kept a value of its own pairing's SGN 3")
	}
}
