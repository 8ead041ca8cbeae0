package client

import (
	"slices"
	"testing"
)

// TestRankSpreadsEvenly: 10,000 Lookups over four replicas start evenly
// (each within 10% of a quarter), and when one replica fails its Lookups
// move to the other three evenly too — not all to one, as a round robin
// from a hashed start would send them.
func TestRankSpreadsEvenly(t *testing.T) {
	addrs := []string{"10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400", "10.0.0.4:7400"}
	const n = 10000
	first := map[string]int{}
	moved := map[string]int{}
	for i := range uint64(n) {
		r := Rank(i*0x9e3779b97f4a7c15, addrs)
		if len(r) != len(addrs) {
			t.Fatalf("Rank returned %v", r)
		}
		first[r[0]]++
		if r[0] == addrs[0] {
			moved[r[1]]++
		}
	}
	for _, a := range addrs {
		if c := first[a]; c < n/4*9/10 || c > n/4*11/10 {
			t.Errorf("%s is the first choice of %d Lookups of %d, want about %d", a, c, n, n/4)
		}
	}
	for _, a := range addrs[1:] {
		if c := moved[a]; c < first[addrs[0]]/3*8/10 || c > first[addrs[0]]/3*12/10 {
			t.Errorf("%s takes %d of the %d Lookups of %s when it fails, want about a third: %v", a, c, first[addrs[0]], addrs[0], moved)
		}
	}
	if !slices.Equal(Rank(7, addrs), Rank(7, slices.Clone(addrs))) {
		t.Error("Rank is not a function of the key and the addresses")
	}
}

// TestSpreadFollowerIgnoresHintsInItsList: a Lookup's follower (spread)
// refused with a hint naming a replica it was given moves to its next
// choice instead, so refused Lookups do not pile onto the leader; a hint
// outside its list (the group grew) is followed.
func TestSpreadFollowerIgnoresHintsInItsList(t *testing.T) {
	f := newFollower([]string{"a:1", "b:1", "c:1"})
	f.spread = true
	next, _, followed := f.ended(false, true, "c:1")
	if next != "b:1" || followed {
		t.Fatalf("refused with a hint to c:1 in the list: next %s (followed %v), want b:1", next, followed)
	}
	next, _, followed = f.ended(false, true, "d:1")
	if next != "d:1" || !followed {
		t.Fatalf("refused with a hint to d:1 outside the list: next %s (followed %v), want d:1 followed", next, followed)
	}
	g := newFollower([]string{"a:1", "b:1", "c:1"})
	if next, _, _ := g.ended(false, true, "c:1"); next != "c:1" {
		t.Fatalf("an Owner's follower refused with a hint to c:1 goes to %s, want c:1", next)
	}
}
