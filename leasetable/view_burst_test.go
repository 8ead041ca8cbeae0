package leasetable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// burstDelta returns a delta from LSN from that gives each of n equal
// ranges to one of owners Owners, in key order or shuffled by rng (as a
// Manager's round grants them, Owner by Owner); with rng, some changes go
// via free, some re-give a range, and some span several ranges, so that
// the changes overlap.
func burstDelta(n, owners int, from keyspace.LSN, rng *rand.Rand) Update {
	step := ^uint64(0)/uint64(n) + 1
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if rng != nil {
		rng.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	}
	u := Update{From: from, To: from + keyspace.LSN(n)}
	for k, i := range idx {
		last := i + 1
		if rng != nil && rng.IntN(8) == 0 {
			last = min(n, i+1+rng.IntN(4))
		}
		r := keyspace.Range{Start: keyspace.Key(uint64(i) * step), End: keyspace.Key(uint64(last) * step)}
		if last == n {
			r.End = 0
		}
		o := fmt.Sprintf("owner-%05d", i%owners)
		lsn := from + keyspace.LSN(k+1)
		c := Change{LSN: lsn, Range: r, Entry: Entry{Owner: o, Addr: o + ":7", LGN: keyspace.LGN(lsn)}}
		if rng != nil && rng.IntN(5) == 0 {
			c.ViaFree = true
		}
		u.Changes = append(u.Changes, c)
	}
	return u
}

// TestViewBurstSameAsOneByOne: a delta of many changes, which a View
// applies in chunks, leaves the view with the segments and reports the
// losses that applying its changes one at a time (each on the flat
// segments) does, also over a table already full of segments.
func TestViewBurstSameAsOneByOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{burstChanges, 200, 5000} {
		burst, single := NewView(), NewView()
		from := keyspace.LSN(0)
		for round := range 3 {
			u := burstDelta(n, 1+n/16, from, rng)
			lost, err := burst.Apply(u)
			if err != nil {
				t.Fatal(err)
			}
			var lostOne []keyspace.Range
			for i, c := range u.Changes {
				l, err := single.Apply(Update{From: from + keyspace.LSN(i), To: c.LSN, Changes: []Change{c}})
				if err != nil {
					t.Fatal(err)
				}
				lostOne = append(lostOne, l...)
			}
			from = u.To
			if !slices.Equal(burst.Segments(), single.Segments()) {
				t.Fatalf("%d changes, round %d: the burst left %d segments, one by one %d, or others", n, round, burst.Len(), single.Len())
			}
			if !slices.Equal(lost, coalesce(lostOne)) {
				t.Fatalf("%d changes, round %d: the burst lost %d ranges, one by one %d", n, round, len(lost), len(coalesce(lostOne)))
			}
			if err := burst.check(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestViewBurstNotQuadratic: a delta of n changes in no key order costs a
// View about what the same changes in key order do. On flat segments each
// change that adds a segment shifted all those after it, so n changes in
// Owner order cost O(n²): 128,000 of them (a leader's round at 2,000
// Owners) took the Manager's View 8–9 s of CPU, 2 s at 64,000 here, against
// 25 ms in key order, and stalled the loop that answers the Owners past
// their answer wait. The bound is a ratio of two runs side by side, so a
// loaded machine slows both.
func TestViewBurstNotQuadratic(t *testing.T) {
	if testing.Short() {
		t.Skip("times two applies of 64,000 changes")
	}
	const n = 64000
	best := func(rng *rand.Rand) time.Duration {
		u := burstDelta(n, 1000, 0, rng)
		var d time.Duration
		for i := range 3 {
			v := NewView()
			start := time.Now()
			if _, err := v.Apply(u); err != nil {
				t.Fatal(err)
			}
			if e := time.Since(start); i == 0 || e < d {
				d = e
			}
		}
		return d
	}
	inOrder, shuffled := best(nil), best(rand.New(rand.NewPCG(1, 2)))
	t.Logf("%d changes: %v in key order, %v shuffled", n, inOrder, shuffled)
	if shuffled > 4*inOrder+50*time.Millisecond {
		t.Errorf("%d changes in Owner order took %v, against %v in key order: quadratic", n, shuffled, inOrder)
	}
}
