package sim

import (
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// TestContinuityIsKeyByKey checks the continuity rule the checker applies
// to each lease an Owner run believes after a step: a key believed under
// a lease number, then not, then again, is a gap; a piece of the same
// lease the run never believed is not, even when every piece it believed
// is gone (a lease comes in pieces: the Manager may list one piece, ask for
// its handover, and list another once the desired assignment gives it back).
func TestContinuityIsKeyByKey(t *testing.T) {
	num := owner.LeaseNum{Epoch: 3, LGN: 197}
	a := keyspace.Range{Start: 0x148b, End: 0x14c6} // never believed before
	b := keyspace.Range{Start: 0x14c6, End: 0x14e3} // believed, then handed over
	whole := keyspace.Range{Start: a.Start, End: b.End}
	lease := func(r keyspace.Range) owner.Lease { return owner.Lease{Range: r, Num: num} }
	set := func(rs ...keyspace.Range) beliefs { return beliefs{num: keyspace.NewRangeSet(rs...)} }

	for _, tc := range []struct {
		name         string
		ever, before beliefs
		now          keyspace.Range
		gap          keyspace.RangeSet
	}{
		{"first belief", beliefs{}, beliefs{}, a, keyspace.RangeSet{}},
		{"renewed", set(a), set(a), a, keyspace.RangeSet{}},
		{"another piece after the last believed one is gone", set(b), beliefs{}, a, keyspace.RangeSet{}},
		{"another piece while one is held", set(b), set(b), a, keyspace.RangeSet{}},
		{"the same piece after it was gone", set(b), beliefs{}, b, keyspace.NewRangeSet(b)},
		{"a range over a gone piece", set(b), beliefs{}, whole, keyspace.NewRangeSet(b)},
		{"part of it gone, all of it again", set(whole), set(a), whole, keyspace.NewRangeSet(b)},
		{"another lease number", beliefs{owner.LeaseNum{Epoch: 3, LGN: 196}: keyspace.NewRangeSet(b)}, beliefs{}, b, keyspace.RangeSet{}},
	} {
		got := regained(tc.ever, tc.before, lease(tc.now))
		if !got.Equal(tc.gap) {
			t.Errorf("%s: gap %v, want %v", tc.name, got, tc.gap)
		}
	}

	// beliefs.add keeps the union of what was believed.
	b2 := beliefs{}
	b2.add(lease(a))
	b2.add(lease(b))
	b2.add(lease(a))
	if got := b2[num]; !got.Equal(keyspace.NewRangeSet(whole)) {
		t.Errorf("add: %v, want %v", got, whole)
	}
}
