package manager

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// TestLoadMapKeepsMovedRanges: a report replaces the rates of the keys it
// covers and leaves the rest of the load map alone, so a range that moved
// keeps the load its last holder saw until its new holder reports.
func TestLoadMapKeepsMovedRanges(t *testing.T) {
	n := &namespace{}
	a := keyspace.Range{Start: 0, End: 1 << 62}
	b := keyspace.Range{Start: 1 << 62, End: 1 << 63}
	n.recordRates([]rate{{a, 100}, {b, 300}})
	// The holder of b hands it over, and reports only a.
	n.recordRates([]rate{{a, 120}})
	if got := loadOn(n, b); got != 300 {
		t.Fatalf("b's load after its holder stopped reporting it = %g, want 300 (last known)", got)
	}
	// b's new holder reports half of it.
	half := keyspace.Range{Start: 1 << 62, End: 3 << 61}
	n.recordRates([]rate{{half, 50}})
	if got := loadOn(n, b); got != 200 {
		t.Fatalf("b's load = %g, want 50 + the other half's 150", got)
	}
	if got := loadOn(n, a); got != 120 {
		t.Fatalf("a's load = %g, want 120", got)
	}
}

// TestLoadMapRandom checks the load map against a model over random
// reports: every key's density is the one its latest report gave.
func TestLoadMapRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const cells = 64 // the model: the key space in 64 equal cells
	cell := func(i int) keyspace.Range {
		return keyspace.Range{Start: keyspace.Key(uint64(i) << 58), End: keyspace.Key(uint64(i+1) << 58)}
	}
	model := make([]float64, cells) // rate per cell
	n := &namespace{}
	for round := range 2000 {
		var report []rate
		for i := 0; i < cells; {
			w := 1 + rng.IntN(8)
			if i+w > cells {
				w = cells - i
			}
			if rng.IntN(3) == 0 {
				r := keyspace.Range{Start: cell(i).Start, End: cell(i + w - 1).End}
				v := float64(rng.IntN(1000))
				report = append(report, rate{r, v})
				for k := i; k < i+w; k++ {
					model[k] = v / float64(w)
				}
			}
			i += w
		}
		rng.Shuffle(len(report), func(i, j int) { report[i], report[j] = report[j], report[i] })
		n.recordRates(report)
		if !slices.IsSortedFunc(n.rates, func(a, b rate) int { return keyspace.Compare(a.r, b.r) }) {
			t.Fatalf("round %d: the load map is not sorted", round)
		}
		for i := range cells {
			if got := loadOn(n, cell(i)); math.Abs(got-model[i]) > 1e-6*math.Max(1, model[i]) {
				t.Fatalf("round %d: cell %d has load %g, want %g", round, i, got, model[i])
			}
		}
	}
}

// loadOn is the load the map puts on r: each range's rate spread evenly
// over its keys.
func loadOn(n *namespace, r keyspace.Range) float64 {
	var v float64
	for _, x := range n.rates {
		if p, ok := x.r.Intersect(r); ok {
			v += x.v * p.Size() / x.r.Size()
		}
	}
	return v
}
