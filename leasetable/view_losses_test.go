package leasetable

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// TestApplyByOwner: the lost ranges of a delta, a snapshot and a reset are
// grouped by the Owner that held them; a migration loses nothing, and the
// groups together are exactly the lost ranges.
func TestApplyByOwner(t *testing.T) {
	q := keyspace.Key(1) << 62 // a quarter of the key space
	// 4·q wraps to 0: the end of the key space.
	r := func(i, j keyspace.Key) keyspace.Range { return keyspace.Range{Start: i * q, End: j * q} }
	a := Entry{Owner: "a", Addr: "a:1", LGN: 1}
	b := Entry{Owner: "b", Addr: "b:1", LGN: 2}
	v := NewView()
	if _, err := v.Apply(Update{From: 0, To: 1, Snapshot: true, Segments: []Segment{
		{Range: r(0, 2), Entry: a}, {Range: r(2, 4), Entry: b}}}); err != nil {
		t.Fatal(err)
	}
	// a loses [0, 1) to c; b's [2, 3) moves to c with its state; b loses [3, 4).
	c5 := Entry{Owner: "c", Addr: "c:1", LGN: 5}
	c6 := Entry{Owner: "c", Addr: "c:1", LGN: 6, Migrated: true, MigratedFrom: 2}
	lost, by, err := v.ApplyByOwner(Update{From: 1, To: 4, Changes: []Change{
		{LSN: 2, Range: r(0, 1), Entry: c5}, {LSN: 3, Range: r(2, 3), Entry: c6}, {LSN: 4, Range: r(3, 4), Entry: Entry{}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []OwnerRanges{{Owner: "a", Addr: "a:1", Ranges: []keyspace.Range{r(0, 1)}}, {Owner: "b", Addr: "b:1", Ranges: []keyspace.Range{r(3, 4)}}}
	if !slices.Equal(lost, []keyspace.Range{r(0, 1), r(3, 4)}) || !sameGroups(by, want) {
		t.Fatalf("delta: lost %v by %v; want %v", lost, by, want)
	}
	// A snapshot that gives everything to d: a, b's rest and c lose.
	d := Entry{Owner: "d", Addr: "d:1", LGN: 9}
	lost, by, err = v.ApplyByOwner(Update{To: 5, Snapshot: true, Segments: []Segment{{Range: keyspace.Full, Entry: d}}})
	if err != nil {
		t.Fatal(err)
	}
	want = []OwnerRanges{{Owner: "a", Addr: "a:1", Ranges: []keyspace.Range{r(1, 2)}},
		{Owner: "c", Addr: "c:1", Ranges: []keyspace.Range{r(0, 1), r(2, 3)}}}
	if !slices.Equal(lost, []keyspace.Range{r(0, 3)}) || !sameGroups(by, want) {
		t.Fatalf("snapshot: lost %v by %v; want %v", lost, by, want)
	}
	lost, by = v.ResetByOwner()
	want = []OwnerRanges{{Owner: "d", Addr: "d:1", Ranges: []keyspace.Range{keyspace.Full}}}
	if !slices.Equal(lost, []keyspace.Range{keyspace.Full}) || !sameGroups(by, want) {
		t.Fatalf("reset: lost %v by %v; want %v", lost, by, want)
	}
	// An Apply afterwards reports no groups of its own (the hook is gone).
	if _, err := v.Apply(Update{To: 6, Snapshot: true, Segments: []Segment{{Range: keyspace.Full, Entry: a}}}); err != nil || v.lostFrom != nil {
		t.Fatalf("Apply after ApplyByOwner: %v, hook %v", err, v.lostFrom != nil)
	}
}

func sameGroups(a, b []OwnerRanges) bool {
	return slices.EqualFunc(a, b, func(x, y OwnerRanges) bool {
		return x.Owner == y.Owner && x.Addr == y.Addr && slices.Equal(x.Ranges, y.Ranges)
	})
}
