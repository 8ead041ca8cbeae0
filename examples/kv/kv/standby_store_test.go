package kv

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// fakeRoles is the standby roles of one server, over the whole key space.
type fakeRoles struct {
	standby *owner.Standby // as holder
	holder  *owner.Holder  // as standby
}

func (f *fakeRoles) StandbyOf(keyspace.Key) (owner.Standby, bool) {
	if f.standby == nil {
		return owner.Standby{}, false
	}
	return *f.standby, true
}

func (f *fakeRoles) HolderOf(keyspace.Key) (owner.Holder, bool) {
	if f.holder == nil {
		return owner.Holder{}, false
	}
	return *f.holder, true
}

func (f *fakeRoles) CheckStandbyWrite(k keyspace.Key, from string, lease owner.LeaseNum, sgn owner.SGN) error {
	h := f.holder
	switch {
	case h == nil:
		return &owner.StandbyRefusal{Reason: owner.NotStandby, Key: k, From: from}
	case h.ID != from || h.Lease != lease:
		return &owner.StandbyRefusal{Reason: owner.StaleHolder, Key: k, From: from, Want: *h}
	case h.SGN != sgn:
		return &owner.StandbyRefusal{Reason: owner.StaleSGN, Key: k, From: from, Want: *h}
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
	roles := &fakeRoles{}
	s := newStore()
	s.setRoles(f, roles)

	w, err := s.putWrite("a", []byte("1"))
	if err != nil || w.standby.ID != "" {
		t.Fatalf("no standby: %+v, %v; want a write acknowledged on its own", w, err)
	}
	roles.standby = &owner.Standby{Range: keyspace.Full, Lease: f.n, ID: "kv-2", Addr: "b", SGN: 3}
	w, err = s.putWrite("a", []byte("2"))
	if err != nil || w.standby.ID != "kv-2" || w.lease != f.n || w.seq != 2 {
		t.Fatalf("with a standby: %+v, %v; want the write for kv-2, number 2", w, err)
	}
	roles.standby = &owner.Standby{Range: keyspace.Full, Lease: owner.LeaseNum{Epoch: 1, LGN: 4}, ID: "kv-2", SGN: 3}
	if _, err := s.putWrite("a", []byte("3")); !errors.Is(err, errStandbyUnknown) {
		t.Fatalf("roles of an older lease: %v, want %v", err, errStandbyUnknown)
	}
	if v, _ := mustGet(t, s, "a"); v != "2" {
		t.Errorf("a = %q, want 2: a write that waits is not stored", v)
	}
	roles.standby = &owner.Standby{Range: keyspace.Full, Lease: f.n, SGN: 4} // no standby under SGN 4
	if w, err := s.putWrite("a", []byte("4")); err != nil || w.standby.ID != "" {
		t.Fatalf("a role without a standby: %+v, %v", w, err)
	}
}

// TestStandbyFence: the standby stores only writes of the holder, lease and
// SGN it knows; the later write of a key wins whatever the order of
// arrival; the first batch of a fill replaces what was kept under another
// SGN.
func TestStandbyFence(t *testing.T) {
	lease := owner.LeaseNum{Epoch: 1, LGN: 7}
	roles := &fakeRoles{holder: &owner.Holder{Range: keyspace.Full, ID: "kv-1", Lease: lease, SGN: 3}}
	s := newStore()
	s.setRoles(&fakeLeases{}, roles)
	put := func(from string, l owner.LeaseNum, sgn owner.SGN, key, value string, seq uint64) error {
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
		sgn   owner.SGN
		want  owner.StandbyRefusalReason
	}{
		{"kv-9", lease, 3, owner.StaleHolder},
		{"kv-1", owner.LeaseNum{Epoch: 1, LGN: 6}, 3, owner.StaleHolder},
		{"kv-1", lease, 2, owner.StaleSGN},
	} {
		err := put(c.from, c.lease, c.sgn, "b", "x", 10)
		if ref, ok := errors.AsType[*owner.StandbyRefusal](err); !ok || ref.Reason != c.want {
			t.Errorf("from %s under %v, SGN %d: %v; want a refusal %s", c.from, c.lease, c.sgn, err, c.want)
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
