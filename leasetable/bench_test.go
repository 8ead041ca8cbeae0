package leasetable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// paperTable returns the table of C§2.2: 100 owners × 64 virtual nodes by
// consistent hashing, 6400 segments, each its own grant.
func paperTable(tb testing.TB) *Table {
	const owners, vnodes = 100, 64
	rng := rand.New(rand.NewPCG(1, 2))
	points := []keyspace.Key{0}
	for len(points) < owners*vnodes {
		points = append(points, keyspace.Key(rng.Uint64()))
		slices.Sort(points)
		points = slices.Compact(points)
	}
	t := New(0)
	segs := make([]Segment, len(points))
	for i, p := range points {
		end := keyspace.Key(0)
		if i+1 < len(points) {
			end = points[i+1]
		}
		o := rng.IntN(owners)
		segs[i] = Segment{
			Range: r(p, end),
			Entry: Entry{Owner: fmt.Sprintf("owner-%03d", o), Addr: fmt.Sprintf("10.0.%d.%d:7000", o/256, o%256), LGN: keyspace.LGN(i + 1)},
		}
	}
	if err := t.Restore(1, segs); err != nil {
		tb.Fatal(err)
	}
	if t.Len() != owners*vnodes {
		tb.Fatalf("%d segments, want %d", t.Len(), owners*vnodes)
	}
	return t
}

func paperView(tb testing.TB) *View {
	v := NewView()
	if _, err := v.Apply(paperTable(tb).Since(0)); err != nil {
		tb.Fatal(err)
	}
	return v
}

var sinkString string

// BenchmarkViewLookup: Lookup on the paper's table (6400 segments). It also
// reports the view's memory, to compare with C§2.2's ~200 KB.
func BenchmarkViewLookup(b *testing.B) {
	v := paperView(b)
	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([]keyspace.Key, 1<<12)
	for i := range keys {
		keys[i] = keyspace.Key(rng.Uint64())
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		o, _, _, _ := v.Lookup(keys[i&(len(keys)-1)])
		sinkString = o
		i++
	}
	b.ReportMetric(float64(v.Bytes()), "view-bytes")
	b.ReportMetric(float64(v.Bytes())/float64(v.Len()), "bytes/segment")
}

// BenchmarkTableSince: answering a sync on the paper's table with a long log.
func BenchmarkTableSince(b *testing.B) {
	t := paperTable(b)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 5000 {
		s := t.At(keyspace.Key(rng.Uint64())).Range
		t.Set(t0, s, Entry{Owner: "mover", Addr: "10.1.0.1:7000", LGN: keyspace.LGN(100000 + i)})
	}
	for _, n := range []int{0, 1, 100, 5000} {
		kind := "delta"
		if t.Since(t.LSN() - keyspace.LSN(n)).Snapshot {
			kind = "snapshot"
		}
		b.Run(fmt.Sprintf("%s-%d", kind, n), func(b *testing.B) {
			b.ReportAllocs()
			lsn := t.LSN() - keyspace.LSN(n)
			for b.Loop() {
				t.Since(lsn)
			}
		})
	}
	b.Run("snapshot-truncated", func(b *testing.B) {
		t.Truncate(t0.Add(time.Hour))
		lsn := t.LSN() - 1
		b.ReportAllocs()
		for b.Loop() {
			t.Since(lsn)
		}
	})
}

// BenchmarkTableSet: one grant moving a whole segment to another owner, on
// the paper's table.
func BenchmarkTableSet(b *testing.B) {
	t := paperTable(b)
	rng := rand.New(rand.NewPCG(7, 8))
	b.ReportAllocs()
	lgn := keyspace.LGN(1 << 20)
	for b.Loop() {
		lgn++
		t.Set(t0, t.At(keyspace.Key(rng.Uint64())).Range, Entry{Owner: "mover", LGN: lgn})
	}
}

// BenchmarkViewApply: a one-change delta (splitting a segment, then putting
// it back) and a full snapshot with its diff, on the paper's table.
func BenchmarkViewApply(b *testing.B) {
	b.Run("delta-1", func(b *testing.B) {
		v := paperView(b)
		s := v.Segments()[1000]
		mid := s.Range.Start + (s.Range.End-s.Range.Start)/2
		changes := []Change{
			{Range: r(mid, s.Range.End), Entry: Entry{Owner: "mover", LGN: 1 << 40}},
			{Range: r(mid, s.Range.End), Entry: s.Entry},
		}
		b.ReportAllocs()
		for b.Loop() {
			c := changes[v.LSN()%2]
			c.LSN = v.LSN() + 1
			if _, err := v.Apply(Update{From: v.LSN(), To: c.LSN, Changes: []Change{c}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("snapshot-6400", func(b *testing.B) {
		v := paperView(b)
		u := paperTable(b).Since(0)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Apply(u); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTableOwned: the segments of one owner of the paper's table (64
// of 6400), from the owner index and by a scan of the table, which is
// what the Manager did on every lease request before the index.
func BenchmarkTableOwned(b *testing.B) {
	t := paperTable(b)
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(t.Owned("owner-042")) == 0 {
				b.Fatal("owner-042 holds nothing")
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out []Segment
			t.Each(func(s Segment) bool {
				if s.Entry.Owner == "owner-042" {
					out = append(out, s)
				}
				return true
			})
			if len(out) == 0 {
				b.Fatal("owner-042 holds nothing")
			}
		}
	})
}

// splitTable returns a table of n segments over random start keys, 64 per
// owner (n/64 owners), each its own grant, as a Manager that has granted
// every virtual node holds; and the segments it was restored from.
func splitTable(b *testing.B, n int, rng *rand.Rand) (*Table, []Segment) {
	points := make([]keyspace.Key, n)
	for i := 1; i < n; i++ {
		points[i] = keyspace.Key(rng.Uint64())
	}
	slices.Sort(points)
	points = slices.Compact(points)
	segs := make([]Segment, 0, n)
	for i, p := range points {
		end := keyspace.Key(0)
		if i+1 < len(points) {
			end = points[i+1]
		}
		segs = append(segs, Segment{Range: r(p, end), Entry: Entry{Owner: fmt.Sprintf("owner-%d", i%(n/64)), LGN: keyspace.LGN(i + 1)}})
	}
	t := New(0)
	if err := t.Restore(1, segs); err != nil {
		b.Fatal(err)
	}
	return t, segs
}

// BenchmarkTableSplit: a grant of half a segment (one more segment) and
// its undoing (one fewer), on tables of 64 segments per owner for 100,
// 1,000 and 10,000 owners: two Sets per op, each adding or removing a
// segment somewhere in the middle of the table.
func BenchmarkTableSplit(b *testing.B) {
	for _, n := range []int{6400, 64000, 640000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(uint64(n), 3))
			t, _ := splitTable(b, n, rng)
			lgn := keyspace.LGN(1 << 40)
			b.ReportAllocs()
			for b.Loop() {
				s := t.At(keyspace.Key(rng.Uint64()))
				half := r(s.Range.Start, s.Range.Start+(s.Range.End-s.Range.Start)/2)
				if s.Range.End == 0 || half.End == half.Start {
					continue
				}
				lgn++
				t.Set(t0, half, Entry{Owner: "mover", LGN: lgn})
				t.Set(t0, half, s.Entry)
			}
		})
	}
}

// BenchmarkTableBuild: a Manager's start-up, building a table of n segments
// (64 per owner) one grant at a time from an all-free table, owner after
// owner, so each grant splits a free segment somewhere in the key space.
// One op is the whole build; grant-ns is the cost per Set.
func BenchmarkTableBuild(b *testing.B) {
	for _, n := range []int{6400, 64000, 640000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			_, segs := splitTable(b, n, rand.New(rand.NewPCG(uint64(n), 5)))
			owners := n / 64
			b.ReportAllocs()
			for b.Loop() {
				t := New(0)
				for o := range owners {
					for i := o; i < len(segs); i += owners {
						t.Set(t0, segs[i].Range, segs[i].Entry)
					}
				}
				if t.Len() != len(segs) {
					b.Fatalf("built %d segments, want %d", t.Len(), len(segs))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(segs)), "grant-ns")
		})
	}
}
