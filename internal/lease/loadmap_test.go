package lease

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
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

// TestFullWindowScalesLateGrants: a range its Owner was granted after the
// report's window began was counted for part of the window only; its rate
// is scaled up to the whole window. One held for under a tenth of it is
// left out, and one held all along is taken as reported.
func TestFullWindowScalesLateGrants(t *testing.T) {
	from := base
	now := from.Add(10 * time.Second)
	r1 := keyspace.Range{Start: 0, End: 1 << 62}       // held all along (LGN 1)
	r2 := keyspace.Range{Start: 1 << 62, End: 1 << 63} // granted halfway (LGN 2)
	r3 := keyspace.Range{Start: 1 << 63, End: 3 << 62} // granted just now (LGN 3)
	n := &namespace{s: &nsState{table: leasetable.New(time.Hour)}}
	for i, r := range []keyspace.Range{r1, r2, r3} {
		n.s.table.Set(from, r, leasetable.Entry{Owner: "a", Addr: "a:1", LGN: keyspace.LGN(i + 1)})
	}
	o := &ownerSession{id: "a", grantedAt: map[keyspace.LGN]time.Time{
		1: from.Add(-time.Minute), 2: from.Add(5 * time.Second), 3: now.Add(-500 * ms)}}
	got := fullWindow(n, o, []rate{{r1, 100}, {r2, 50}, {r3, 5}}, from, now)
	want := []rate{{r1, 100}, {r2, 100}}
	if !slices.Equal(got, want) {
		t.Fatalf("fullWindow = %v, want %v", got, want)
	}
}
