package leasetable_test

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// The Manager changes its table; a Lookup syncs its view from it and learns
// which ranges lost their soft state.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := keyspace.Range{Start: 0x1000, End: 0x2000}

	t := leasetable.New(0)
	t.Set(now, r, leasetable.Entry{Owner: "a", Addr: "10.0.0.1:7000", LGN: 5})

	v := leasetable.NewView()
	lost, err := v.Apply(t.Since(v.LSN()))
	fmt.Println("first sync:", v.LSN(), lost, err)

	owner, addr, lgn, ok := v.Lookup(0x1234)
	fmt.Println("lookup:", owner, addr, lgn, ok)

	// a crashes; the Manager grants the range to b under a new LGN.
	t.Set(now, r, leasetable.Entry{Owner: "b", Addr: "10.0.0.2:7000", LGN: 9})
	// b hands half of it to c, migrating the state along.
	t.Set(now, keyspace.Range{Start: 0x1800, End: 0x2000},
		leasetable.Entry{Owner: "c", Addr: "10.0.0.3:7000", LGN: 12, Migrated: true, MigratedFrom: 9})

	u := t.Since(v.LSN())
	lost, err = v.Apply(u)
	fmt.Println("delta:", u.From, "to", u.To, "lost", lost, err)
	// Output:
	// first sync: 1 [] <nil>
	// lookup: a 10.0.0.1:7000 5 true
	// delta: 1 to 3 lost [[0000000000001000, 0000000000002000)] <nil>
}

// A snapshot is diffed against the view: a loss hidden in compacted history
// is still found, because the LGN differs.
func ExampleView_Apply_snapshot() {
	full := func(e leasetable.Entry) []leasetable.Segment {
		return []leasetable.Segment{{Range: keyspace.Full, Entry: e}}
	}
	v := leasetable.NewView()
	v.Apply(leasetable.Update{To: 1, Snapshot: true, Segments: full(leasetable.Entry{Owner: "a", LGN: 5})})

	// Meanwhile: a/5 → b/9 → a/12. The view sees only the end.
	lost, err := v.Apply(leasetable.Update{To: 3, Snapshot: true, Segments: full(leasetable.Entry{Owner: "a", LGN: 12})})
	fmt.Println(lost, err)
	// Output:
	// [[0000000000000000, end)] <nil>
}
