package owner

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// TestLoadMeter: the counts of every published lease set reach the next
// report, per range; the hottest sampled keys come first, scaled back up by
// the sampling rate; a report starts a new window.
func TestLoadMeter(t *testing.T) {
	var m loadMeter
	m.since = base
	lo, hi := rng(0, 1<<62), rng(1<<62, 1<<63)
	old := &published{leases: []Lease{{Range: lo}, {Range: hi}}, hits: make([]atomic.Uint64, 2)}
	old.hits[0].Add(5)
	m.fold(old)
	cur := &published{leases: []Lease{{Range: lo}}, hits: make([]atomic.Uint64, 1)}
	cur.hits[0].Add(2)
	m.fold(cur)
	for range 10 {
		m.sample(7)
	}
	m.sample(9)
	for k := range keyspace.Key(hotSlots + 5) { // more keys than slots: the sketch keeps the hot one
		m.sample(1000 + k)
	}
	ranges, keys, window := m.take(base.Add(2 * time.Second))
	if len(ranges) != 1 || ranges[0] != (protocol.RangeLoad{Range: lo, Requests: 7}) {
		t.Fatalf("ranges %v, want lo with 7 requests", ranges)
	}
	if len(keys) != hotReport || keys[0].Key != 7 || keys[0].Requests < 10*hotSample {
		t.Fatalf("hot keys %v, want key 7 first with at least %d", keys, 10*hotSample)
	}
	if window != 2*time.Second {
		t.Fatalf("window %v, want 2s", window)
	}
	if r, k, w := m.take(base.Add(3 * time.Second)); len(r) != 0 || len(k) != 0 || w != time.Second {
		t.Fatalf("second report %v %v %v, want empty over 1s", r, k, w)
	}
}
