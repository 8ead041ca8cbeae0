package rebalance

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"strconv"

	"github.com/leasehold/leasehold/keyspace"
)

// Workload is a model of key popularity for tests and simulations: a set of
// keys, each with a share of the load, the shares adding up to 1. It answers
// "what load does this range carry" in O(log n): the keys are sorted once and
// the shares summed into prefix sums. A Workload is immutable and safe for
// concurrent use.
type Workload struct {
	keys []keyspace.Key // sorted, distinct
	cum  []float64      // cum[i] = the share of keys[:i]; len(keys)+1 entries
}

// NewWorkload returns the workload in which key i has weight weights[i]
// (normalized so that they add up to 1). Weights that are not positive and
// finite count as 0; a key given twice gets the sum of its weights. It
// panics if the slices differ in length.
func NewWorkload(keys []keyspace.Key, weights []float64) *Workload {
	if len(keys) != len(weights) {
		panic("rebalance: NewWorkload: keys and weights differ in length")
	}
	type kw struct {
		k keyspace.Key
		w float64
	}
	kws := make([]kw, 0, len(keys))
	var sum float64
	for i, k := range keys {
		w := weights[i]
		if !(w > 0) || math.IsInf(w, 1) {
			w = 0
		}
		kws = append(kws, kw{k, w})
		sum += w
	}
	slices.SortFunc(kws, func(a, b kw) int { return cmp.Compare(a.k, b.k) })
	w := &Workload{keys: make([]keyspace.Key, 0, len(kws)), cum: make([]float64, 1, len(kws)+1)}
	var acc float64
	for i, x := range kws {
		if sum > 0 {
			acc += x.w / sum
		}
		if i > 0 && x.k == kws[i-1].k {
			w.cum[len(w.cum)-1] = acc
			continue
		}
		w.keys = append(w.keys, x.k)
		w.cum = append(w.cum, acc)
	}
	return w
}

// ZipfKeyName is the name of the key of rank i (0-based) in Zipf: "key-i".
func ZipfKeyName(i int) string { return "key-" + strconv.Itoa(i) }

// Zipf returns n keys with Zipf(alpha) popularity: the key of rank i
// (0-based), keyspace.KeyOf(ZipfKeyName(i)), has weight 1/(i+1)^alpha. PRS
// measured adaptive load management with alpha = 0.8 (P§7.3).
func Zipf(n int, alpha float64) *Workload {
	keys := make([]keyspace.Key, n)
	weights := make([]float64, n)
	for i := range n {
		keys[i] = keyspace.KeyOf(ZipfKeyName(i))
		weights[i] = math.Pow(float64(i+1), -alpha)
	}
	return NewWorkload(keys, weights)
}

// WithHotKey returns a copy of w in which key k carries share (in [0, 1)) of
// the load, and the other keys share the rest in their old proportions.
func (w *Workload) WithHotKey(k keyspace.Key, share float64) *Workload {
	keys := make([]keyspace.Key, 0, len(w.keys)+1)
	weights := make([]float64, 0, len(w.keys)+1)
	rest := 0.0 // the old share of the other keys
	for i, x := range w.keys {
		if x == k {
			continue
		}
		keys = append(keys, x)
		weights = append(weights, w.cum[i+1]-w.cum[i])
		rest += weights[len(weights)-1]
	}
	for i := range weights {
		weights[i] *= (1 - share) / rest
	}
	return NewWorkload(append(keys, k), append(weights, share))
}

// Len returns the number of distinct keys.
func (w *Workload) Len() int { return len(w.keys) }

// index returns how many keys are below k.
func (w *Workload) index(k keyspace.Key) int {
	i, _ := slices.BinarySearch(w.keys, k)
	return i
}

// Load returns the share of the load that falls in r.
func (w *Workload) Load(r keyspace.Range) float64 {
	lo := w.index(r.Start)
	hi := len(w.keys)
	if r.End != 0 {
		hi = w.index(r.End)
	}
	if hi <= lo {
		return 0
	}
	return w.cum[hi] - w.cum[lo]
}

// Measure sets the Load of every segment to the share of the load it
// carries, times total (say, requests/s of the whole workload).
func (w *Workload) Measure(segs []Segment, total float64) {
	for i := range segs {
		segs[i].Load = w.Load(segs[i].Range) * total
	}
}

// Top returns the n hottest keys, hottest first (ties by key), with their
// load as a share times total: what owners' hot-key reports would show.
func (w *Workload) Top(n int, total float64) []HotKey {
	n = min(n, len(w.keys))
	if n <= 0 {
		return nil
	}
	h := &minHeap{}
	for i, k := range w.keys {
		x := HotKey{Key: k, Load: w.cum[i+1] - w.cum[i]}
		if h.Len() < n {
			heap.Push(h, x)
		} else if hotter(x, (*h)[0]) {
			(*h)[0] = x
			heap.Fix(h, 0)
		}
	}
	out := make([]HotKey, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(HotKey)
		out[i].Load *= total
	}
	return out
}

// hotter orders keys by load, then by key (lower first).
func hotter(a, b HotKey) bool {
	if a.Load != b.Load {
		return a.Load > b.Load
	}
	return a.Key < b.Key
}

// minHeap holds the hottest keys seen so far, coldest on top.
type minHeap []HotKey

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return hotter(h[j], h[i]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(HotKey)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
