package owner

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
)

// BenchmarkCheckLeaseNow measures the Owner runtime's check on an owner
// holding its 64 ranges of a 100-owner assignment, for keys it holds and
// keys it does not.
func BenchmarkCheckLeaseNow(b *testing.B) {
	members := make([]assign.Member, 100)
	for i := range members {
		members[i] = assign.Member{ID: "owner-" + string(rune('A'+i/26)) + string(rune('a'+i%26))}
	}
	a := assign.ConsistentHash{}.Assign(members)
	me := members[0].ID
	var held []Lease
	expiry := time.Now().Add(time.Hour)
	for i, s := range a {
		if s.Owner == me {
			held = append(held, Lease{Range: s.Range, Num: LeaseNum{Epoch: 1, LGN: keyspace.LGN(i + 1)}, Expiry: expiry})
		}
	}
	o := &Owner{base: time.Now()}
	o.publish(held)
	keys := make([]keyspace.Key, 1024)
	for i := range keys {
		if i%2 == 0 {
			r := held[i%len(held)].Range
			keys[i] = r.Start + keyspace.Key(i)
		} else {
			keys[i] = keyspace.KeyOf(string(rune(i)))
		}
	}
	b.ReportAllocs()
	b.ReportMetric(float64(len(held)), "ranges-held")
	hits := 0
	for i := 0; b.Loop(); i++ {
		if _, ok := o.CheckLeaseNow(keys[i%len(keys)]); ok {
			hits++
		}
	}
	if hits == 0 {
		b.Fatal("no key was held: the benchmark measures nothing")
	}
}

// BenchmarkMonotonicClock is the floor under CheckLeaseNow: one read of the
// monotonic clock, which CheckLeaseNow must make to compare with the expiry.
func BenchmarkMonotonicClock(b *testing.B) {
	base := time.Now()
	var d time.Duration
	for b.Loop() {
		d = time.Since(base)
	}
	_ = d
}
