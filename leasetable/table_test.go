package leasetable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

func TestNewTable(t *testing.T) {
	tb := New(0)
	want := []Segment{{Range: keyspace.Full, Entry: Entry{}}}
	if got := tb.Segments(); !slices.Equal(got, want) {
		t.Fatalf("Segments() = %v, want %v", got, want)
	}
	if tb.LSN() != 0 || tb.FirstLSN() != 1 || tb.Len() != 1 {
		t.Fatalf("LSN %d FirstLSN %d Len %d, want 0 1 1", tb.LSN(), tb.FirstLSN(), tb.Len())
	}
	if tb.retention != DefaultRetention {
		t.Fatalf("retention %v, want %v", tb.retention, DefaultRetention)
	}
}

func TestTableSet(t *testing.T) {
	a5, b6, c7 := own("a", 5), own("b", 6), own("c", 7)
	type set struct {
		r keyspace.Range
		e Entry
	}
	tests := []struct {
		name string
		sets []set
		want []Segment
	}{
		{"middle splits free in three", []set{{r(10, 20), a5}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 20), a5}, {r(20, 0), Entry{}}}},
		{"at the start", []set{{r(0, 20), a5}},
			[]Segment{{r(0, 20), a5}, {r(20, 0), Entry{}}}},
		{"at the end", []set{{r(20, 0), a5}},
			[]Segment{{r(0, 20), Entry{}}, {r(20, 0), a5}}},
		{"last key only", []set{{r(keyspace.MaxKey, 0), a5}},
			[]Segment{{r(0, keyspace.MaxKey), Entry{}}, {r(keyspace.MaxKey, 0), a5}}},
		{"whole key space", []set{{r(10, 20), a5}, {keyspace.Full, b6}},
			[]Segment{{keyspace.Full, b6}}},
		{"adjacent equal merge right", []set{{r(10, 20), a5}, {r(20, 30), a5}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 30), a5}, {r(30, 0), Entry{}}}},
		{"adjacent equal merge left", []set{{r(20, 30), a5}, {r(10, 20), a5}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 30), a5}, {r(30, 0), Entry{}}}},
		{"fill a hole merges both sides", []set{{r(10, 20), a5}, {r(30, 40), a5}, {r(20, 30), a5}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 40), a5}, {r(40, 0), Entry{}}}},
		{"overwrite spanning several", []set{{r(10, 20), a5}, {r(20, 30), b6}, {r(30, 40), c7}, {r(15, 35), c7}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 15), a5}, {r(15, 40), c7}, {r(40, 0), Entry{}}}},
		{"split inside one owned range", []set{{r(10, 40), a5}, {r(20, 30), b6}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 20), a5}, {r(20, 30), b6}, {r(30, 40), a5}, {r(40, 0), Entry{}}}},
		{"free again merges with free", []set{{r(10, 40), a5}, {r(10, 40), Entry{}}},
			[]Segment{{keyspace.Full, Entry{}}}},
		{"same owner other LGN does not merge", []set{{r(10, 20), a5}, {r(20, 30), own("a", 6)}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 20), a5}, {r(20, 30), own("a", 6)}, {r(30, 0), Entry{}}}},
		{"migrated flag does not merge", []set{{r(10, 20), a5}, {r(20, 30), migrated("a", 5, 0)}},
			[]Segment{{r(0, 10), Entry{}}, {r(10, 20), a5}, {r(20, 30), migrated("a", 5, 0)}, {r(30, 0), Entry{}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(0)
			for _, s := range tt.sets {
				tb.Set(t0, s.r, s.e)
			}
			if got := tb.Segments(); !slices.Equal(got, tt.want) {
				t.Fatalf("Segments()\n got %v\nwant %v", got, tt.want)
			}
			if err := tb.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTableSetNoOp(t *testing.T) {
	tb := New(0)
	if lsn := tb.Set(t0, r(10, 20), Entry{}); lsn != 0 {
		t.Fatalf("setting free on free: LSN %d, want 0", lsn)
	}
	if lsn := tb.Set(t0, r(10, 40), own("a", 5)); lsn != 1 {
		t.Fatalf("first change: LSN %d, want 1", lsn)
	}
	if lsn := tb.Set(t0, r(20, 30), own("a", 5)); lsn != 1 {
		t.Fatalf("subrange already set: LSN %d, want 1 (no-op)", lsn)
	}
	if lsn := tb.Set(t0, r(5, 30), own("a", 5)); lsn != 2 {
		t.Fatalf("range partly set: LSN %d, want 2", lsn)
	}
	if got := tb.Since(0); len(got.Changes) != 2 {
		t.Fatalf("log has %d changes, want 2: %v", len(got.Changes), got.Changes)
	}
}

func TestTableSetPanics(t *testing.T) {
	tests := []struct {
		name string
		r    keyspace.Range
		e    Entry
		want string
	}{
		{"empty range", r(5, 5), own("a", 1), "invalid range"},
		{"reversed range", r(6, 5), own("a", 1), "invalid range"},
		{"free with LGN", r(1, 5), Entry{LGN: 3}, "LGN 3"},
		{"owned without LGN", r(1, 5), Entry{Owner: "a"}, "LGN 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(0)
			defer func() {
				p := recover()
				if p == nil {
					t.Fatal("Set did not panic")
				}
				if s, _ := p.(string); !strings.Contains(s, tt.want) {
					t.Fatalf("panic %q does not mention %q", p, tt.want)
				}
				if tb.LSN() != 0 || tb.Len() != 1 {
					t.Fatalf("table changed by a panicking Set: LSN %d, %d segments", tb.LSN(), tb.Len())
				}
			}()
			tb.Set(t0, tt.r, tt.e)
		})
	}
}

func TestTableAtOverlapping(t *testing.T) {
	tb := New(0)
	tb.Set(t0, r(10, 20), own("a", 5))
	tb.Set(t0, r(20, 30), own("b", 6))
	tests := []struct {
		k    keyspace.Key
		want Segment
	}{
		{0, Segment{r(0, 10), Entry{}}},
		{9, Segment{r(0, 10), Entry{}}},
		{10, Segment{r(10, 20), own("a", 5)}},
		{19, Segment{r(10, 20), own("a", 5)}},
		{20, Segment{r(20, 30), own("b", 6)}},
		{30, Segment{r(30, 0), Entry{}}},
		{keyspace.MaxKey, Segment{r(30, 0), Entry{}}},
	}
	for _, tt := range tests {
		if got := tb.At(tt.k); got != tt.want {
			t.Errorf("At(%d) = %v, want %v", tt.k, got, tt.want)
		}
	}

	got := tb.Overlapping(r(15, 25))
	want := []Segment{{r(15, 20), own("a", 5)}, {r(20, 25), own("b", 6)}}
	if !slices.Equal(got, want) {
		t.Errorf("Overlapping([15,25)) = %v, want %v", got, want)
	}
	got = tb.Overlapping(r(25, 0))
	want = []Segment{{r(25, 30), own("b", 6)}, {r(30, 0), Entry{}}}
	if !slices.Equal(got, want) {
		t.Errorf("Overlapping([25,end)) = %v, want %v", got, want)
	}
	if got := tb.Overlapping(r(7, 7)); got != nil {
		t.Errorf("Overlapping(invalid) = %v, want nil", got)
	}
}

// TestTableRandomVsModel checks Set against the pool-key model after every
// one of many random operations: At for every pool key, exact Segments, and
// canonical form; with chunks small enough to split and merge all the time,
// and with the default.
func TestTableRandomVsModel(t *testing.T) {
	for _, chunk := range []int{4, 5, defaultChunk} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			testTableRandomVsModel(t, chunk)
		})
	}
}

func testTableRandomVsModel(t *testing.T, chunk int) {
	forSeeds(t, 50, func(t *testing.T, rng *rand.Rand) {
		p := newPool(rng, 20)
		m := newModel(p)
		tb := newTable(0, chunk)
		// Few distinct entries, so that merges happen often.
		choices := []Entry{{}, own("a", 1), own("a", 2), own("b", 3), migrated("c", 4, 1), migrated("c", 4, 0)}
		for step := range 400 {
			rg, e := p.randRange(rng), choices[rng.IntN(len(choices))]
			before := tb.LSN()
			covered := true
			for _, i := range p.indexes(rg) {
				covered = covered && m.ents[i] == e
			}
			if step%97 == 96 { // a snapshot installed: the owner index is rebuilt
				if err := tb.Restore(tb.LSN(), tb.Segments()); err != nil {
					t.Fatal(err)
				}
			}
			lsn := tb.Set(t0, rg, e)
			m.set(rg, e)
			if want := before + 1; covered {
				if lsn != before {
					t.Fatalf("step %d: Set(%v, %v) on a range already so: LSN %d, want %d", step, rg, e, lsn, before)
				}
			} else if lsn != want {
				t.Fatalf("step %d: Set(%v, %v): LSN %d, want %d", step, rg, e, lsn, want)
			}
			for i, k := range p {
				if got := tb.At(k).Entry; got != m.ents[i] {
					t.Fatalf("step %d: after Set(%v, %v): At(%x) = %v, want %v", step, rg, e, k, got, m.ents[i])
				}
			}
			if got, want := tb.Segments(), m.segments(); !slices.Equal(got, want) {
				t.Fatalf("step %d: Segments()\n got %v\nwant %v", step, got, want)
			}
			if err := tb.check(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for _, o := range []string{"a", "b", "c", "d"} {
				var want []Segment
				for _, s := range m.segments() {
					if s.Entry.Owner == o {
						want = append(want, s)
					}
				}
				if got := tb.Owned(o); !slices.Equal(got, want) {
					t.Fatalf("step %d: Owned(%q)\n got %v\nwant %v", step, o, got, want)
				}
			}
			if tb.Len() != len(m.segments()) {
				t.Fatalf("step %d: Len() = %d, want %d", step, tb.Len(), len(m.segments()))
			}
		}
	})
}

func TestTableSince(t *testing.T) {
	tb := New(time.Minute)
	tb.Set(t0, r(0, 100), own("a", 1))                       // LSN 1
	tb.Set(t0.Add(10*time.Second), r(100, 200), own("b", 2)) // LSN 2
	tb.Set(t0.Add(70*time.Second), r(50, 150), own("c", 3))  // LSN 3
	// Segments: [0,50) a, [50,150) c, [150,200) b, [200,end) free: 4.

	t.Run("empty delta", func(t *testing.T) {
		u := tb.Since(3)
		if u.Snapshot || u.From != 3 || u.To != 3 || u.Changes != nil || u.Segments != nil {
			t.Fatalf("Since(LSN) = %+v, want an empty delta 3..3", u)
		}
	})
	t.Run("delta", func(t *testing.T) {
		u := tb.Since(1)
		want := []Change{
			{LSN: 2, Range: r(100, 200), Entry: own("b", 2)},
			{LSN: 3, Range: r(50, 150), Entry: own("c", 3)},
		}
		if u.Snapshot || u.From != 1 || u.To != 3 || !slices.Equal(u.Changes, want) {
			t.Fatalf("Since(1) = %+v, want delta 1..3 %v", u, want)
		}
		if again := tb.Since(1); &again.Changes[0] != &u.Changes[0] {
			t.Fatal("two deltas from one LSN do not share their changes")
		}
		if cap(u.Changes) != len(u.Changes) {
			t.Fatalf("delta has cap %d > len %d: appending to it would write into the log", cap(u.Changes), len(u.Changes))
		}
	})
	t.Run("delta from zero", func(t *testing.T) {
		u := tb.Since(0)
		if u.Snapshot || len(u.Changes) != 3 || u.Changes[0].LSN != 1 {
			t.Fatalf("Since(0) = %+v, want the whole log", u)
		}
	})
	t.Run("ahead of the table", func(t *testing.T) {
		u := tb.Since(9)
		if !u.Snapshot || u.From != 9 || u.To != 3 || !slices.Equal(u.Segments, tb.Segments()) {
			t.Fatalf("Since(9) = %+v, want a snapshot at 3", u)
		}
	})

	t.Run("snapshot after truncate", func(t *testing.T) {
		tb := clone(t, tb)
		tb.Truncate(t0.Add(70 * time.Second)) // drops LSN 1 (stamped 70s ago), keeps LSN 2 (60s ago)
		if tb.FirstLSN() != 2 {
			t.Fatalf("FirstLSN() = %d after truncating LSN 1, want 2", tb.FirstLSN())
		}
		if u := tb.Since(1); u.Snapshot || len(u.Changes) != 2 {
			t.Fatalf("Since(1) = %+v, want delta (LSN 2 is still there)", u)
		}
		u := tb.Since(0)
		if !u.Snapshot || u.To != 3 || !slices.Equal(u.Segments, tb.Segments()) {
			t.Fatalf("Since(0) = %+v, want a snapshot at 3 (LSN 1 truncated)", u)
		}
		tb.Truncate(t0.Add(200 * time.Second))
		if tb.FirstLSN() != 4 || tb.LSN() != 3 {
			t.Fatalf("after truncating everything: FirstLSN %d LSN %d, want 4 3", tb.FirstLSN(), tb.LSN())
		}
		if u := tb.Since(3); u.Snapshot || u.From != 3 || u.To != 3 {
			t.Fatalf("Since(LSN) with an empty log = %+v, want an empty delta", u)
		}
		if u := tb.Since(2); !u.Snapshot {
			t.Fatalf("Since(2) with an empty log = %+v, want a snapshot", u)
		}
	})

	t.Run("snapshot when more changes than segments", func(t *testing.T) {
		tb := New(0)
		for i := range 10 {
			tb.Set(t0, r(0, 100), own("a", keyspace.LGN(i+1)))
		}
		// One owned segment and one free: 2 segments, 10 changes.
		if u := tb.Since(8); u.Snapshot || len(u.Changes) != 2 {
			t.Fatalf("Since(8) = %+v, want a delta of 2 (= Len())", u)
		}
		u := tb.Since(7)
		if !u.Snapshot || u.To != 10 || len(u.Segments) != 2 {
			t.Fatalf("Since(7) = %+v, want a 2-segment snapshot at 10 (3 changes > 2 segments)", u)
		}
	})
}

func TestTableTruncateClockStepsBack(t *testing.T) {
	tb := New(time.Minute)
	tb.Set(t0.Add(time.Minute), r(0, 10), own("a", 1)) // LSN 1
	tb.Set(t0, r(10, 20), own("b", 2))                 // LSN 2, the clock stepped back
	tb.Truncate(t0.Add(90 * time.Second))
	// LSN 2 is old enough but LSN 1 is not: the log stays contiguous.
	if tb.FirstLSN() != 1 {
		t.Fatalf("FirstLSN() = %d, want 1", tb.FirstLSN())
	}
	tb.Truncate(t0.Add(3 * time.Minute))
	if tb.FirstLSN() != 3 {
		t.Fatalf("FirstLSN() = %d, want 3", tb.FirstLSN())
	}
}

func TestTableRestore(t *testing.T) {
	tb := New(0)
	tb.Set(t0, r(0, 10), own("a", 1))
	segs := []Segment{
		{r(0, 5), own("b", 2)},
		{r(5, 8), own("b", 2)}, // merged with the one before
		{r(8, 0), Entry{}},
	}
	if err := tb.Restore(40, segs); err != nil {
		t.Fatal(err)
	}
	want := []Segment{{r(0, 8), own("b", 2)}, {r(8, 0), Entry{}}}
	if got := tb.Segments(); !slices.Equal(got, want) {
		t.Fatalf("Segments() = %v, want %v", got, want)
	}
	if tb.LSN() != 40 || tb.FirstLSN() != 41 {
		t.Fatalf("LSN %d FirstLSN %d, want 40 41", tb.LSN(), tb.FirstLSN())
	}
	if u := tb.Since(39); !u.Snapshot {
		t.Fatalf("Since(39) after Restore = %+v, want a snapshot", u)
	}
	if lsn := tb.Set(t0, r(20, 30), own("c", 3)); lsn != 41 {
		t.Fatalf("first Set after Restore: LSN %d, want 41", lsn)
	}

	before := tb.Segments()
	bad := [][]Segment{
		nil,
		{{r(0, 5), Entry{}}}, // does not reach the end
		{{r(1, 0), Entry{}}}, // does not start at 0
		{{r(0, 5), Entry{}}, {r(4, 0), own("a", 1)}}, // overlap
		{{r(0, 0), Entry{LGN: 1}}},                   // bad entry
	}
	for _, segs := range bad {
		if err := tb.Restore(50, segs); err == nil {
			t.Errorf("Restore(%v) succeeded, want an error", segs)
		}
		if !slices.Equal(tb.Segments(), before) || tb.LSN() != 41 {
			t.Fatalf("failed Restore(%v) changed the table", segs)
		}
	}
}

// clone returns a copy of tb made through its public API plus the log.
func clone(t *testing.T, tb *Table) *Table {
	t.Helper()
	c := newTable(tb.retention, tb.segs.max)
	c.load(tb.Segments())
	c.lsn, c.log, c.stamps = tb.lsn, slices.Clone(tb.log), slices.Clone(tb.stamps)
	return c
}
