package sim

import (
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestSizeCacheIsExact: the cached size of a shared Update is wireSize's,
// for every message that carries it, and a different slice of the same log
// gets its own.
func TestSizeCacheIsExact(t *testing.T) {
	var log []leasetable.Change
	for i := range 300 {
		log = append(log, leasetable.Change{LSN: keyspace.LSN(i + 1), Range: keyspace.Range{Start: keyspace.Key(i), End: keyspace.Key(i + 1)},
			Entry: leasetable.Entry{Owner: "owner-" + string(rune('a'+i%26)), Addr: "a:1", LGN: keyspace.LGN(i + 1)}})
	}
	var c sizes
	for round := range 3 {
		for _, u := range []leasetable.Update{{From: 0, To: 300, Changes: log}, {From: 0, To: 200, Changes: log[:200]}, {From: 100, To: 300, Changes: log[100:]}} {
			for _, ns := range []string{"default", "presence"} {
				m := &protocol.SyncResponse{Namespace: ns, Update: u}
				if got, want := c.of(m), wireSize(m); got != want {
					t.Fatalf("round %d, %d changes from %d, namespace %q: cached size %d, wireSize %d", round, len(u.Changes), u.From, ns, got, want)
				}
			}
		}
	}
	if len(c.m) != 3 {
		t.Fatalf("%d sizes cached, want 3 (one per Update)", len(c.m))
	}
}
