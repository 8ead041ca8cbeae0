package leasetable

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// TestUpdatesAreShared: every Lookup at one LSN gets the same delta or
// snapshot, not a copy of its own. A Manager answers thousands of Lookups
// with the same big delta in one push round (all its Owners' first grants,
// say); a copy each held 24 GB at 1,000 Owners and 4,000 Lookups. Since and
// Snapshot must not allocate once the snapshot is made.
func TestUpdatesAreShared(t *testing.T) {
	tb := paperTable(t)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range 1000 {
		s := tb.At(keyspace.Key(rng.Uint64())).Range
		tb.Set(t0, s, Entry{Owner: "mover", Addr: "10.1.0.1:7000", LGN: keyspace.LGN(100000 + i)})
	}
	from := tb.LSN() - 500

	d1, d2 := tb.Since(from), tb.Since(from)
	if d1.Snapshot || len(d1.Changes) != 500 {
		t.Fatalf("Since(LSN-500) = snapshot %v with %d changes, want a delta of 500", d1.Snapshot, len(d1.Changes))
	}
	if &d1.Changes[0] != &d2.Changes[0] {
		t.Error("two deltas from one LSN do not share their changes")
	}
	if n := testing.AllocsPerRun(100, func() { tb.Since(from) }); n != 0 {
		t.Errorf("Since (a delta) allocates %v times per call; want 0", n)
	}

	s1 := tb.Since(0) // the log starts at LSN 2 (Restore at 1): a snapshot
	if !s1.Snapshot || s1.From != 0 || s1.To != tb.LSN() {
		t.Fatalf("Since(0) = snapshot %v %d..%d, want a snapshot 0..%d", s1.Snapshot, s1.From, s1.To, tb.LSN())
	}
	s2, s3 := tb.Since(tb.LSN()+5), tb.Snapshot()
	if &s1.Segments[0] != &s2.Segments[0] || &s1.Segments[0] != &s3.Segments[0] {
		t.Error("snapshots at one LSN do not share their segments")
	}
	if s2.From != tb.LSN()+5 || s3.From != 0 || s3.To != tb.LSN() {
		t.Errorf("snapshot LSNs: Since %d..%d, Snapshot %d..%d", s2.From, s2.To, s3.From, s3.To)
	}
	if n := testing.AllocsPerRun(100, func() { tb.Since(0) }); n != 0 {
		t.Errorf("Since (a snapshot made already) allocates %v times per call; want 0", n)
	}
	if cap(s1.Segments) != len(s1.Segments) {
		t.Errorf("snapshot has cap %d > len %d: appending to it would write into the shared copy", cap(s1.Segments), len(s1.Segments))
	}

	want := slices.Clone(s1.Segments)
	tb.Set(t0, tb.At(0).Range, Entry{Owner: "next", LGN: 1 << 40})
	s4 := tb.Snapshot()
	if &s4.Segments[0] == &s1.Segments[0] || !slices.Equal(s4.Segments, tb.Segments()) {
		t.Error("a change did not give a new snapshot")
	}
	if !slices.Equal(s1.Segments, want) {
		t.Error("a change altered a snapshot handed out before it")
	}
}

// TestUpdatesStayPut: an Update, once returned, never changes, whatever the
// table does after — Sets that grow the log into a new array, Truncates
// that drop part or all of it, Restore — since a Manager sends or encodes it
// while the table goes on.
func TestUpdatesStayPut(t *testing.T) {
	forSeeds(t, 20, func(t *testing.T, rng *rand.Rand) {
		p := newPool(rng, 20)
		tb := New(time.Minute)
		now := t0
		type kept struct {
			u    Update
			want Update
		}
		var out []kept
		check := func(step int) {
			t.Helper()
			for i, k := range out {
				if !slices.Equal(k.u.Changes, k.want.Changes) || !slices.Equal(k.u.Segments, k.want.Segments) {
					t.Fatalf("step %d: update %d (%d..%d, snapshot %v) changed after it was returned",
						step, i, k.u.From, k.u.To, k.u.Snapshot)
				}
			}
		}
		for step := range 2000 {
			switch x := rng.IntN(100); {
			case x < 60:
				e := Entry{}
				if rng.IntN(4) != 0 {
					e = own(string(rune('a'+rng.IntN(5))), keyspace.LGN(step+1))
				}
				tb.Set(now, p.randRange(rng), e)
			case x < 70:
				now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				tb.Truncate(now)
			case x < 72:
				if err := tb.Restore(tb.LSN()+keyspace.LSN(rng.IntN(3)), tb.Segments()); err != nil {
					t.Fatal(err)
				}
			default:
				lsn := keyspace.LSN(0)
				if tb.LSN() > 0 {
					lsn = keyspace.LSN(rng.Uint64N(uint64(tb.LSN()) + 2))
				}
				u := tb.Since(lsn)
				out = append(out, kept{u, Update{Changes: slices.Clone(u.Changes), Segments: slices.Clone(u.Segments)}})
			}
			if step%50 == 0 {
				check(step)
			}
		}
		check(2000)
	})
}
