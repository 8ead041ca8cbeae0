package leasetable

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

func TestNewView(t *testing.T) {
	v := NewView()
	if v.LSN() != 0 || v.Len() != 1 {
		t.Fatalf("LSN %d Len %d, want 0 1", v.LSN(), v.Len())
	}
	if got, want := v.Segments(), New(0).Segments(); !slices.Equal(got, want) {
		t.Fatalf("Segments() = %v, want %v", got, want)
	}
	for _, k := range []keyspace.Key{0, 1, keyspace.MaxKey} {
		if o, a, l, ok := v.Lookup(k); ok || o != "" || a != "" || l != 0 {
			t.Fatalf("Lookup(%d) = %q %q %d %v on a free view", k, o, a, l, ok)
		}
	}
	mustCheck(t, v)
}

// linearLookup is the reference for View.Lookup: a scan over Segments.
func linearLookup(segs []Segment, k keyspace.Key) (string, string, keyspace.LGN, bool) {
	for _, s := range segs {
		if s.Range.Contains(k) {
			return s.Entry.Owner, s.Entry.Addr, s.Entry.LGN, !s.Entry.Free()
		}
	}
	panic("segments do not cover the key space")
}

// TestViewLookupQuick checks Lookup's radix index and binary search against
// a linear scan (STYLE.md item 7), on views of several sizes with evenly
// spread and with clustered boundaries, at random keys and at every segment
// boundary.
func TestViewLookupQuick(t *testing.T) {
	spreads := map[string]func(rng *rand.Rand) keyspace.Key{
		"even": func(rng *rand.Rand) keyspace.Key { return keyspace.Key(rng.Uint64()) },
		"clustered": func(rng *rand.Rand) keyspace.Key {
			if rng.IntN(2) == 0 {
				return 1<<40 + keyspace.Key(rng.IntN(1<<20))
			}
			return keyspace.MaxKey - keyspace.Key(rng.IntN(1000))
		},
	}
	for name, spread := range spreads {
		for _, n := range []int{1, 2, 3, 7, 8, 9, 64, 1000, 6400} {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			v := randomView(t, rng, n, spread)
			mustCheck(t, v)
			segs := v.Segments()
			check := func(k uint64) bool {
				o, a, l, ok := v.Lookup(keyspace.Key(k))
				wo, wa, wl, wok := linearLookup(segs, keyspace.Key(k))
				return o == wo && a == wa && l == wl && ok == wok
			}
			if err := quick.Check(check, &quick.Config{MaxCount: 2000}); err != nil {
				t.Fatalf("%s, %d segments: %v", name, len(segs), err)
			}
			for _, s := range segs {
				for _, k := range []keyspace.Key{s.Range.Start, s.Range.Start - 1, s.Range.Start + 1, s.Range.Last()} {
					if !check(uint64(k)) {
						t.Fatalf("%s, %d segments: Lookup(%x) disagrees with a linear scan", name, len(segs), k)
					}
				}
			}
			for b := range uint64(len(v.buckets)) { // every bucket's first and last key
				for _, k := range []uint64{b << v.shift, b<<v.shift - 1} {
					if !check(k) {
						t.Fatalf("%s, %d segments: Lookup(%x) disagrees with a linear scan", name, len(segs), k)
					}
				}
			}
		}
	}
}

// randomView returns a view of about n segments with boundaries drawn from
// spread, a quarter of them free.
func randomView(t testing.TB, rng *rand.Rand, n int, spread func(*rand.Rand) keyspace.Key) *View {
	bounds := []keyspace.Key{0}
	for range n - 1 {
		bounds = append(bounds, spread(rng))
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	segs := make([]Segment, len(bounds))
	for i, b := range bounds {
		end := keyspace.Key(0)
		if i+1 < len(bounds) {
			end = bounds[i+1]
		}
		segs[i].Range = r(b, end)
		if rng.IntN(4) != 0 {
			segs[i].Entry = own(string(rune('a'+rng.IntN(26))), keyspace.LGN(i+1))
		}
	}
	v := NewView()
	if _, err := v.Apply(Update{To: 1, Snapshot: true, Segments: segs}); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestViewLookupAllocs(t *testing.T) {
	v := randomView(t, rand.New(rand.NewPCG(1, 2)), 1000, func(rng *rand.Rand) keyspace.Key { return keyspace.Key(rng.Uint64()) })
	k := keyspace.Key(12345)
	if n := testing.AllocsPerRun(1000, func() {
		v.Lookup(k)
		k *= 0x9e3779b97f4a7c15
	}); n != 0 {
		t.Fatalf("Lookup allocates %v times per call, want 0", n)
	}
}

// TestApplyRejects feeds malformed updates and checks the error and that the
// view is unchanged.
func TestApplyRejects(t *testing.T) {
	base := []Segment{{r(0, 100), own("a", 5)}, {r(100, 0), Entry{}}}
	const at = 7 // the view's LSN
	chg := func(lsn keyspace.LSN, rg keyspace.Range, e Entry) Change {
		return Change{LSN: lsn, Range: rg, Entry: e}
	}
	good := chg(8, r(0, 50), own("b", 9))
	tests := []struct {
		name string
		u    Update
		want error
		msg  string // a fragment of the error text
	}{
		{"wrong From", Update{From: 6, To: 7, Changes: []Change{chg(7, r(0, 1), own("b", 9))}}, ErrLSNMismatch, "view is at LSN 7"},
		{"From ahead", Update{From: 8, To: 9, Changes: []Change{chg(9, r(0, 1), own("b", 9))}}, ErrLSNMismatch, "view is at LSN 7"},
		{"To below From", Update{From: 7, To: 6}, ErrLSNMismatch, "want LSNs"},
		{"too few changes", Update{From: 7, To: 9, Changes: []Change{good}}, ErrLSNMismatch, "carries 1 changes"},
		{"too many changes", Update{From: 7, To: 7, Changes: []Change{good}}, ErrLSNMismatch, "carries 1 changes"},
		{"gap", Update{From: 7, To: 9, Changes: []Change{good, chg(10, r(0, 1), Entry{})}}, ErrLSNMismatch, "has LSN 10; want 9"},
		{"out of order", Update{From: 7, To: 9, Changes: []Change{chg(9, r(0, 1), Entry{}), good}}, ErrLSNMismatch, "has LSN 9; want 8"},
		{"empty range", Update{From: 7, To: 8, Changes: []Change{chg(8, r(5, 5), own("b", 9))}}, ErrMalformed, "empty range"},
		{"reversed range", Update{From: 7, To: 8, Changes: []Change{chg(8, r(9, 5), own("b", 9))}}, ErrMalformed, "empty range"},
		{"free with LGN", Update{From: 7, To: 8, Changes: []Change{chg(8, r(0, 5), Entry{LGN: 3})}}, ErrMalformed, "LGN 3"},
		{"owner without LGN", Update{From: 7, To: 8, Changes: []Change{chg(8, r(0, 5), Entry{Owner: "b"})}}, ErrMalformed, "LGN 0"},
		{"free migrated", Update{From: 7, To: 8, Changes: []Change{chg(8, r(0, 5), Entry{Migrated: true})}}, ErrMalformed, "Migrated"},
		{"free with addr", Update{From: 7, To: 8, Changes: []Change{chg(8, r(0, 5), Entry{Addr: "x"})}}, ErrMalformed, "Addr"},
		{"MigratedFrom without Migrated", Update{From: 7, To: 8, Changes: []Change{chg(8, r(0, 5), Entry{Owner: "b", LGN: 9, MigratedFrom: 5})}}, ErrMalformed, "Migrated is false"},
		{"bad change after good ones", Update{From: 7, To: 9, Changes: []Change{good, chg(9, r(3, 2), Entry{})}}, ErrMalformed, "empty range"},
		{"delta with segments", Update{From: 7, To: 7, Segments: base}, ErrMalformed, "snapshot segments"},

		{"stale snapshot", Update{To: 6, Snapshot: true, Segments: base}, ErrStaleSnapshot, "LSN 6, view at LSN 7"},
		{"snapshot with changes", Update{To: 9, Snapshot: true, Segments: base, Changes: []Change{good}}, ErrMalformed, "delta changes"},
		{"empty snapshot", Update{To: 9, Snapshot: true}, ErrMalformed, "no segments"},
		{"snapshot not from 0", Update{To: 9, Snapshot: true, Segments: []Segment{{r(1, 0), Entry{}}}}, ErrMalformed, "does not start at key 0"},
		{"snapshot gap", Update{To: 9, Snapshot: true, Segments: []Segment{{r(0, 5), Entry{}}, {r(6, 0), Entry{}}}}, ErrMalformed, "gap"},
		{"snapshot overlap", Update{To: 9, Snapshot: true, Segments: []Segment{{r(0, 5), Entry{}}, {r(4, 0), own("a", 1)}}}, ErrMalformed, "overlaps"},
		{"snapshot unsorted", Update{To: 9, Snapshot: true, Segments: []Segment{{r(5, 0), Entry{}}, {r(0, 5), Entry{}}}}, ErrMalformed, "does not start at key 0"},
		{"snapshot short", Update{To: 9, Snapshot: true, Segments: []Segment{{r(0, 5), Entry{}}}}, ErrMalformed, "cover"},
		{"snapshot past the end", Update{To: 9, Snapshot: true, Segments: []Segment{{r(0, 0), Entry{}}, {r(5, 6), Entry{}}}}, ErrMalformed, "more follow"},
		{"snapshot empty range", Update{To: 9, Snapshot: true, Segments: []Segment{{r(0, 5), Entry{}}, {r(5, 5), Entry{}}, {r(5, 0), Entry{}}}}, ErrMalformed, "empty range"},
		{"snapshot bad entry", Update{To: 9, Snapshot: true, Segments: []Segment{{r(0, 0), Entry{Owner: "x"}}}}, ErrMalformed, "LGN 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := viewAt(t, at, base)
			lost, err := v.Apply(tt.u)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply: error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Apply: error %q does not say %q", err, tt.msg)
			}
			if lost != nil {
				t.Fatalf("Apply failed but reported losses %v", lost)
			}
			if v.LSN() != at || !slices.Equal(v.Segments(), base) {
				t.Fatalf("failed Apply changed the view: LSN %d, %v", v.LSN(), v.Segments())
			}
			mustCheck(t, v)
		})
	}
}

func TestApplyEmptyDeltaAndEqualSnapshot(t *testing.T) {
	base := []Segment{{r(0, 100), own("a", 5)}, {r(100, 0), Entry{}}}
	v := viewAt(t, 7, base)
	if lost, err := v.Apply(Update{From: 7, To: 7}); err != nil || lost != nil {
		t.Fatalf("empty delta: %v %v", lost, err)
	}
	if lost, err := v.Apply(Update{From: 3, To: 7, Snapshot: true, Segments: base}); err != nil || lost != nil {
		t.Fatalf("snapshot at the same LSN and content: %v %v", lost, err)
	}
	if v.LSN() != 7 || !slices.Equal(v.Segments(), base) {
		t.Fatalf("view changed: %d %v", v.LSN(), v.Segments())
	}
}

// TestLoss is the loss rule, case by case: a view starts at before (LSN 1)
// and applies one update.
func TestLoss(t *testing.T) {
	a5 := []Segment{{r(0, 100), own("a", 5)}, {r(100, 0), Entry{}}}
	delta := func(changes ...Change) Update {
		for i := range changes {
			changes[i].LSN = keyspace.LSN(i + 2)
		}
		return Update{From: 1, To: keyspace.LSN(len(changes) + 1), Changes: changes}
	}
	snap := func(segs ...Segment) Update { return Update{To: 9, Snapshot: true, Segments: segs} }
	c := func(rg keyspace.Range, e Entry) Change { return Change{Range: rg, Entry: e} }
	rs := func(rs ...keyspace.Range) []keyspace.Range { return rs }

	tests := []struct {
		name   string
		before []Segment
		u      Update
		want   []keyspace.Range
	}{
		{"owned to another LGN is lost", a5, delta(c(r(0, 100), own("b", 9))), rs(r(0, 100))},
		{"owned to another LGN of the same owner is lost", a5, delta(c(r(0, 100), own("a", 9))), rs(r(0, 100))},
		{"owned to migrated is not lost", a5, delta(c(r(0, 100), migrated("b", 9, 0))), nil},
		{"owned to migrated from it is not lost", a5, delta(c(r(0, 100), migrated("b", 9, 5))), nil},
		{"owned to migrated from another LGN is lost", a5, delta(c(r(0, 100), migrated("b", 9, 4))), rs(r(0, 100))},
		{"free to owned is not lost", a5, delta(c(r(100, 200), own("b", 9))), nil},
		{"owned to free is lost", a5, delta(c(r(0, 100), Entry{})), rs(r(0, 100))},
		{"renewal with a new address is not lost", a5, delta(c(r(0, 100), Entry{Owner: "a", Addr: "new:1", LGN: 5})), nil},
		{"half of a range changes", a5, delta(c(r(50, 150), own("b", 9))), rs(r(50, 100))},
		{"middle of a range changes", a5, delta(c(r(20, 30), own("b", 9))), rs(r(20, 30))},
		{"owned, free, owned: lost once at the first change", a5,
			delta(c(r(0, 100), Entry{}), c(r(0, 100), own("b", 9))), rs(r(0, 100))},
		{"owned, free, migrated: still lost at the first change", a5,
			delta(c(r(0, 100), Entry{}), c(r(0, 100), migrated("b", 9, 5))), rs(r(0, 100))},
		{"free, owned: nothing lost", []Segment{{keyspace.Full, Entry{}}},
			delta(c(r(0, 100), own("b", 9))), nil},
		{"losses of several changes coalesce", a5,
			delta(c(r(50, 100), own("b", 9)), c(r(0, 50), own("c", 10)), c(r(50, 60), own("d", 11))), rs(r(0, 100))},
		{"two owners lost to one grant coalesce",
			[]Segment{{r(0, 50), own("a", 5)}, {r(50, 100), own("b", 6)}, {r(100, 0), Entry{}}},
			delta(c(r(0, 100), own("c", 9))), rs(r(0, 100))},
		{"migration from one of two LGNs", []Segment{{r(0, 50), own("a", 5)}, {r(50, 100), own("b", 6)}, {r(100, 0), Entry{}}},
			delta(c(r(0, 100), migrated("c", 9, 6))), rs(r(0, 50))},
		{"separate losses stay separate", a5,
			delta(c(r(0, 10), Entry{}), c(r(90, 100), Entry{})), rs(r(0, 10), r(90, 100))},
		{"end of the key space", []Segment{{r(0, 100), Entry{}}, {r(100, 0), own("a", 5)}},
			delta(c(r(keyspace.MaxKey, 0), Entry{}), c(r(100, 200), own("b", 9))), rs(r(100, 200), r(keyspace.MaxKey, 0))},

		{"snapshot: other LGN is lost", a5, snap(Segment{r(0, 100), own("b", 9)}, Segment{r(100, 0), Entry{}}), rs(r(0, 100))},
		{"snapshot: A/5 → B/9 → A/12 hidden in history is lost", a5,
			snap(Segment{r(0, 100), own("a", 12)}, Segment{r(100, 0), Entry{}}), rs(r(0, 100))},
		{"snapshot: migrated is not lost", a5,
			snap(Segment{r(0, 100), migrated("b", 9, 5)}, Segment{r(100, 0), Entry{}}), nil},
		{"snapshot: migration from an LGN the view never saw is lost", a5,
			snap(Segment{r(0, 100), migrated("c", 12, 9)}, Segment{r(100, 0), Entry{}}), rs(r(0, 100))},
		{"snapshot: migration without MigratedFrom is taken on trust", a5,
			snap(Segment{r(0, 100), migrated("c", 12, 0)}, Segment{r(100, 0), Entry{}}), nil},
		{"snapshot: owned to free is lost", a5, snap(Segment{keyspace.Full, Entry{}}), rs(r(0, 100))},
		{"snapshot: free to owned is not lost", a5,
			snap(Segment{r(0, 100), own("a", 5)}, Segment{r(100, 0), own("b", 9)}), nil},
		{"snapshot: split, half changed", a5,
			snap(Segment{r(0, 30), own("a", 5)}, Segment{r(30, 0), own("b", 9)}), rs(r(30, 100))},
		{"snapshot: pieces coalesce",
			[]Segment{{r(0, 10), own("a", 5)}, {r(10, 20), own("b", 6)}, {r(20, 30), own("c", 7)}, {r(30, 0), Entry{}}},
			snap(Segment{r(0, 5), own("a", 5)}, Segment{r(5, 15), own("d", 8)}, Segment{r(15, 25), own("e", 9)}, Segment{r(25, 0), Entry{}}),
			rs(r(5, 30))},
		{"snapshot: unchanged with uncoalesced input", a5,
			snap(Segment{r(0, 50), own("a", 5)}, Segment{r(50, 100), own("a", 5)}, Segment{r(100, 0), Entry{}}), nil},
		{"snapshot: last key", []Segment{{r(0, keyspace.MaxKey), Entry{}}, {r(keyspace.MaxKey, 0), own("a", 5)}},
			snap(Segment{keyspace.Full, own("b", 6)}), rs(r(keyspace.MaxKey, 0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := viewAt(t, 1, tt.before)
			lost, err := v.Apply(tt.u)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(lost, tt.want) {
				t.Fatalf("lost %v, want %v", lost, tt.want)
			}
			mustCheck(t, v)
		})
	}
}

func TestLostRule(t *testing.T) {
	tests := []struct {
		old, new Entry
		want     bool
	}{
		{Entry{}, Entry{}, false},
		{Entry{}, own("a", 1), false},
		{own("a", 1), own("a", 1), false},
		{own("a", 1), Entry{}, true},
		{own("a", 1), own("a", 2), true},
		{own("a", 1), own("b", 2), true},
		{own("a", 1), migrated("b", 2, 0), false},
		{own("a", 1), migrated("b", 2, 1), false},
		{own("a", 1), migrated("b", 2, 3), true},
		{migrated("a", 1, 7), own("a", 1), false}, // same grant, flag cleared
	}
	for _, tt := range tests {
		if got := Lost(tt.old, tt.new); got != tt.want {
			t.Errorf("Lost(%v, %v) = %v, want %v", tt.old, tt.new, got, tt.want)
		}
	}
}

func TestReset(t *testing.T) {
	v := viewAt(t, 9, []Segment{
		{r(0, 10), Entry{}},
		{r(10, 20), own("a", 1)},
		{r(20, 30), own("b", 2)},
		{r(30, 40), Entry{}},
		{r(40, 0), own("c", 3)},
	})
	lost := v.Reset()
	if want := []keyspace.Range{r(10, 30), r(40, 0)}; !slices.Equal(lost, want) {
		t.Fatalf("Reset() = %v, want %v", lost, want)
	}
	if v.LSN() != 0 || !slices.Equal(v.Segments(), NewView().Segments()) {
		t.Fatalf("after Reset: LSN %d %v", v.LSN(), v.Segments())
	}
	mustCheck(t, v)
	if lost := v.Reset(); lost != nil {
		t.Fatalf("Reset of a free view = %v, want nil", lost)
	}
	// After a reset the view takes a delta from LSN 0 again.
	if _, err := v.Apply(Update{From: 0, To: 1, Changes: []Change{{LSN: 1, Range: r(0, 5), Entry: own("a", 4)}}}); err != nil {
		t.Fatal(err)
	}
}

// TestViewOwnerCompaction checks that owners no segment uses any more are
// dropped, so a long-lived view's memory follows the table, not its history.
func TestViewOwnerCompaction(t *testing.T) {
	tb, v := New(0), NewView()
	for i := range 5000 {
		// Ten live owners at a time, each with a new address every round.
		owner := string(rune('a' + i%10))
		tb.Set(t0, r(keyspace.Key(i%10*100), keyspace.Key(i%10*100+100)),
			Entry{Owner: owner, Addr: fmt.Sprintf("%s:%d", owner, i), LGN: keyspace.LGN(i + 1)})
		if _, err := v.Apply(tb.Since(v.LSN())); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, v)
		if len(v.owners) > 2*minCompact+1 {
			t.Fatalf("step %d: owner list has %d entries for 10 live owners", i, len(v.owners))
		}
	}
	if !slices.Equal(v.Segments(), tb.Segments()) {
		t.Fatal("view differs from table")
	}
}

// TestRoundTrip runs random changes on a Table while a View syncs at random
// points, through deltas and, after truncation or bursts, snapshots. After
// every sync the view must equal the table exactly.
func TestRoundTrip(t *testing.T) {
	forSeeds(t, 50, func(t *testing.T, rng *rand.Rand) {
		p := newPool(rng, 30)
		tb := New(time.Minute)
		v := NewView()
		now := t0
		lgn := keyspace.LGN(0)
		var deltas, snapshots int
		for step := range 600 {
			switch x := rng.IntN(100); {
			case x < 70:
				var e Entry
				if rng.IntN(4) != 0 {
					lgn++
					e = own(string(rune('a'+rng.IntN(5))), lgn)
					if rng.IntN(4) == 0 {
						e.Migrated = true
					}
				}
				tb.Set(now, p.randRange(rng), e)
			case x < 80:
				now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				tb.Truncate(now)
			default:
				u := tb.Since(v.LSN())
				if u.Snapshot {
					snapshots++
				} else {
					deltas++
				}
				if _, err := v.Apply(u); err != nil {
					t.Fatalf("step %d: Apply(%+v): %v", step, u, err)
				}
				mustCheck(t, v)
				if v.LSN() != tb.LSN() {
					t.Fatalf("step %d: view at LSN %d, table at %d", step, v.LSN(), tb.LSN())
				}
				if got, want := v.Segments(), tb.Segments(); !slices.Equal(got, want) {
					t.Fatalf("step %d: after %s sync\nview  %v\ntable %v", step, kind(u), got, want)
				}
				if v.Len() != tb.Len() {
					t.Fatalf("step %d: view Len %d, table Len %d", step, v.Len(), tb.Len())
				}
			}
		}
		if _, err := v.Apply(tb.Since(v.LSN())); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(v.Segments(), tb.Segments()) {
			t.Fatalf("final: view %v\ntable %v", v.Segments(), tb.Segments())
		}
		if deltas == 0 || snapshots == 0 {
			t.Logf("only %d deltas and %d snapshots", deltas, snapshots)
		}
	})
}

func kind(u Update) string {
	if u.Snapshot {
		return "snapshot"
	}
	return "delta"
}

// TestLossRandom checks the losses Apply reports against a reference that
// applies the loss rule key by key (one key per elementary pool interval):
// change by change for a delta, old against new for a snapshot. It also
// checks the recovery-notification guarantee itself: with a manager that
// follows doc.go (fresh LGNs, migrations straight from the old grant with
// MigratedFrom), every key where the state of the grant the view last saw
// was lost is reported, whether the view learns of it by delta or by
// snapshot.
func TestLossRandom(t *testing.T) {
	forSeeds(t, 50, func(t *testing.T, rng *rand.Rand) {
		p := newPool(rng, 30)
		tb := New(time.Minute)
		v := NewView()
		seen := newModel(p)  // what the view knows, per pool key
		truth := newModel(p) // the table, per pool key
		// carrying marks the keys whose current grant still carries the
		// state of the grant the view last saw there; trulyLost marks the
		// keys where that state was lost since the view's last sync. (State
		// granted and lost between two syncs was never routed to through
		// this view, so the view owes no notification for it; a delta still
		// reports it, a snapshot cannot.)
		carrying := make([]bool, len(p))
		trulyLost := make([]bool, len(p))
		now := t0
		lgn := keyspace.LGN(0)
		total := 0
		for step := range 600 {
			switch x := rng.IntN(100); {
			case x < 70:
				rg := p.randRange(rng)
				var e Entry
				idx := p.indexes(rg)
				old := truth.ents[idx[0]]
				uniform := true
				for _, i := range idx {
					uniform = uniform && truth.ents[i] == old
				}
				switch y := rng.IntN(10); {
				case y < 2:
					// free
				case y < 4 && uniform && !old.Free():
					// A clean migration of one whole grant.
					lgn++
					e = migrated(string(rune('a'+rng.IntN(5))), lgn, old.LGN)
				default:
					lgn++
					e = own(string(rune('a'+rng.IntN(5))), lgn)
				}
				for _, i := range idx {
					if carrying[i] && Lost(truth.ents[i], e) {
						trulyLost[i], carrying[i] = true, false
					}
				}
				tb.Set(now, rg, e)
				truth.set(rg, e)
			case x < 80:
				now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				tb.Truncate(now)
			case x < 82:
				lost := v.Reset()
				checkCoalesced(t, "Reset", lost)
				for i, k := range p {
					if got, want := inRanges(lost, k), !seen.ents[i].Free(); got != want {
						t.Fatalf("step %d: Reset: key %x lost=%v, want %v", step, k, got, want)
					}
				}
				seen = newModel(p)
				clear(trulyLost)
				clear(carrying)
			default:
				u := tb.Since(v.LSN())
				// The reference: the rule, key by key.
				want := make([]bool, len(p))
				if u.Snapshot {
					for i, k := range p {
						want[i] = Lost(seen.ents[i], tb.At(k).Entry)
					}
				} else {
					for _, c := range u.Changes {
						for _, i := range p.indexes(c.Range) {
							want[i] = want[i] || Lost(seen.ents[i], c.Entry)
							seen.ents[i] = c.Entry
						}
					}
				}
				lost, err := v.Apply(u)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				checkCoalesced(t, "Apply", lost)
				for i, k := range p {
					got := inRanges(lost, k)
					if got != want[i] {
						t.Fatalf("step %d: %s: key %x lost=%v, want %v (view had %v, table has %v)",
							step, kind(u), k, got, want[i], seen.ents[i], tb.At(k).Entry)
					}
					if trulyLost[i] && !got {
						t.Fatalf("step %d: %s: key %x lost its state since the last sync but no loss was reported",
							step, kind(u), k)
					}
					if got {
						total++
					}
				}
				seen = truth.clone()
				clear(trulyLost)
				for i, e := range seen.ents {
					carrying[i] = !e.Free()
				}
			}
		}
		if total == 0 {
			t.Fatal("no losses at all: the test is not testing anything")
		}
	})
}

func TestViewCloneIsIndependent(t *testing.T) {
	v := NewView()
	seg := Segment{Range: keyspace.Range{Start: 0, End: 100}, Entry: Entry{Owner: "a", Addr: "a:1", LGN: 1}}
	rest := Segment{Range: keyspace.Range{Start: 100, End: 0}}
	if _, err := v.Apply(Update{To: 1, Snapshot: true, Segments: []Segment{seg, rest}}); err != nil {
		t.Fatal(err)
	}
	c := v.Clone()
	if _, err := v.Apply(Update{From: 1, To: 2, Changes: []Change{{LSN: 2, Range: keyspace.Range{Start: 0, End: 50}, Entry: Entry{Owner: "b", Addr: "b:1", LGN: 2}}}}); err != nil {
		t.Fatal(err)
	}
	if owner, _, lgn, ok := c.Lookup(10); !ok || owner != "a" || lgn != 1 || c.LSN() != 1 {
		t.Fatalf("clone changed with the original: %s %d %v LSN %d", owner, lgn, ok, c.LSN())
	}
	if owner, _, _, _ := v.Lookup(10); owner != "b" {
		t.Fatalf("original not updated: %s", owner)
	}
	if !slices.Equal(c.Segments(), []Segment{seg, rest}) {
		t.Fatalf("clone segments %v", c.Segments())
	}
}
