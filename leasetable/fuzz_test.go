package leasetable

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// FuzzViewApply decodes the input into a sequence of updates, mostly
// plausible and sometimes hostile, and applies them to a View. Apply must
// never panic; after every call the view's invariants hold; a failed call
// leaves the view unchanged; a successful one leaves it equal to a reference
// Table that applied the same update through its own code, with the losses a
// brute-force diff finds.
//
//	go test -run='^$' -fuzz=FuzzViewApply -fuzztime=60s ./leasetable/
func FuzzViewApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x02, 0x01, 0x03, 0x11, 0x05, 0x00, 0x01, 0x00, 0x07, 0x21})
	f.Add([]byte{0x01, 0x03, 0x02, 0x05, 0x07, 0x11, 0x22, 0x00, 0x33, 0x00, 0x02, 0x05, 0x00, 0x12})
	f.Add([]byte{0x02, 0x00, 0x04, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x02, 0x13})
	f.Add([]byte{0x01, 0x05, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x09, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x07, 0x05, 0x03})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		v := NewView()
		ref := newTable(0, 4) // the reference content; its own LSN is not used
		for step := 0; step < 64 && in.more(); step++ {
			op := in.byte()
			if op%16 == 15 {
				wantLost := ownedRanges(ref.Segments())
				lost := v.Reset()
				if !slices.Equal(lost, wantLost) {
					t.Fatalf("step %d: Reset() = %v, want %v", step, lost, wantLost)
				}
				ref = newTable(0, 4)
				mustCheck(t, v)
				continue
			}
			u := in.update(op, v.LSN())
			beforeSegs, beforeLSN := v.Segments(), v.LSN()

			lost, err := v.Apply(u)

			mustCheck(t, v)
			if err != nil {
				if lost != nil {
					t.Fatalf("step %d: Apply failed (%v) but reported losses %v", step, err, lost)
				}
				if v.LSN() != beforeLSN || !slices.Equal(v.Segments(), beforeSegs) {
					t.Fatalf("step %d: failed Apply (%v) changed the view", step, err)
				}
				continue
			}
			wantLost := refApply(t, ref, u)
			if err := ref.check(); err != nil {
				t.Fatalf("step %d: reference table: %v", step, err)
			}
			if !slices.Equal(lost, wantLost) {
				t.Fatalf("step %d: Apply(%+v) lost %v, want %v", step, u, lost, wantLost)
			}
			if v.LSN() != u.To {
				t.Fatalf("step %d: LSN %d after applying an update to %d", step, v.LSN(), u.To)
			}
			segs := v.Segments()
			if want := ref.Segments(); !slices.Equal(segs, want) {
				t.Fatalf("step %d: view\n%v\nreference\n%v", step, segs, want)
			}
			for _, s := range segs {
				for _, k := range []keyspace.Key{s.Range.Start, s.Range.Last()} {
					o, a, l, ok := v.Lookup(k)
					if o != s.Entry.Owner || a != s.Entry.Addr || l != s.Entry.LGN || ok == s.Entry.Free() {
						t.Fatalf("step %d: Lookup(%x) = %q %q %d %v, want %v", step, k, o, a, l, ok, s.Entry)
					}
				}
			}
		}
	})
}

// refApply applies a valid update to the reference table and returns the
// losses, found by brute force: every piece of every old segment against
// every change or new segment that overlaps it.
func refApply(t *testing.T, ref *Table, u Update) []keyspace.Range {
	var lost []keyspace.Range
	if u.Snapshot {
		old := ref.Segments()
		for _, o := range old {
			for _, n := range u.Segments {
				if x, ok := o.Range.Intersect(n.Range); ok && Lost(o.Entry, n.Entry) {
					lost = append(lost, x)
				}
			}
		}
		if err := ref.Restore(u.To, u.Segments); err != nil {
			t.Fatalf("the view took a snapshot the table refuses: %v", err)
		}
		return coalesce(lost)
	}
	for _, c := range u.Changes {
		for _, s := range ref.Overlapping(c.Range) {
			if Lost(s.Entry, c.Entry) {
				lost = append(lost, s.Range)
			}
		}
		ref.Set(t0, c.Range, c.Entry)
	}
	return coalesce(lost)
}

// ownedRanges returns the owned ranges of segs, coalesced.
func ownedRanges(segs []Segment) []keyspace.Range {
	var out []keyspace.Range
	for _, s := range segs {
		if !s.Entry.Free() {
			out = append(out, s.Range)
		}
	}
	return coalesce(out)
}

// fuzzInput reads fuzz bytes; past the end it reads zeros.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) more() bool { return len(in.b) > 0 }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

// fuzzKeys are the keys most fuzzed ranges start and end on, so that
// changes collide; the rest are raw 64-bit values.
var fuzzKeys = []keyspace.Key{0, 1, 2, 3, 10, 11, 100, 1 << 32, 1 << 63, keyspace.MaxKey - 1, keyspace.MaxKey}

func (in *fuzzInput) key() keyspace.Key {
	c := in.byte()
	if c < 0xf0 {
		return fuzzKeys[int(c)%len(fuzzKeys)]
	}
	var buf [8]byte
	for i := range buf {
		buf[i] = in.byte()
	}
	return keyspace.Key(binary.LittleEndian.Uint64(buf[:]))
}

// entry decodes an entry: usually valid, sometimes not (LGN 0 for an owner,
// an LGN or a migrated flag on a free entry, MigratedFrom without Migrated).
func (in *fuzzInput) entry() Entry {
	c := in.byte()
	var e Entry
	if o := c % 4; o != 0 {
		e.Owner = fmt.Sprintf("o%d", o)
		e.Addr = fmt.Sprintf("h%d:%d", o, c>>6)
	}
	d := in.byte()
	e.LGN = keyspace.LGN(d % 16)
	if e.Owner != "" && e.LGN == 0 && d&0x80 == 0 {
		e.LGN = 1 // keep most entries valid
	}
	if e.Owner == "" && d&0x80 == 0 {
		e.LGN = 0
	}
	e.Migrated = d&0x10 != 0
	if d&0x20 != 0 {
		e.MigratedFrom = keyspace.LGN(d>>6) + 1
	}
	if e.Owner == "" && d&0x40 == 0 {
		e.Migrated, e.MigratedFrom = false, 0
	}
	return e
}

// update decodes one update for a view at lsn. Bits of op choose the kind
// and which parts to corrupt.
func (in *fuzzInput) update(op byte, lsn keyspace.LSN) Update {
	if op&1 == 0 { // delta
		n := int(in.byte() % 6)
		u := Update{From: lsn, To: lsn + keyspace.LSN(n)}
		if op&0x02 != 0 {
			u.From = keyspace.LSN(in.byte())
		}
		if op&0x04 != 0 {
			u.To = u.From + keyspace.LSN(in.byte()%8)
		}
		for i := range n {
			c := Change{LSN: u.From + keyspace.LSN(i) + 1}
			start, end := in.key(), in.key()
			if op&0x08 == 0 && end != 0 && end < start {
				start, end = end, start
			}
			if op&0x08 == 0 && start == end {
				end = 0
			}
			c.Range = keyspace.Range{Start: start, End: end}
			c.Entry = in.entry()
			if op&0x20 != 0 && i == n-1 {
				c.LSN += keyspace.LSN(in.byte() % 3)
			}
			u.Changes = append(u.Changes, c)
		}
		if op&0x40 != 0 {
			u.Segments = []Segment{{Range: keyspace.Full}}
		}
		return u
	}

	// snapshot
	n := int(in.byte()%8) + 1
	bounds := []keyspace.Key{0}
	for range n - 1 {
		bounds = append(bounds, in.key())
	}
	if op&0x02 == 0 {
		slices.Sort(bounds)
		bounds = slices.Compact(bounds)
	}
	u := Update{From: lsn, To: lsn + keyspace.LSN(in.byte()%3), Snapshot: true}
	if op&0x04 != 0 && u.To > 0 {
		u.To-- // possibly stale
	}
	for i, b := range bounds {
		s := Segment{Range: keyspace.Range{Start: b}}
		if i+1 < len(bounds) {
			s.Range.End = bounds[i+1]
		}
		s.Entry = in.entry()
		u.Segments = append(u.Segments, s)
	}
	switch {
	case op&0x08 != 0 && len(u.Segments) > 1: // drop one: a gap or a short end
		i := int(in.byte()) % len(u.Segments)
		u.Segments = slices.Delete(u.Segments, i, i+1)
	case op&0x10 != 0: // shift one boundary: overlap, gap or empty range
		i := int(in.byte()) % len(u.Segments)
		u.Segments[i].Range.Start += keyspace.Key(in.byte()%3) - 1
	}
	if op&0x40 != 0 {
		u.Changes = []Change{{LSN: 1, Range: keyspace.Full}}
	}
	return u
}
