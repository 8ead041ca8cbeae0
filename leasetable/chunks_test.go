package leasetable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// mustCheckTable fails t if tb's invariants are broken or its content is not
// want.
func mustCheckTable(t *testing.T, what string, tb *Table, want []Segment) {
	t.Helper()
	if err := tb.check(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := tb.Segments(); !slices.Equal(got, want) {
		t.Fatalf("%s: Segments()\n got %v\nwant %v", what, got, want)
	}
	if tb.Len() != len(want) {
		t.Fatalf("%s: Len() = %d, want %d", what, tb.Len(), len(want))
	}
}

// TestTableChunksEveryEdge: on a table of 25 segments in chunks of at most
// 4, every Set whose ends fall on, just before or just after a segment
// boundary (and so on every kind of chunk edge), with a new entry and with
// the entries of the segments around it (so that it merges), compared with
// the pool model.
func TestTableChunksEveryEdge(t *testing.T) {
	var p pool
	for k := keyspace.Key(0); k <= 240; k += 5 {
		p = append(p, k)
	}
	base := newModel(p)
	for i := range p {
		base.ents[i] = own(fmt.Sprintf("o%d", i/2%7), keyspace.LGN(i/2+1)) // segments [10j, 10j+10)
	}
	base.ents[len(p)-1] = Entry{} // [240, end) free
	tb0 := newTable(0, 4)
	if err := tb0.Restore(1, base.segments()); err != nil {
		t.Fatal(err)
	}
	mustCheckTable(t, "restored", tb0, base.segments())
	if n := len(tb0.segs.chunks); n < 6 {
		t.Fatalf("%d segments in %d chunks; want at least 6 chunks", tb0.Len(), n)
	}
	for a := range p {
		for b := a + 1; b <= len(p); b++ {
			rg := r(p[a], 0)
			if b < len(p) {
				rg.End = p[b]
			}
			entries := []Entry{own("new", 1000), base.ents[a], base.ents[b-1]}
			if a > 0 {
				entries = append(entries, base.ents[a-1])
			}
			if b < len(p) {
				entries = append(entries, base.ents[b])
			}
			for _, e := range entries {
				tb, m := clone(t, tb0), base.clone()
				tb.Set(t0, rg, e)
				m.set(rg, e)
				mustCheckTable(t, fmt.Sprintf("Set(%v, %v)", rg, e), tb, m.segments())
			}
		}
	}
}

// TestTableChunksVsModel drives tables with small chunks through phases
// that grow them to hundreds of segments (chunks split), overwrite long
// ranges (a change spans chunks), and shrink them back (chunks merge and
// empty), checking the invariants and the whole content against the pool
// model after every Set.
func TestTableChunksVsModel(t *testing.T) {
	for _, chunk := range []int{4, 7, 16} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			forSeeds(t, 6, func(t *testing.T, rng *rand.Rand) {
				p := newPool(rng, 300)
				m := newModel(p)
				tb := newTable(0, chunk)
				var splits, merges, spans, most int
				for step := range 1800 {
					var rg keyspace.Range
					var e Entry
					switch phase := step / 600; phase {
					case 0: // grow: short ranges, fresh entries
						a := rng.IntN(len(p) - 1)
						rg, e = r(p[a], p[a+1+rng.IntN(min(2, len(p)-a-1))]), own(fmt.Sprintf("g%d", rng.IntN(5)), keyspace.LGN(step+1))
					case 1: // churn: any range, a few entries
						rg, e = p.randRange(rng), own(fmt.Sprintf("c%d", rng.IntN(3)), keyspace.LGN(rng.IntN(3)+1))
					default: // shrink: long ranges, free or one entry
						a := rng.IntN(len(p))
						b := min(a+1+rng.IntN(40), len(p))
						rg = r(p[a], 0)
						if b < len(p) {
							rg.End = p[b]
						}
						if rng.IntN(2) == 0 {
							e = own("s", 1)
						}
					}
					ca, _ := tb.segs.find(rg.Start)
					cb := len(tb.segs.chunks) - 1
					if rg.End != 0 {
						cb, _ = tb.segs.find(rg.End)
					}
					if ca != cb {
						spans++
					}
					before := len(tb.segs.chunks)
					tb.Set(t0, rg, e)
					m.set(rg, e)
					switch after := len(tb.segs.chunks); {
					case after > before:
						splits++
					case after < before:
						merges++
					}
					most = max(most, len(tb.segs.chunks))
					want := m.segments()
					mustCheckTable(t, fmt.Sprintf("step %d: Set(%v, %v)", step, rg, e), tb, want)
					for i, k := range p {
						if got := tb.At(k).Entry; got != m.ents[i] {
							t.Fatalf("step %d: At(%x) = %v, want %v", step, k, got, m.ents[i])
						}
					}
					if step%100 == 99 {
						for _, o := range []string{"g1", "c2", "s"} {
							var w []Segment
							for _, s := range want {
								if s.Entry.Owner == o {
									w = append(w, s)
								}
							}
							if got := tb.Owned(o); !slices.Equal(got, w) {
								t.Fatalf("step %d: Owned(%q)\n got %v\nwant %v", step, o, got, w)
							}
						}
					}
				}
				// The run must have exercised what it is for.
				if most < 300/chunk || splits < 20 || merges < 20 || spans < 20 {
					t.Fatalf("at most %d chunks; %d splits, %d merges, %d changes across chunks: the test lost its reach",
						most, splits, merges, spans)
				}
			})
		})
	}
}

// TestTableEachOverlapping: EachOverlapping visits what Overlapping
// returns, in order, stops when told, and does not allocate.
func TestTableEachOverlapping(t *testing.T) {
	forSeeds(t, 10, func(t *testing.T, rng *rand.Rand) {
		p := newPool(rng, 100)
		tb := newTable(0, 4)
		for i := range 300 {
			tb.Set(t0, p.randRange(rng), own(fmt.Sprintf("o%d", rng.IntN(4)), keyspace.LGN(i+1)))
		}
		for range 200 {
			rg := p.randRange(rng)
			want := tb.Overlapping(rg)
			var got []Segment
			tb.EachOverlapping(rg, func(s Segment) bool {
				got = append(got, s)
				return true
			})
			if !slices.Equal(got, want) {
				t.Fatalf("EachOverlapping(%v)\n got %v\nwant %v", rg, got, want)
			}
			stop := rng.IntN(len(want)) + 1
			got = got[:0]
			tb.EachOverlapping(rg, func(s Segment) bool {
				got = append(got, s)
				return len(got) < stop
			})
			if !slices.Equal(got, want[:stop]) {
				t.Fatalf("EachOverlapping(%v) stopping after %d\n got %v\nwant %v", rg, stop, got, want[:stop])
			}
		}
		var all []Segment
		tb.Each(func(s Segment) bool { all = append(all, s); return true })
		if !slices.Equal(all, tb.Segments()) {
			t.Fatalf("Each\n got %v\nwant %v", all, tb.Segments())
		}
		tb.EachOverlapping(r(5, 5), func(Segment) bool {
			t.Fatal("EachOverlapping visited a segment of an empty range")
			return false
		})
	})

	tb := paperTable(t)
	var n int
	allocs := testing.AllocsPerRun(20, func() {
		n = 0
		tb.EachOverlapping(r(1<<62, 1<<63), func(s Segment) bool {
			n++
			return true
		})
	})
	if allocs != 0 || n < 1000 {
		t.Fatalf("EachOverlapping over a quarter of the paper's table: %d segments, %v allocations; want about 1600 and 0", n, allocs)
	}
}

// FuzzTableSet applies a decoded sequence of Sets (and an occasional
// Restore of the table's own content) to a table with chunks of 4 and to a
// plain segList, the View's flat representation, and requires the same
// content, the same no-op answers, and intact invariants after every step.
//
//	go test -run='^$' -fuzz=FuzzTableSet -fuzztime=60s ./leasetable/
func FuzzTableSet(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x10, 0x20, 0x01, 0x03, 0x00, 0x30, 0x18, 0x02, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00})
	f.Add([]byte{0x07, 0x00, 0x01, 0x02, 0x01, 0x01, 0x00, 0x03, 0x04, 0x02, 0x02, 0x07})
	rng := rand.New(rand.NewPCG(11, 12))
	for range 4 {
		seed := make([]byte, 2000)
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		// Most keys are one of 240 spread over the key space, so that the
		// table grows past a few chunks; the rest are raw.
		key := func() keyspace.Key {
			if c := in.byte(); c < 0xf0 {
				return keyspace.Key(c) * 0x0101010101010101
			}
			return in.key()
		}
		tb := newTable(0, 4)
		ref := newSegList(Entry{})
		for step := 0; step < 512 && in.more(); step++ {
			op := in.byte()
			if op%16 == 15 {
				if err := tb.Restore(tb.LSN()+1, tb.Segments()); err != nil {
					t.Fatalf("step %d: Restore of the table's own segments: %v", step, err)
				}
			} else {
				rg := keyspace.Range{Start: key(), End: key()}
				if rg.End != 0 && rg.End < rg.Start {
					rg.Start, rg.End = rg.End, rg.Start
				}
				if rg.Start == rg.End {
					rg.End = 0
				}
				e := in.entry()
				if e.Validate() != nil {
					e = Entry{}
				}
				before := tb.LSN()
				changed := ref.set(rg, e, nil)
				if lsn := tb.Set(t0, rg, e); (lsn != before) != changed {
					t.Fatalf("step %d: Set(%v, %v): LSN %d after %d, but the content changed: %v", step, rg, e, lsn, before, changed)
				}
			}
			mustCheckTable(t, fmt.Sprintf("step %d", step), tb, ref.segments(keyspace.Full, identity))
		}
	})
}
