package dashboard

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
)

func seg(start, end uint64, owner string) leasetable.Segment {
	s := leasetable.Segment{Range: keyspace.Range{Start: keyspace.Key(start), End: keyspace.Key(end)}}
	if owner != "" {
		s.Entry = leasetable.Entry{Owner: owner, Addr: owner + ":1", LGN: 1}
	}
	return s
}

// bandSlow is bandOf's reference: for each arc, the holder of the most keys
// of it, counted segment by segment with big margins of nothing clever.
func bandSlow(segs []leasetable.Segment, owners map[string]int32, buckets int) []int32 {
	width := ^uint64(0)/uint64(buckets) + 1
	out := make([]int32, buckets)
	for b := range buckets {
		arc := keyspace.Range{Start: keyspace.Key(uint64(b) * width), End: keyspace.Key(uint64(b+1) * width)}
		if b == buckets-1 {
			arc.End = 0
		}
		cover := map[int32]float64{}
		for _, s := range segs {
			if in, ok := s.Range.Intersect(arc); ok {
				h := int32(-1)
				if i, ok := owners[s.Entry.Owner]; ok && !s.Entry.Free() {
					h = i
				}
				cover[h] += in.Size()
			}
		}
		best, most := int32(-1), -1.0
		for h, n := range cover {
			if n > most || (n == most && h < best) {
				best, most = h, n
			}
		}
		out[b] = best
	}
	return out
}

// TestBandMatchesReference checks the arcs the page draws against a slow
// count, on random tables of many small ranges and a few large ones.
func TestBandMatchesReference(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 2))
		n := 1 + r.IntN(400)
		cuts := map[uint64]bool{0: true}
		for len(cuts) < n {
			cuts[r.Uint64()>>uint(r.IntN(8))] = true // skewed: some arcs hold many ranges
		}
		starts := slices.Sorted(func(yield func(uint64) bool) {
			for c := range cuts {
				if !yield(c) {
					return
				}
			}
		})
		ids := []string{"a", "b", "c", "d", "e"}
		owners := map[string]int32{"a": 0, "b": 1, "c": 2, "d": 3} // e is not in the list: drawn as free
		var segs []leasetable.Segment
		for i, s := range starts {
			end := uint64(0)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			owner := ""
			if r.IntN(6) > 0 {
				owner = ids[r.IntN(len(ids))]
			}
			segs = append(segs, seg(s, end, owner))
		}
		buckets := 64 << r.IntN(4)
		got := bandOf(segs, owners, buckets).Holder
		want := bandSlow(segs, owners, buckets)
		if !slices.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("seed %d, %d ranges, %d arcs: arc %d drawn as %d, want %d", seed, len(segs), buckets, i, got[i], want[i])
				}
			}
		}
	}
}

func TestSegmentAt(t *testing.T) {
	segs := []leasetable.Segment{seg(0, 100, "a"), seg(100, 1<<40, ""), seg(1<<40, 0, "b")}
	for _, c := range []struct {
		k    uint64
		want string
	}{{0, "a"}, {99, "a"}, {100, ""}, {1<<40 - 1, ""}, {1 << 40, "b"}, {^uint64(0), "b"}} {
		s, ok := segmentAt(segs, keyspace.Key(c.k))
		if !ok || s.Entry.Owner != c.want {
			t.Errorf("segmentAt(%#x) = %v, %v; want owner %q", c.k, s, ok, c.want)
		}
	}
}

// TestOneStreamForAllViewers opens many event streams and checks that the
// Manager's cost does not grow with them: the same Status calls, the same
// views built, each written to every viewer.
func TestOneStreamForAllViewers(t *testing.T) {
	src := newFakeSource(1, 5, 64)
	hub, err := NewHub(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	hub.Poll(t.Context())
	hub.Build()
	srv := httptest.NewServer(hub.Handler("test"))
	defer srv.Close()
	defer srv.CloseClientConnections()

	const viewers = 40
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	readers := make([]*bufio.Reader, viewers)
	for i := range readers {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		readers[i] = bufio.NewReaderSize(resp.Body, 1<<20)
	}
	next := func(r *bufio.Reader) view {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read the stream: %v", err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var v view
				if err := json.Unmarshal([]byte(data), &v); err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	for _, r := range readers {
		if v := next(r); v.Build != 1 || len(v.Namespaces[0].Holders) != 5 {
			t.Fatalf("first view: build %d with %d Owners, want build 1 with 5", v.Build, len(v.Namespaces[0].Holders))
		}
	}
	hub.Lost("default", lookup.Loss{All: true})
	hub.Build()
	for _, r := range readers {
		if v := next(r); v.Build != 2 || v.Events[len(v.Events)-1].Kind != "loss" {
			t.Fatalf("second view: build %d, last event %+v; want build 2 ending with the loss", v.Build, v.Events[len(v.Events)-1])
		}
	}
	polls, builds, open := hub.Stats()
	if polls != 1 || builds != 2 || open != viewers {
		t.Errorf("%d viewers cost %d Status calls and %d views built (%d streams open); want 1 and 2", viewers, polls, builds, open)
	}
	if src.statuses != 1 {
		t.Errorf("the Source answered %d Status calls for %d viewers, want 1", src.statuses, viewers)
	}
}

// TestLossNamesTheHolder checks that a loss notification's timeline line
// names the Owner that held the ranges in the table last drawn, so the
// timeline can be filtered by it.
func TestLossNamesTheHolder(t *testing.T) {
	src := &fakeSource{}
	src.set([]leasetable.Segment{seg(0, 1<<62, "kv-1"), seg(1<<62, 1<<63, "kv-2"), seg(1<<63, 0, "kv-3")}, 3)
	hub, err := NewHub(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	hub.Build()
	src.set([]leasetable.Segment{seg(0, 1<<62, "kv-1"), seg(1<<62, 1<<63, ""), seg(1<<63, 0, "kv-3")}, 4)
	hub.Lost("default", lookup.Loss{Ranges: []keyspace.Range{{Start: 1 << 62, End: 1 << 63}}})
	hub.Changed("default", lookup.Update{Update: leasetable.Update{From: 3, To: 4, Changes: []leasetable.Change{
		{LSN: 4, Range: keyspace.Range{Start: 1 << 62, End: 1 << 63}}}}})
	hub.Build()
	var v view
	if err := json.Unmarshal(hub.Latest(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Events) != 2 {
		t.Fatalf("events %+v, want a loss and a change", v.Events)
	}
	if e := v.Events[0]; e.Kind != "loss" || !slices.Equal(e.Owners, []string{"kv-2"}) {
		t.Errorf("loss event %+v, want kind loss naming kv-2", e)
	}
	if e := v.Events[1]; e.Kind != "free" || !slices.Equal(e.Owners, []string{"kv-2"}) {
		t.Errorf("change event %+v, want kind free naming kv-2", e)
	}
	if got := v.Namespaces[0].Holders; !slices.Equal(got, []string{"kv-1", "kv-3"}) {
		t.Errorf("holders %v after the loss, want kv-1 and kv-3", got)
	}
}

// TestDrainGuards checks who may drain: only a same-origin request with
// the action header, never a read-only dashboard; the Manager's refusal
// comes back as the answer.
func TestDrainGuards(t *testing.T) {
	src := newFakeSource(1, 3, 4)
	hub, err := NewHub(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := NewHub(Config{Source: src, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"namespace":"default","owner":"owner-00001"}`
	for _, c := range []struct {
		name   string
		hub    *Hub
		host   string
		header map[string]string
		status int
	}{
		{"allowed", hub, "127.0.0.1:7480", map[string]string{ActionHeader: "drain"}, 200},
		{"no action header", hub, "127.0.0.1:7480", nil, 403},
		{"another site", hub, "127.0.0.1:7480", map[string]string{ActionHeader: "drain", "Origin": "http://evil.example"}, 403},
		{"a rebound name", hub, "evil.example:7480", map[string]string{ActionHeader: "drain"}, 403},
		{"localhost", hub, "localhost:7480", map[string]string{ActionHeader: "drain", "Origin": "http://localhost:7480"}, 200},
		{"read-only", ro, "127.0.0.1:7480", map[string]string{ActionHeader: "drain"}, 403},
		{"a name over TLS", hub, "dash.example:7480", map[string]string{ActionHeader: "drain", "Origin": "https://dash.example:7480"}, 200},
		{"another site over TLS", hub, "dash.example:7480", map[string]string{ActionHeader: "drain", "Origin": "https://evil.example"}, 403},
	} {
		req := httptest.NewRequest("POST", "/api/drain", strings.NewReader(body))
		req.Host = c.host
		if strings.HasSuffix(c.name, "over TLS") {
			req.TLS = &tls.ConnectionState{}
		}
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		c.hub.Handler("t").ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, rec.Code, c.status, strings.TrimSpace(rec.Body.String()))
		}
	}
	if want := []string{"default/owner-00001", "default/owner-00001", "default/owner-00001"}; !slices.Equal(src.drains, want) {
		t.Errorf("drains sent to the Manager: %v, want %v", src.drains, want)
	}

	src.refuse = errors.New("cannot drain owner-00002: the maintenance gate is full")
	req := httptest.NewRequest("POST", "/api/drain", strings.NewReader(`{"namespace":"default","owner":"owner-00002"}`))
	req.Host = "127.0.0.1:7480"
	req.Header.Set(ActionHeader, "drain")
	rec := httptest.NewRecorder()
	hub.Handler("t").ServeHTTP(rec, req)
	var a drainAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if a.OK || !strings.Contains(a.Answer, "maintenance gate is full") {
		t.Errorf("answer to a refused drain: %+v, want the gate's refusal", a)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := NewHub(Config{}); err == nil {
		t.Error("NewHub without a Source: no error")
	}
	if _, err := NewHub(Config{Source: &fakeSource{}, Buckets: 100}); err == nil {
		t.Error("NewHub with 100 buckets: no error")
	}
	hub, err := NewHub(Config{Source: newFakeSource(1, 2, 2), Refresh: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hub.Build()
	for _, q := range []string{"", "?at=1&arc=0", "?at=-0.1&arc=0", "?at=NaN&arc=0", "?at=0.5&arc=4096", "?at=0.5&arc=x", "?ns=nope&at=0.5&arc=1"} {
		rec := httptest.NewRecorder()
		hub.Handler("t").ServeHTTP(rec, httptest.NewRequest("GET", "/api/segment"+q, nil))
		if rec.Code/100 != 4 {
			t.Errorf("/api/segment%s: status %d, want 4xx", q, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	hub.Handler("t").ServeHTTP(rec, httptest.NewRequest("GET", "/api/segment?ns=default&at=0.999999&arc=4095", nil))
	var s segmentJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.End != "0x10000000000000000" || s.InArc != 1 {
		t.Errorf("the last range: %s (%v); want the range that ends the key space, alone in its arc", rec.Body, err)
	}
}
