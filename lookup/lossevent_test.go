package lookup

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// TestLossNamesTheOwner: a loss notification names the Owner that held each
// range lost in the copy (Loss.Owners), a migration names no one, and the
// loss schema writes it as documented in docs/protocol.md.
func TestLossNamesTheOwner(t *testing.T) {
	tab := leasetable.New(time.Hour)
	tab.Set(base, kr(0, 100), own("kv-1", 1))
	tab.Set(base, kr(100, 200), own("kv-2", 2))
	tab.Set(base, kr(200, 0), own("kv-3", 3))
	c := synced(t, tab)
	from := tab.LSN()
	tab.Set(base, kr(100, 200), own("kv-1", 4)) // kv-2's state lost
	moved := own("kv-1", 5)
	moved.Migrated, moved.MigratedFrom = true, 3
	tab.Set(base, kr(200, 300), moved) // a planned move from kv-3: no loss
	r := step(c, at(20*ms), push(delta(t, tab, from)))
	if len(r.losses) != 1 {
		t.Fatalf("losses %+v, want one", r.losses)
	}
	l := r.losses[0]
	want := []leasetable.OwnerRanges{{Owner: "kv-2", Addr: "kv-2:7000", Ranges: []keyspace.Range{kr(100, 200)}}}
	if !slices.Equal(l.Ranges, []keyspace.Range{kr(100, 200)}) || len(l.Owners) != 1 || l.Owners[0].Owner != want[0].Owner ||
		l.Owners[0].Addr != want[0].Addr || !slices.Equal(l.Owners[0].Ranges, want[0].Ranges) {
		t.Fatalf("loss %+v, want %v naming %v", l, kr(100, 200), want)
	}
	b, err := json.Marshal(NewLossEvent(7, ns, time.Date(2026, 11, 28, 13, 5, 1, 500e6, time.UTC), l))
	if err != nil {
		t.Fatal(err)
	}
	if got := `{"event":"loss","id":7,"namespace":"default","at":"2026-11-28T13:05:01.5Z","all":false,` +
		`"ranges":[{"start":"0x0000000000000064","end":"0x00000000000000c8"}],` +
		`"owners":[{"owner":"kv-2","addr":"kv-2:7000","ranges":[{"start":"0x0000000000000064","end":"0x00000000000000c8"}]}]}`; string(b) != got {
		t.Errorf("the loss event is\n%s\nwant\n%s", b, got)
	}
}
