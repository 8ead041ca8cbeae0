package lookup

import (
	"testing"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// BenchmarkLookup measures the Lookup runtime's routing read on a copy of a
// 100-owner × 64-range table.
func BenchmarkLookup(b *testing.B) {
	members := make([]assign.Member, 100)
	for i := range members {
		members[i] = assign.Member{ID: "owner-" + string(rune('A'+i/26)) + string(rune('a'+i%26))}
	}
	var segs []leasetable.Segment
	for i, s := range (assign.ConsistentHash{}).Assign(members) {
		segs = append(segs, leasetable.Segment{Range: s.Range,
			Entry: leasetable.Entry{Owner: s.Owner, Addr: s.Owner + ":8080", LGN: keyspace.LGN(i + 1)}})
	}
	v := leasetable.NewView()
	if _, err := v.Apply(leasetable.Update{To: 1, Snapshot: true, Segments: segs}); err != nil {
		b.Fatal(err)
	}
	l := &Lookup{}
	l.view.Store(&published{view: v, epoch: 1})
	keys := make([]keyspace.Key, 1024)
	for i := range keys {
		keys[i] = keyspace.KeyOf(string(rune(i)) + "key")
	}
	b.ReportAllocs()
	b.ReportMetric(float64(len(segs)), "ranges")
	for i := 0; b.Loop(); i++ {
		if _, ok := l.Lookup(keys[i%len(keys)]); !ok {
			b.Fatal("a key of a fully assigned table has no route")
		}
	}
}
