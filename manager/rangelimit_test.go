package manager_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// text returns what b holds.
func (b *syncBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRangeLimitOverTheWire: a Manager run with MaxRanges 1,000 and one
// Owner of capacity 1 (64 ranges). Four Owners of capacity 100 start
// together: each is refused, and its log names --max-ranges and the limit;
// then four of capacity 4 start together: three are admitted and the
// fourth, which would take the table past 1,000 with them, is refused. A
// Lookup's copy of the table never has more than 1,000 ranges.
func TestRangeLimitOverTheWire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const limit = 1000
		tm := protocol.Fast()
		c := startManager(t, manager.Config{Insecure: true, Timing: tm, MaxRanges: limit})
		defer c.stop(t)
		ctx := context.Background()
		l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: c.dial(),
			Timing:      tm,
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		most := 0
		watch := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				time.Sleep(tm.Renew / 4)
				synctest.Wait()
				most = max(most, len(l.Segments()))
			}
		}
		logs := map[string]*syncBuffer{}
		var owners []*owner.Owner
		start := func(id string, capacity float64) {
			logs[id] = &syncBuffer{}
			o, err := owner.New(ctx, owner.Config{
				Connection: leasehold.Connection{
					Manager:     "passthrough:///bufnet",
					DialOptions: c.dial(),
					Timing:      tm,
					Logger:      slog.New(slog.NewTextHandler(logs[id], nil)),
				},
				ID:       id,
				Addr:     id + ":1",
				Capacity: capacity,
			})
			if err != nil {
				t.Fatal(err)
			}
			owners = append(owners, o)
		}
		defer func() {
			for _, o := range owners {
				o.Close(ctx)
			}
		}()
		refused := func(id string) bool {
			s := logs[id].text()
			return strings.Contains(s, "--max-ranges") && strings.Contains(s, "most allowed, 1000")
		}

		start("a", 1)
		watch(tm.ManagerLease + 2*tm.Renew) // the new Manager's reservation, then grants
		if n := len(l.Segments()); n != 64 {
			t.Fatalf("one owner of capacity 1: %d ranges, want 64", n)
		}
		for _, id := range []string{"big-1", "big-2", "big-3", "big-4"} {
			start(id, 100)
		}
		watch(4 * tm.Renew)
		for _, id := range []string{"big-1", "big-2", "big-3", "big-4"} {
			if !refused(id) {
				t.Errorf("owner %s of capacity 100 was not told it is refused for --max-ranges %d; its log:\n%s", id, limit, logs[id].text())
			}
		}
		for _, id := range []string{"c4-1", "c4-2", "c4-3", "c4-4"} {
			start(id, 4)
		}
		watch(4*tm.ManagerLease + 10*tm.Renew)
		var out []string
		for _, id := range []string{"c4-1", "c4-2", "c4-3", "c4-4"} {
			if refused(id) {
				out = append(out, id)
			}
		}
		if len(out) != 1 {
			t.Errorf("owners of capacity 4 refused: %v, want exactly one of the four", out)
		}
		if most > limit {
			t.Errorf("a Lookup saw %d ranges, past MaxRanges %d", most, limit)
		}
		if n := len(l.Segments()); n != 64+3*256 {
			t.Errorf("the table has %d ranges once the admitted joins are granted, want %d", n, 64+3*256)
		}
		t.Logf("most ranges seen: %d (limit %d); refused of capacity 4: %v", most, limit, out)
	})
}
