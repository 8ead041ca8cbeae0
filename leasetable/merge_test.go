package leasetable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// A merged delta applies exactly as the whole one: the same view, and the
// same losses reported, from any view — over random tables and deltas
// built as the Manager builds them, with ranges freed and granted again,
// migrations, and splits.
func TestMergeAppliesAsTheWhole(t *testing.T) {
	bounds := []keyspace.Key{0, 1 << 60, 1 << 61, 3 << 60, 1 << 62, 5 << 60, 3 << 61, 7 << 60, 1 << 63, 9 << 60, 5 << 61}
	randRange := func(r *rand.Rand) keyspace.Range {
		i := r.IntN(len(bounds))
		j := i + 1 + r.IntN(2)
		if j >= len(bounds) {
			return keyspace.Range{Start: bounds[i], End: 0}
		}
		return keyspace.Range{Start: bounds[i], End: bounds[j]}
	}
	merged, fromCopy, ownerFromCopy := 0, 0, 0
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 7))
		tb := New(0)
		now := time.Unix(0, 0)
		lgn := keyspace.LGN(0)
		owned := func(lastLGN keyspace.LGN) Entry {
			lgn++
			o := fmt.Sprint("o", r.IntN(4))
			e := Entry{Owner: o, Addr: o + ":1", LGN: lgn}
			if lastLGN != 0 && r.IntN(4) == 0 {
				e.Migrated, e.MigratedFrom = true, lastLGN
			}
			return e
		}
		step := func() {
			rg := randRange(r)
			old := tb.At(rg.Start).Entry
			switch r.IntN(3) {
			case 0:
				tb.Set(now, rg, Entry{}) // freed
				if r.IntN(2) == 0 {
					// And granted at once, sometimes naming the freed
					// lease as migrated (the Manager never does: the
					// merged change must report the loss all the same).
					tb.Set(now, rg, owned(old.LGN))
				}
			default:
				tb.Set(now, rg, owned(old.LGN))
			}
		}
		for range 10 {
			step()
		}
		base := tb.LSN()
		start := tb.Snapshot()
		for range 1 + r.IntN(12) {
			step()
		}
		whole := tb.Since(base)
		m := Merge(whole)
		if m.Merged {
			merged++
		}
		a, b := NewView(), NewView()
		if _, err := a.Apply(start); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Apply(start); err != nil {
			t.Fatal(err)
		}
		// The same, marked and merged as for a compact delta, with the
		// End of every change marked FromCopy left out: the Lookup takes
		// it from its copy.
		cm := Merge(MarkFromCopy(whole))
		cm.Changes = slices.Clone(cm.Changes)
		strip := func(u Update) Update {
			u.Changes = slices.Clone(u.Changes)
			for i := range u.Changes {
				if u.Changes[i].FromCopy {
					u.Changes[i].Range.End = 0
				}
				if u.Changes[i].OwnerFromCopy {
					u.Changes[i].Entry.Owner, u.Changes[i].Entry.Addr = "", ""
				}
			}
			return u
		}
		cm = strip(cm)
		for _, c := range cm.Changes {
			if c.FromCopy {
				fromCopy++
			}
			if c.OwnerFromCopy {
				ownerFromCopy++
			}
		}
		for _, u := range []Update{MarkFromCopy(whole), cm} {
			c := NewView()
			if _, err := c.Apply(start); err != nil {
				t.Fatal(err)
			}
			u = strip(u)
			lc, err := c.Apply(u)
			if err != nil {
				t.Fatalf("seed %d: delta with ends from the copy: %v\n%v", seed, err, u.Changes)
			}
			wa := NewView()
			_, _ = wa.Apply(start)
			lw, _ := wa.Apply(whole)
			if !slices.Equal(lw, lc) || !slices.Equal(wa.Segments(), c.Segments()) || c.LSN() != wa.LSN() {
				t.Fatalf("seed %d: the delta with ends from the copy applies otherwise:\nwhole %v\ncompact %v\nlost %v vs %v\nview %v\nvs %v",
					seed, whole.Changes, u.Changes, lw, lc, wa.Segments(), c.Segments())
			}
		}
		la, err := a.Apply(whole)
		if err != nil {
			t.Fatalf("seed %d: whole delta: %v", seed, err)
		}
		lb, err := b.Apply(m)
		if err != nil {
			t.Fatalf("seed %d: merged delta: %v\n%v", seed, err, m.Changes)
		}
		if !slices.Equal(la, lb) || !slices.Equal(a.Segments(), b.Segments()) || a.LSN() != b.LSN() {
			t.Fatalf("seed %d: the merged delta applies otherwise:\nwhole %v\nmerged %v\nlost %v vs %v\nview %v\nvs %v",
				seed, whole.Changes, m.Changes, la, lb, a.Segments(), b.Segments())
		}
	}
	if merged < 300 {
		t.Errorf("only %d of 3000 deltas were merged: the test does not exercise Merge", merged)
	}
	if ownerFromCopy < 300 {
		t.Errorf("only %d changes took their owner from the copy: the test does not exercise OwnerFromCopy", ownerFromCopy)
	}
	if fromCopy < 1000 {
		t.Errorf("only %d changes took their End from the copy (of about 1,650): the test does not exercise MarkFromCopy", fromCopy)
	}
}

// An Owner's crash: its ranges freed, then granted to others in the same
// round. The merged delta carries one change per range, not two.
func TestMergeCrashDelta(t *testing.T) {
	tb := New(0)
	now := time.Unix(0, 0)
	var rs []keyspace.Range
	for i := range keyspace.Key(8) {
		rs = append(rs, keyspace.Range{Start: i << 60, End: i<<60 + 1<<50})
		tb.Set(now, rs[i], Entry{Owner: "a", Addr: "a:1", LGN: keyspace.LGN(i + 1)})
	}
	for i := range keyspace.Key(20) { // other Owners' segments: the delta is shorter than the table
		tb.Set(now, keyspace.Range{Start: 9<<60 + i<<50, End: 9<<60 + (i+1)<<50}, Entry{Owner: "c", Addr: "c:1", LGN: keyspace.LGN(50 + i)})
	}
	base := tb.LSN()
	for _, r := range rs {
		tb.Set(now, r, Entry{})
	}
	for i, r := range rs {
		tb.Set(now, r, Entry{Owner: "b", Addr: "b:1", LGN: keyspace.LGN(100 + i)})
	}
	m := Merge(tb.Since(base))
	if !m.Merged || len(m.Changes) != len(rs) {
		t.Fatalf("merged crash delta has %d changes (merged %v); want %d", len(m.Changes), m.Merged, len(rs))
	}
	for _, c := range m.Changes {
		if !c.ViaFree || c.Entry.Owner != "b" {
			t.Errorf("change %v", c)
		}
	}
	// A merged delta with a skipped LSN out of order, or not ending at To,
	// is refused.
	v := NewView()
	if _, err := v.Apply(Update{To: base, Snapshot: true, Segments: snapshotOf(t, tb, base)}); err != nil {
		t.Fatal(err)
	}
	short := m
	short.Changes = slices.Clone(m.Changes[:len(m.Changes)-1])
	back := m
	back.Changes = slices.Clone(m.Changes)
	back.Changes[1], back.Changes[2] = back.Changes[2], back.Changes[1]
	for _, bad := range []Update{short, back} {
		if _, err := v.Apply(bad); err == nil {
			t.Errorf("a merged delta whose LSNs do not increase to To was applied: %v", bad.Changes)
		}
	}
	lost, err := v.Apply(m)
	if err != nil || !slices.Equal(lost, rs) {
		t.Errorf("crash delta: lost %v, err %v; want every range of a", lost, err)
	}
}

// snapshotOf returns tb's segments as they were at lsn, from its log.
func snapshotOf(t *testing.T, tb *Table, lsn keyspace.LSN) []Segment {
	t.Helper()
	old := New(0)
	for _, c := range tb.log {
		if c.LSN <= lsn {
			old.Set(time.Unix(0, 0), c.Range, c.Entry)
		}
	}
	return old.Segments()
}
