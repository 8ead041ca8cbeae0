package dashboard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

// TestLossesFirst: losses are counted and listed apart from the timeline,
// newest first, in the loss schema with the Owners whose state was lost
// (the Lookup's, or the table drawn's when it names none); many planned
// moves from one Owner to another are one line; the key search names the
// holder and since when the dashboard has seen its lease.
func TestLossesFirst(t *testing.T) {
	now := time.Date(2026, 11, 28, 13, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	q := uint64(1) << 62
	e := func(owner string, lgn keyspace.LGN) leasetable.Entry {
		return leasetable.Entry{Owner: owner, Addr: owner + ":1", LGN: lgn}
	}
	src := &fakeSource{}
	first := []leasetable.Segment{{Range: keyspace.Range{Start: 0, End: keyspace.Key(q)}, Entry: e("kv-1", 1)},
		{Range: keyspace.Range{Start: keyspace.Key(q), End: keyspace.Key(2 * q)}, Entry: e("kv-2", 2)},
		{Range: keyspace.Range{Start: keyspace.Key(2 * q), End: 0}, Entry: e("kv-3", 3)}}
	src.set(first, 3)
	hub, err := NewHub(Config{Source: src, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	hub.Changed("default", lookup.Update{Update: leasetable.Update{To: 3, Snapshot: true, Segments: first}})
	hub.Build()

	// kv-2 drains: its range moves to kv-1 in ten planned moves of ranges.
	var changes []leasetable.Change
	for i := range 10 {
		w := q / 10
		r := keyspace.Range{Start: keyspace.Key(q + uint64(i)*w), End: keyspace.Key(q + uint64(i+1)*w)}
		if i == 9 {
			r.End = keyspace.Key(2 * q)
		}
		ent := e("kv-1", keyspace.LGN(4+i))
		ent.Migrated, ent.MigratedFrom = true, 2
		changes = append(changes, leasetable.Change{LSN: keyspace.LSN(4 + i), Range: r, Entry: ent})
		now = now.Add(100 * time.Millisecond)
		hub.Changed("default", lookup.Update{Update: leasetable.Update{From: keyspace.LSN(3 + i), To: keyspace.LSN(4 + i), Changes: changes[i : i+1]}})
	}
	// kv-3 is killed: the Lookup names it; a second loss names no one, and
	// the table drawn does.
	now = now.Add(time.Second)
	third := keyspace.Range{Start: keyspace.Key(2 * q), End: 0}
	hub.Lost("default", lookup.Loss{Ranges: []keyspace.Range{third},
		Owners: []leasetable.OwnerRanges{{Owner: "kv-3", Addr: "kv-3:1", Ranges: []keyspace.Range{third}}}})
	hub.Lost("default", lookup.Loss{Ranges: []keyspace.Range{{Start: 0, End: keyspace.Key(q)}}})
	grant := leasetable.Change{LSN: 14, Range: third, Entry: e("kv-1", 20)}
	hub.Changed("default", lookup.Update{Update: leasetable.Update{From: 13, To: 14, Changes: []leasetable.Change{grant}}})
	src.set([]leasetable.Segment{{Range: keyspace.Range{Start: 0, End: keyspace.Key(q)}, Entry: e("kv-1", 1)},
		{Range: keyspace.Range{Start: keyspace.Key(q), End: keyspace.Key(2 * q)}, Entry: e("kv-1", 13)},
		{Range: third, Entry: e("kv-1", 20)}}, 14)
	hub.Build()

	var v view
	if err := json.Unmarshal(hub.Latest(), &v); err != nil {
		t.Fatal(err)
	}
	if v.LossCount != 2 || len(v.Losses) != 2 {
		t.Fatalf("lossCount %d, %d losses listed; want 2 and 2", v.LossCount, len(v.Losses))
	}
	if l := v.Losses[1]; l.Event != "loss" || l.ID != 1 || len(l.Owners) != 1 || l.Owners[0].Owner != "kv-3" || l.Owners[0].Ranges[0].End != "0x10000000000000000" {
		t.Errorf("the first loss %+v, want loss 1 naming kv-3 and its range", l)
	}
	if l := v.Losses[0]; l.ID != 2 || len(l.Owners) != 1 || l.Owners[0].Owner != "kv-1" {
		t.Errorf("the newest loss (listed first) %+v, want loss 2 naming kv-1 from the table drawn", l)
	}
	var moves []Event
	for _, ev := range v.Events {
		if ev.Kind == "move" {
			moves = append(moves, ev)
		}
	}
	if len(moves) != 1 || moves[0].Count != 10 || !slices.Equal(moves[0].Owners, []string{"kv-1", "kv-2"}) ||
		!strings.Contains(moves[0].Text, "planned move kv-2 → kv-1: 10 ranges (lsn 4–13)") {
		t.Errorf("planned moves on the timeline: %+v; want one line for the ten", moves)
	}

	srv := httptest.NewServer(hub.Handler("m"))
	defer srv.Close()
	ask := func(key string) keyAnswer {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/key?ns=default&key=" + url.QueryEscape(key))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a keyAnswer
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&a) != nil {
			t.Fatalf("key %q: %s", key, resp.Status)
		}
		return a
	}
	// A key of kv-3's old range is kv-1's now, since the grant after the loss.
	var key string
	for i := 0; ; i++ {
		key = "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		if third.Contains(keyspace.KeyOf(key)) {
			break
		}
	}
	a := ask(key)
	if a.Owner != "kv-1" || a.LGN != 20 || a.SinceCopy || a.SinceLSN != 14 || a.Since != "2026-11-28T13:00:02.000Z" ||
		!strings.Contains(a.Text, "held by kv-1 at kv-1:1, lease 20, since 2026-11-28T13:00:02.000Z (lsn 14)") {
		t.Errorf("key %q: %+v; want kv-1's lease 20 since the grant at lsn 14", key, a)
	}
	// A key of the first copy: since that copy, or before.
	for i := 0; ; i++ {
		key = "first-" + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
		if keyspace.KeyOf(key) < keyspace.Key(q) {
			break
		}
	}
	if a := ask(key); a.Owner != "kv-1" || !a.SinceCopy || !strings.Contains(a.Text, "or before") {
		t.Errorf("key %q: %+v; want kv-1 since the first copy or before", key, a)
	}
	for _, bad := range []string{"/api/key?ns=default", "/api/key?ns=nope&key=a"} {
		if resp, err := http.Get(srv.URL + bad); err != nil || resp.StatusCode < 400 {
			t.Errorf("%s: %v %v, want a refusal", bad, resp.Status, err)
		}
	}
}
