package rebalance

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// TestWorkloadLoadMatchesScan checks Load against a linear scan of the keys.
func TestWorkloadLoadMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	keys := make([]keyspace.Key, 500)
	weights := make([]float64, len(keys))
	for i := range keys {
		keys[i] = keyspace.Key(rng.Uint64())
		weights[i] = rng.Float64()
	}
	keys[1], keys[2], keys[3] = 0, keyspace.MaxKey, keys[0] // the ends, and a duplicate
	weights[4] = math.NaN()
	w := NewWorkload(keys, weights)
	var sum float64
	for i, x := range weights {
		if !math.IsNaN(x) {
			sum += weights[i]
		}
	}
	scan := func(r keyspace.Range) float64 {
		var l float64
		for i, k := range keys {
			if r.Contains(k) && !math.IsNaN(weights[i]) {
				l += weights[i] / sum
			}
		}
		return l
	}
	if w.Len() != len(keys)-1 {
		t.Errorf("Len() = %d, want %d (one duplicate)", w.Len(), len(keys)-1)
	}
	ranges := []keyspace.Range{keyspace.Full, {Start: 0, End: 1}, {Start: keyspace.MaxKey, End: 0}, {Start: keys[0], End: keys[0] + 1}}
	for range 200 {
		a, b := keyspace.Key(rng.Uint64()), keyspace.Key(rng.Uint64())
		if a > b {
			a, b = b, a
		}
		ranges = append(ranges, keyspace.Range{Start: a, End: b}, keyspace.Range{Start: a, End: 0})
	}
	for _, r := range ranges {
		if !r.Valid() {
			continue
		}
		if got, want := w.Load(r), scan(r); math.Abs(got-want) > 1e-12 {
			t.Errorf("Load(%v) = %g, a scan says %g", r, got, want)
		}
	}
}

func TestZipf(t *testing.T) {
	w := zipf()
	if got := w.Load(keyspace.Full); math.Abs(got-1) > 1e-12 {
		t.Errorf("Load(Full) = %g, want 1", got)
	}
	top := w.Top(3, 1)
	var h float64
	for i := range 1_000_000 {
		h += math.Pow(float64(i+1), -0.8)
	}
	for i, x := range top {
		if want := keyspace.KeyOf(ZipfKeyName(i)); x.Key != want {
			t.Errorf("Top[%d] = %016x, want key-%d %016x", i, uint64(x.Key), i, uint64(want))
		}
		if want := math.Pow(float64(i+1), -0.8) / h; math.Abs(x.Load-want) > 1e-12 {
			t.Errorf("Top[%d] load %g, want %g", i, x.Load, want)
		}
	}
	segs := consistent(equalOwners(3), w)
	var sum float64
	for _, s := range segs {
		sum += s.Load
	}
	if math.Abs(sum-rate) > 1e-6 {
		t.Errorf("measured segments carry %g, want %d", sum, rate)
	}
}

func TestWithHotKey(t *testing.T) {
	w := NewWorkload([]keyspace.Key{10, 20, 30}, []float64{1, 1, 2})
	h := w.WithHotKey(20, 0.5)
	for _, c := range []struct {
		k    keyspace.Key
		want float64
	}{{10, 0.5 / 3}, {20, 0.5}, {30, 1.0 / 3}} {
		if got := h.Load(keyspace.Range{Start: c.k, End: c.k + 1}); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("key %d: %g, want %g", c.k, got, c.want)
		}
	}
	if got := w.WithHotKey(99, 0.6).Top(1, 1); !slices.Equal(got, []HotKey{{Key: 99, Load: 0.6}}) {
		t.Errorf("a new hot key: Top = %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewWorkload with slices of different lengths did not panic")
		}
	}()
	NewWorkload([]keyspace.Key{1}, nil)
}
