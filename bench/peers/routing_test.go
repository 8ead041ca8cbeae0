package peers

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/golang/groupcache/consistenthash"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// The ring of every benchmark: 100 owners × 64 virtual nodes = 6,400 points,
// as in Centrifuge (C§2.1.2).
const (
	ringOwners = 100
	ringVNodes = 64
	numKeys    = 1 << 12 // lookups cycle through this many keys
)

func ownerIDs() []string {
	ids := make([]string, ringOwners)
	for i := range ids {
		ids[i] = fmt.Sprintf("owner-%03d", i)
	}
	return ids
}

// names are the keys looked up, as strings (what an application has), and
// keys are their leasehold keys (keyspace.KeyOf: xxhash64).
func benchKeys() (names []string, keys []keyspace.Key) {
	rng := rand.New(rand.NewPCG(7, 8))
	names = make([]string, numKeys)
	keys = make([]keyspace.Key, numKeys)
	for i := range names {
		names[i] = fmt.Sprintf("user-%016x", rng.Uint64())
		keys[i] = keyspace.KeyOf(names[i])
	}
	return names, keys
}

// leaseholdView builds what a leasehold Lookup holds: a leasetable.View
// loaded with a snapshot of assign.ConsistentHash{} over 100 members, each
// segment its own grant (its own LGN), as the Manager's table has it.
func leaseholdView(tb testing.TB) (*leasetable.View, assign.Assignment) {
	var members []assign.Member
	for _, id := range ownerIDs() {
		members = append(members, assign.Member{ID: id})
	}
	a := assign.ConsistentHash{VNodes: ringVNodes}.Assign(members)
	if len(a) != ringOwners*ringVNodes {
		tb.Fatalf("assignment has %d segments; want %d", len(a), ringOwners*ringVNodes)
	}
	segs := make([]leasetable.Segment, len(a))
	for i, s := range a {
		segs[i] = leasetable.Segment{Range: s.Range, Entry: leasetable.Entry{
			Owner: s.Owner, Addr: s.Owner + ":7000", LGN: keyspace.LGN(i + 1),
		}}
	}
	v := leasetable.NewView()
	if _, err := v.Apply(leasetable.Update{To: 1, Snapshot: true, Segments: segs}); err != nil {
		tb.Fatal(err)
	}
	if v.Len() != ringOwners*ringVNodes {
		tb.Fatalf("view has %d segments; want %d", v.Len(), ringOwners*ringVNodes)
	}
	return v, a
}

// sortedRing is the hand-rolled consistent hash: sorted 64-bit points and a
// binary search (sort.Search), the point's owner in a parallel slice. Points
// are xxhash64(id#i), the same ring as assign.ConsistentHash.
type sortedRing struct {
	points []uint64
	owners []string
}

func newSortedRing() *sortedRing {
	type pt struct {
		key   uint64
		owner string
	}
	var pts []pt
	for _, id := range ownerIDs() {
		for i := range ringVNodes {
			pts = append(pts, pt{xxhash.Sum64String(fmt.Sprintf("%s#%d", id, i)), id})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	r := &sortedRing{}
	for _, p := range pts {
		r.points = append(r.points, p.key)
		r.owners = append(r.owners, p.owner)
	}
	return r
}

// Get returns the owner of the first point at or after k, wrapping around.
func (r *sortedRing) Get(k uint64) string {
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= k })
	if i == len(r.points) {
		i = 0
	}
	return r.owners[i]
}

// GetSlices is Get with slices.BinarySearch (generic, no closure call).
func (r *sortedRing) GetSlices(k uint64) string {
	i, _ := slices.BinarySearch(r.points, k)
	if i == len(r.points) {
		i = 0
	}
	return r.owners[i]
}

func newGroupcache() *consistenthash.Map {
	m := consistenthash.New(ringVNodes, crc32.ChecksumIEEE) // nil means crc32 too; explicit
	m.Add(ownerIDs()...)
	return m
}

var sink string

// TestRoutingRings checks the rings the benchmarks use: sizes, that the
// sorted ring and the leasehold View agree wherever the leasehold convention
// (a point owns the keys from it up to the next) and the hash-ring one (a
// point owns the keys up to it) coincide, i.e. that both are the same ring.
func TestRoutingRings(t *testing.T) {
	v, a := leaseholdView(t)
	_, keys := benchKeys()
	for _, k := range keys {
		o, _, _, ok := v.Lookup(k)
		if !ok || o != a.Owner(k) {
			t.Fatalf("View.Lookup(%d) = %q, %v; Assignment.Owner = %q", k, o, ok, a.Owner(k))
		}
	}
	r := newSortedRing()
	if len(r.points) != ringOwners*ringVNodes {
		t.Fatalf("sorted ring has %d points", len(r.points))
	}
	// Same points: every segment of the assignment (but the first, which
	// also takes the keys below the lowest point) starts at a ring point.
	for _, s := range a[1:] {
		if _, found := slices.BinarySearch(r.points, uint64(s.Range.Start)); !found {
			t.Fatalf("segment start %d is not a ring point", s.Range.Start)
		}
	}
	for _, k := range keys {
		if r.Get(uint64(k)) != r.GetSlices(uint64(k)) {
			t.Fatal("Get and GetSlices disagree")
		}
	}
	g := newGroupcache()
	if g.Get("x") == "" {
		t.Fatal("groupcache ring is empty")
	}
}

// BenchmarkRouting compares, on rings of 6,400 points, leasehold's
// leasetable.View.Lookup (what lookup.Lookup.Lookup calls; lookup.Lookup
// itself needs a Manager) with groupcache's consistenthash and a sorted slice
// with binary search. "key" variants take a precomputed 64-bit key; "name"
// variants start from the string and include hashing it (xxhash64 for
// leasehold and the sorted ring, crc32 for groupcache, whose Get has no
// pre-hashed form).
func BenchmarkRouting(b *testing.B) {
	names, keys := benchKeys()
	const mask = numKeys - 1

	b.Run("leasehold-View/key", func(b *testing.B) {
		v, _ := leaseholdView(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			o, _, _, _ := v.Lookup(keys[i&mask])
			sink = o
			i++
		}
	})
	b.Run("leasehold-View/name", func(b *testing.B) {
		v, _ := leaseholdView(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			o, _, _, _ := v.Lookup(keyspace.KeyOf(names[i&mask]))
			sink = o
			i++
		}
	})
	b.Run("leasehold-Assignment.Owner/key", func(b *testing.B) {
		_, a := leaseholdView(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = a.Owner(keys[i&mask])
			i++
		}
	})
	b.Run("sorted-slice-sort.Search/key", func(b *testing.B) {
		r := newSortedRing()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = r.Get(uint64(keys[i&mask]))
			i++
		}
	})
	b.Run("sorted-slice-slices.BinarySearch/key", func(b *testing.B) {
		r := newSortedRing()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = r.GetSlices(uint64(keys[i&mask]))
			i++
		}
	})
	b.Run("sorted-slice-slices.BinarySearch/name", func(b *testing.B) {
		r := newSortedRing()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = r.GetSlices(xxhash.Sum64String(names[i&mask]))
			i++
		}
	})
	b.Run("groupcache-consistenthash/name", func(b *testing.B) {
		m := newGroupcache()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = m.Get(names[i&mask])
			i++
		}
	})
}
