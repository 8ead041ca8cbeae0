package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// settleOn waits until the Owners ids hold every range, as the Manager
// places them, and returns leasehold status then. settle waits for the
// table to stay unchanged for a second (quiet), which costs that second at
// every step of a scenario; settleOn knows where the transitions end. The
// Manager moves ranges only towards its desired assignment, consistent
// hashing of its members' IDs (assign.ConsistentHash, its policy unless
// told otherwise, at the capacity 1 kv serve reports), so once r's copy of
// the table is that assignment of ids, with no range free, no recall or
// grant is left to come until the members change. It polls r's copy, which
// the Manager pushes to it, and runs leasehold status, a process, only once
// the copy is there: status must then name ids as the holders of the whole
// key space at an LSN r's copy has reached.
func (c *cli) settleOn(r *router, ids ...string) status {
	c.t.Helper()
	ids = slices.Sorted(slices.Values(ids))
	members := make([]assign.Member, len(ids))
	for i, id := range ids {
		members[i] = assign.Member{ID: id}
	}
	want := assign.ConsistentHash{}.Assign(members)
	deadline := time.Now().Add(settleTimeout)
	var last status
	var lastErr error
	for time.Now().Before(deadline) {
		if !isAssignment(r.l.Segments(), want) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s, err := c.status()
		switch {
		case err != nil:
			lastErr = err
		case slices.Equal(s.holders(), ids) && s.complete() && r.l.LSN() >= s.LSN && isAssignment(r.l.Segments(), want):
			return s
		default:
			last = s
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := json.Marshal(last)
	c.t.Fatalf("the table did not settle on %v within %s: the router's copy at LSN %d holds %v ranges by owner, the desired assignment %v; last status %s (error: %v)",
		ids, settleTimeout, r.l.LSN(), tally(r.l.Segments()), tallyAssignment(want), b, lastErr)
	return status{}
}

// isAssignment reports whether segs, a copy of the whole table, gives
// every key to the Owner that want gives it, and none is free. Each gives
// a key the owner of the segment that starts at or before it, so comparing
// the two at the start of every segment of both compares them at every
// key.
func isAssignment(segs []leasetable.Segment, want assign.Assignment) bool {
	if len(segs) == 0 || len(want) == 0 {
		return false
	}
	for _, s := range segs {
		if s.Entry.Owner == "" || want.Owner(s.Range.Start) != s.Entry.Owner {
			return false
		}
	}
	for _, d := range want {
		if tableOwner(segs, d.Range.Start) != d.Owner {
			return false
		}
	}
	return true
}

// tableOwner returns the Owner of key k in segs, sorted by their starts
// and covering the key space from 0; "" if k is free.
func tableOwner(segs []leasetable.Segment, k keyspace.Key) string {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Range.Start > k })
	if i == 0 {
		return ""
	}
	return segs[i-1].Entry.Owner
}

// tally counts the segments of a copy of the table by Owner ("" free).
func tally(segs []leasetable.Segment) string {
	n := map[string]int{}
	for _, s := range segs {
		n[s.Entry.Owner]++
	}
	return countsString(n)
}

// tallyAssignment counts the segments of an assignment by Owner.
func tallyAssignment(a assign.Assignment) string {
	n := map[string]int{}
	for _, s := range a {
		n[s.Owner]++
	}
	return countsString(n)
}

func countsString(n map[string]int) string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(n)) {
		out = append(out, fmt.Sprintf("%q: %d", id, n[id]))
	}
	return fmt.Sprint(out)
}

// TestIsAssignment: settleOn's test of a copy of the table against the
// desired assignment takes a copy cut finer than the assignment, and
// refuses one with a range free or held by another Owner anywhere.
func TestIsAssignment(t *testing.T) {
	want := assign.ConsistentHash{}.Assign([]assign.Member{{ID: "kv-1"}, {ID: "kv-3"}})
	copyOf := func() []leasetable.Segment {
		var segs []leasetable.Segment
		for _, s := range want {
			segs = append(segs, leasetable.Segment{Range: s.Range, Entry: leasetable.Entry{Owner: s.Owner, LGN: 1}})
		}
		return segs
	}
	if !isAssignment(copyOf(), want) {
		t.Fatal("the assignment's own segments do not match it")
	}
	// Segment 5 cut in two, as a table keeps a dead Owner's ranges granted
	// one by one: still the assignment.
	segs := copyOf()
	s := segs[5]
	mid := s.Range.Start + (s.Range.End-s.Range.Start)/2
	a, b := s, s
	a.Range.End, b.Range.Start = mid, mid
	finer := slices.Concat(segs[:5], []leasetable.Segment{a, b}, segs[6:])
	if !isAssignment(finer, want) {
		t.Error("a copy cut finer than the assignment does not match it")
	}
	other := slices.Clone(finer)
	other[6].Entry.Owner = map[string]string{"kv-1": "kv-3", "kv-3": "kv-1"}[other[6].Entry.Owner]
	if isAssignment(other, want) {
		t.Error("a copy with half a segment held by the other Owner matches")
	}
	free := slices.Clone(finer)
	free[6].Entry = leasetable.Entry{}
	if isAssignment(free, want) {
		t.Error("a copy with half a segment free matches")
	}
	if isAssignment(copyOf(), assign.ConsistentHash{}.Assign([]assign.Member{{ID: "kv-1"}, {ID: "kv-3"}, {ID: "kv-4"}})) {
		t.Error("the assignment of two Owners matches that of three")
	}
}
