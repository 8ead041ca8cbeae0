package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
)

// fakeRouter is a Lookup whose answers the test sets.
type fakeRouter struct {
	mu     sync.Mutex
	routes map[keyspace.Key]lookup.Route // guarded by mu; missing: no owner
	dflt   *lookup.Route                 // guarded by mu; for keys not in routes
	age    lookup.CopyAge                // guarded by mu
	onLoss func(lookup.Loss)
}

func (f *fakeRouter) Lookup(k keyspace.Key) (lookup.Route, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.routes[k]; ok {
		return r, true
	}
	if f.dflt != nil {
		return *f.dflt, true
	}
	return lookup.Route{}, false
}
func (f *fakeRouter) set(key string, id, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[keyspace.KeyOf(key)] = lookup.Route{Owner: id, Addr: addr, LGN: 1}
}
func (f *fakeRouter) setAge(a lookup.CopyAge) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.age = a
}
func (f *fakeRouter) Age() lookup.CopyAge {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.age.Quiet == 0 {
		return lookup.CopyAge{Synced: true, Quiet: time.Second, SyncTimeout: 3 * time.Second}
	}
	return f.age
}
func (f *fakeRouter) LSN() keyspace.LSN                { return 1 }
func (f *fakeRouter) WaitSynced(context.Context) error { return nil }
func (f *fakeRouter) Close() error                     { return nil }

// newTest starts a gateway over a fakeRouter with the given routes.
func newTest(t *testing.T, cfg Config) (*Gateway, *fakeRouter, *httptest.Server) {
	t.Helper()
	fr := &fakeRouter{routes: map[keyspace.Key]lookup.Route{}}
	cfg.Insecure = true
	cfg.NewRouter = func(_ context.Context, _ string, onLoss func(lookup.Loss)) (Router, error) {
		fr.onLoss = onLoss
		return fr, nil
	}
	if cfg.Routes == nil {
		cfg.Routes = []Route{{Name: "kv", Prefix: "/kv/", Key: "path:1", Timeout: Duration(time.Second)}}
	}
	g, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { g.Shutdown(); srv.Close(); g.Close() })
	return g, fr, srv
}

// ownerServer is an Owner that answers with its name and the path.
func ownerServer(t *testing.T, name string, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, name+" "+r.Method+" "+r.URL.Path+" "+string(b))
		}
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func do(t *testing.T, method, url, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func addr(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func TestRoutesByKey(t *testing.T) {
	a, b := ownerServer(t, "A", nil), ownerServer(t, "B", nil)
	_, fr, gw := newTest(t, Config{Routes: []Route{
		{Name: "kv", Prefix: "/kv/", Key: "path:1"},
		{Name: "hdr", Prefix: "/h/", Key: "header:X-User"},
		{Name: "q", Prefix: "/q/", Key: "query:user"},
		{Name: "quick", Host: "quick.example", Prefix: "/kv/", Key: "header:X-User"},
	}})
	fr.set("alice", "A", addr(a))
	fr.set("bob", "B", addr(b))
	fr.set("a/b c", "B", addr(b))
	for _, tc := range []struct {
		method, path, body string
		hdr                []string
		want, owner        string
	}{
		{"PUT", "/kv/alice", "v1", nil, "A PUT /kv/alice v1", "A"},
		{"GET", "/kv/bob", "", nil, "B GET /kv/bob ", "B"},
		{"GET", "/kv/a%2Fb%20c", "", nil, "B GET /kv/a/b c ", "B"},
		{"GET", "/h/x", "", []string{"X-User", "alice"}, "A GET /h/x ", "A"},
		{"GET", "/q/x?user=bob", "", nil, "B GET /q/x ", "B"},
	} {
		code, body, h := do(t, tc.method, gw.URL+tc.path, tc.body, tc.hdr...)
		if code != 200 || body != tc.want || h.Get("Leasehold-Owner") != tc.owner {
			t.Errorf("%s %s = %d %q (owner %q), want 200 %q from %s", tc.method, tc.path, code, body, h.Get("Leasehold-Owner"), tc.want, tc.owner)
		}
	}
	// For one prefix, the route naming the request's host wins over the
	// route for any host, whatever their order.
	req, _ := http.NewRequest("GET", gw.URL+"/kv/nobody", nil)
	req.Host = "quick.example:80"
	req.Header.Set("X-User", "bob")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b2) != "B GET /kv/nobody " {
		t.Errorf("GET quick.example/kv/nobody = %d %q, want B's answer by the quick.example route's key", resp.StatusCode, b2)
	}
}

func TestBadInput(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	ok := ownerServer(t, "A", nil)
	slow := ownerServer(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	_, fr, gw := newTest(t, Config{MaxKeyBytes: 16, Routes: []Route{{Name: "kv", Prefix: "/kv/", Key: "path:1", Timeout: Duration(300 * time.Millisecond)}}})
	fr.set("alice", "A", addr(ok))
	fr.set("hangs", "slow", addr(slow))
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"/kv/", 400, "no key: route \"kv\" takes the key from the path segment 1"},
		{"/kv/" + strings.Repeat("k", 17), 400, "key of 17 bytes: the limit is 16"},
		{"/nowhere/alice", 404, "no route for host"},
		{"/kv/hangs", 504, "Owner slow at " + addr(slow) + " did not answer"},
		{"/kv/nobody", 504, "no Owner holds the key"},
		{"/kv/alice", 200, "A GET /kv/alice"}, // and the gateway still serves
	} {
		start := time.Now()
		code, body, _ := do(t, "GET", gw.URL+tc.path, "")
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("GET %s = %d %q, want %d with %q", tc.path, code, body, tc.code, tc.msg)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("GET %s took %s, over its deadline of 300ms", tc.path, d)
		}
	}
	code, body, _ := do(t, "GET", gw.URL+"/kv/alice", "", PriorityHeader, "urgent")
	if code != 400 || !strings.Contains(body, "want one of low, normal, high") {
		t.Errorf("bad priority = %d %q, want 400", code, body)
	}
}

// TestRefusalsRetried: an Owner's refusals under the contract are retried
// until the copy names the Owner that serves; an Owner's own 503 is not.
func TestRefusalsRetried(t *testing.T) {
	var refusals atomic.Int32
	var fr *fakeRouter
	b := ownerServer(t, "B", nil)
	a := ownerServer(t, "A", func(w http.ResponseWriter, r *http.Request) {
		if refusals.Add(1) == 2 { // the copy catches up after two refusals
			fr.set("alice", "B", addr(b))
		}
		owner.Refuse(w, owner.RefusedNotOwner, "not the owner")
	})
	var moving atomic.Int32
	m := ownerServer(t, "M", func(w http.ResponseWriter, r *http.Request) {
		if moving.Add(1) <= 3 {
			owner.Refuse(w, owner.RefusedMoving, "moving")
			return
		}
		io.WriteString(w, "arrived")
	})
	busy := ownerServer(t, "busy", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	})
	var g *Gateway
	var gw *httptest.Server
	g, fr, gw = newTest(t, Config{})
	fr.set("alice", "A", addr(a))
	fr.set("carol", "M", addr(m))
	fr.set("dave", "busy", addr(busy))
	code, body, h := do(t, "PUT", gw.URL+"/kv/alice", "v")
	if code != 200 || body != "B PUT /kv/alice v" || h.Get("Leasehold-Retries") != "2" {
		t.Errorf("PUT alice = %d %q retries %q, want 200 from B after 2 retries", code, body, h.Get("Leasehold-Retries"))
	}
	code, body, h = do(t, "GET", gw.URL+"/kv/carol", "")
	if code != 200 || body != "arrived" || h.Get("Leasehold-Retries") != "3" {
		t.Errorf("GET carol = %d %q retries %q, want 200 arrived after 3 retries", code, body, h.Get("Leasehold-Retries"))
	}
	code, body, _ = do(t, "GET", gw.URL+"/kv/dave", "")
	if code != 503 || !strings.Contains(body, "overloaded") {
		t.Errorf("GET dave = %d %q, want the Owner's own 503 passed on", code, body)
	}
	rec := httptest.NewRecorder()
	g.metrics.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`leasehold_gateway_retries_total{reason="refused-not-owner",route="kv"} 2`,
		`leasehold_gateway_retries_total{reason="refused-moving",route="kv"} 3`,
		`leasehold_gateway_requests_total{code="200",route="kv"} 2`,
		`leasehold_gateway_request_duration_seconds_count{route="kv"} 3`,
		`leasehold_gateway_owner_attempt_duration_seconds_count{outcome="refused",owner="A"} 2`,
		`leasehold_gateway_owner_attempt_duration_seconds_count{outcome="answered",owner="B"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestAdmissionShedsLowerClassesFirst(t *testing.T) {
	a := newAdmission(1, 1)
	ctx := t.Context()
	if err := a.acquire(ctx, 0); err != nil { // takes the one slot
		t.Fatal(err)
	}
	low := make(chan error, 1)
	go func() { low <- a.acquire(ctx, 0) }()
	waitQueued(t, a, 1)
	high := make(chan error, 1)
	go func() { high <- a.acquire(ctx, 2) }() // the queue is full: the low waiter is shed
	if err := <-low; err != errShed {
		t.Fatalf("the queued low request: %v, want shed for the high one", err)
	}
	waitQueued(t, a, 1)
	if err := a.acquire(ctx, 1); err != errShed { // nothing lower to shed
		t.Fatalf("a normal request with the queue full of high: %v, want shed", err)
	}
	same, cancelSame := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelSame()
	if err := a.acquire(same, 2); err != errShed { // an equal class keeps its place
		t.Fatalf("a high request with the queue full of high: %v, want shed", err)
	}
	a.release() // the slot passes to the high request
	if err := <-high; err != nil {
		t.Fatalf("the high request: %v, want admitted", err)
	}
	if n, q := a.load(); n != 1 || q != 0 {
		t.Fatalf("load = %d in flight %d queued, want 1 0", n, q)
	}
	// A waiter whose deadline ends leaves the queue.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := a.acquire(short, 2); err != context.DeadlineExceeded {
		t.Fatalf("a request whose deadline ends in the queue: %v", err)
	}
	a.release()
	if n, q := a.load(); n != 0 || q != 0 {
		t.Fatalf("load = %d in flight %d queued, want 0 0", n, q)
	}
}

func waitQueued(t *testing.T, a *admission, n int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if _, q := a.load(); q == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("never %d queued", n)
}

// TestShedAnswer: a shed request is answered 429 with Retry-After.
func TestShedAnswer(t *testing.T) {
	release := make(chan struct{})
	slow := ownerServer(t, "slow", func(w http.ResponseWriter, r *http.Request) { <-release })
	_, fr, gw := newTest(t, Config{MaxInFlight: 1, MaxQueue: 1})
	fr.dflt = &lookup.Route{Owner: "slow", Addr: addr(slow)}
	var wg sync.WaitGroup
	for range 2 { // one in flight, one queued
		wg.Go(func() { do(t, "GET", gw.URL+"/kv/x", "") })
	}
	g := gw.Config.Handler.(*Gateway)
	for i := 0; ; i++ {
		if n, q := g.spaces["default"].adm.load(); n == 1 && q == 1 {
			break
		}
		if i > 1000 {
			t.Fatal("the requests never filled the slot and the queue")
		}
		time.Sleep(time.Millisecond)
	}
	code, body, h := do(t, "GET", gw.URL+"/kv/y", "")
	close(release)
	wg.Wait()
	if code != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "shed") {
		t.Errorf("a request over the bounds = %d %q Retry-After %q, want 429 with Retry-After", code, body, h.Get("Retry-After"))
	}
}

func TestLossStream(t *testing.T) {
	_, fr, gw := newTest(t, Config{})
	resp, err := http.Get(gw.URL + "/v1/losses?key=alice")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	if l, _ := rd.ReadString('\n'); !strings.HasPrefix(l, ":") {
		t.Fatalf("first line %q, want a comment", l)
	}
	k := keyspace.KeyOf("alice")
	other := keyspace.Range{Start: k + 1, End: 0}
	if k == keyspace.MaxKey {
		other = keyspace.Range{Start: 0, End: k}
	}
	fr.onLoss(lookup.Loss{Ranges: []keyspace.Range{other}})                        // id 1: not alice's
	fr.onLoss(lookup.Loss{Ranges: []keyspace.Range{{Start: k, End: k + 1}, other}, // id 2, naming its Owner
		Owners: []leasetable.OwnerRanges{{Owner: "kv-2", Addr: "127.0.0.1:8002", Ranges: []keyspace.Range{{Start: k, End: k + 1}, other}}}})
	ev := readEvent(t, rd)
	if ev.ID != 2 || ev.Event != "loss" || ev.Namespace != "default" || len(ev.Ranges) != 2 || ev.Ranges[0].Start != hexKey(k) {
		t.Fatalf("event %+v, want loss 2 covering alice", ev)
	}
	if len(ev.Owners) != 1 || ev.Owners[0].Owner != "kv-2" || ev.Owners[0].Addr != "127.0.0.1:8002" || len(ev.Owners[0].Ranges) != 2 {
		t.Fatalf("event %+v: want the Owner kv-2 named with its two ranges (the loss schema)", ev)
	}
	// A client that reconnects with Last-Event-ID gets what it missed.
	req, _ := http.NewRequest("GET", gw.URL+"/v1/losses", nil)
	req.Header.Set("Last-Event-ID", "0")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	rd2 := bufio.NewReader(resp2.Body)
	rd2.ReadString('\n')
	if e1, e2 := readEvent(t, rd2), readEvent(t, rd2); e1.ID != 1 || e2.ID != 2 {
		t.Fatalf("replayed %d, %d, want 1, 2", e1.ID, e2.ID)
	}
	for _, tc := range []struct {
		q    string
		code int
		want string
	}{
		{"id=2&key=alice", 200, `"covers":true`},
		{"id=1&key=alice", 200, `"covers":false`},
		{"id=9&key=alice", 404, "not kept"},
		{"id=1", 400, "no key"},
	} {
		code, body, _ := do(t, "GET", gw.URL+"/v1/covers?"+tc.q, "")
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("/v1/covers?%s = %d %q, want %d %q", tc.q, code, body, tc.code, tc.want)
		}
	}
}

func readEvent(t *testing.T, rd *bufio.Reader) LossEvent {
	t.Helper()
	for {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		if data, ok := strings.CutPrefix(l, "data: "); ok {
			var ev LossEvent
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			return ev
		}
	}
}

func TestReadyAndShutdown(t *testing.T) {
	g, _, gw := newTest(t, Config{})
	for i := 0; ; i++ { // synced is set by a goroutine
		if code, _, _ := do(t, "GET", gw.URL+"/readyz", ""); code == 200 {
			break
		}
		if i > 1000 {
			t.Fatal("never ready")
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(gw.URL + "/v1/losses")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	g.Shutdown()
	if code, body, _ := do(t, "GET", gw.URL+"/readyz", ""); code != 503 || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz after Shutdown = %d %q", code, body)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); done <- err }()
	select {
	case <-done: // the stream ended, so http.Server.Shutdown need not wait for it
	case <-time.After(5 * time.Second):
		t.Fatal("the loss stream stayed open after Shutdown")
	}
}

func TestRouteConfig(t *testing.T) {
	r, err := ParseRoute("name=kv,prefix=/kv/,namespace=ns,key=path:1,priority=high,timeout=2s")
	if err != nil || r.Name != "kv" || r.Namespace != "ns" || r.Priority != "high" || time.Duration(r.Timeout) != 2*time.Second {
		t.Fatalf("ParseRoute = %+v, %v", r, err)
	}
	for s, want := range map[string]string{
		"name=kv,bogus=1":                `unknown field "bogus"`,
		"prefix=/kv/":                    "want path:N, header:NAME or query:NAME",
		"key=path:x":                     "must be a number",
		"key=cookie:x":                   "want path:N",
		"key=path:1,priority=9":          `priority "9"`,
		"key=path:1,prefix=kv":           "must start with /",
		"key=path:1,prefix=/v1/":         "the gateway's own",
		"key=path:1,prefix=/v1/losses/x": "the gateway's own",
		"key=path:1,prefix=/healthz":     "the gateway's own",
	} {
		r, err := ParseRoute(s)
		if err == nil {
			err = r.normalize()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("route %q: %v, want an error with %q", s, err, want)
		}
	}
	p := filepath.Join(t.TempDir(), "routes.json")
	os.WriteFile(p, []byte(`{"routes":[{"name":"kv","prefix":"/kv/","key":"path:1","timeout":"3s"}]}`), 0o644)
	rs, err := LoadRoutes(p)
	if err != nil || len(rs) != 1 || time.Duration(rs[0].Timeout) != 3*time.Second {
		t.Fatalf("LoadRoutes = %+v, %v", rs, err)
	}
	os.WriteFile(p, []byte(`{"routs":[]}`), 0o644)
	if _, err := LoadRoutes(p); err == nil || !strings.Contains(err.Error(), "routs") {
		t.Errorf("LoadRoutes with an unknown field: %v", err)
	}
}

// TestStaleCopy: with the Manager not answering (the copy older than a copy
// in touch ever is), the gateway keeps routing from its copy, marks its
// answers with the copy's age, and /readyz follows MaxCopyAge; it never
// sends a key to an Owner the copy does not name, even one that is up and
// names for other keys; a fresh copy ends it all.
func TestStaleCopy(t *testing.T) {
	a := ownerServer(t, "A", nil)
	var toB atomic.Int32
	b := ownerServer(t, "B", func(w http.ResponseWriter, r *http.Request) {
		toB.Add(1)
		io.WriteString(w, "B")
	})
	// C lost its lease while the copy could not hear of it: it refuses.
	c := ownerServer(t, "C", func(w http.ResponseWriter, r *http.Request) {
		owner.Refuse(w, owner.RefusedNotOwner, "lease ended")
	})
	_, fr, gw := newTest(t, Config{MaxCopyAge: 5 * time.Second, Routes: []Route{{Name: "kv", Prefix: "/kv/", Key: "path:1", Timeout: Duration(300 * time.Millisecond)}}})
	fr.set("alice", "A", addr(a))
	fr.set("bob", "B", addr(b))
	fr.set("carol", "C", addr(c))
	ready := func() (int, string) { code, body, _ := do(t, "GET", gw.URL+"/readyz", ""); return code, body }
	for i := 0; ; i++ {
		if code, _ := ready(); code == 200 {
			break
		}
		if i > 1000 {
			t.Fatal("never ready")
		}
		time.Sleep(time.Millisecond)
	}
	fresh := lookup.CopyAge{Synced: true, Age: 500 * time.Millisecond, Quiet: time.Second, SyncTimeout: 3 * time.Second}
	fr.setAge(fresh)
	if _, _, h := do(t, "GET", gw.URL+"/kv/alice", ""); h.Get(StaleHeader) != "" {
		t.Fatalf("in touch: %s %q", StaleHeader, h.Get(StaleHeader))
	}
	metric := func() string {
		_, body, _ := do(t, "GET", gw.URL+"/metrics", "")
		var out []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "leasehold_gateway_copy_") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "; ")
	}
	if m := metric(); !strings.Contains(m, `leasehold_gateway_copy_age_seconds{namespace="default"} 0.5`) || !strings.Contains(m, `leasehold_gateway_copy_stale{namespace="default"} 0`) {
		t.Errorf("in touch, metrics: %s", m)
	}

	stale := fresh
	stale.Age = 4 * time.Second // past Quiet and SyncTimeout, under MaxCopyAge
	fr.setAge(stale)
	code, body, h := do(t, "GET", gw.URL+"/kv/alice", "")
	if code != 200 || body != "A GET /kv/alice " || h.Get(StaleHeader) != "age=4s" {
		t.Errorf("stale: %d %q %s %q, want A's answer marked age=4s", code, body, StaleHeader, h.Get(StaleHeader))
	}
	if code, body := ready(); code != 200 {
		t.Errorf("/readyz stale under MaxCopyAge = %d %q, want 200", code, body)
	}
	if m := metric(); !strings.Contains(m, `leasehold_gateway_copy_age_seconds{namespace="default"} 4`) || !strings.Contains(m, `leasehold_gateway_copy_stale{namespace="default"} 1`) {
		t.Errorf("stale, metrics: %s", m)
	}
	// C refuses; the copy names no one else for carol, so the gateway waits
	// for the copy until the deadline, never trying B, which is up.
	code, body, h = do(t, "GET", gw.URL+"/kv/carol", "")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "Owner C refused: not-owner") || h.Get(StaleHeader) != "age=4s" {
		t.Errorf("carol, refused by C: %d %q %s %q, want 504 naming C's refusal, marked stale", code, body, StaleHeader, h.Get(StaleHeader))
	}
	if n := toB.Load(); n != 0 {
		t.Errorf("B, which the copy does not name for carol, got %d requests", n)
	}

	stale.Age = 6 * time.Second
	fr.setAge(stale)
	if code, body := ready(); code != 503 || !strings.Contains(body, "max-copy-age 5s") {
		t.Errorf("/readyz stale past MaxCopyAge = %d %q, want 503 saying why", code, body)
	}
	// Age alone is not staleness: a Manager whose polls are answered slowly
	// but in time (Quiet is its own) does not make the gateway unready.
	fr.setAge(lookup.CopyAge{Synced: true, Age: 6 * time.Second, Quiet: 40 * time.Second, SyncTimeout: 75 * time.Second})
	if code, _ := ready(); code != 200 {
		t.Errorf("/readyz with a copy of 6s and a Quiet of 40s = %d, want 200", code)
	}
	fr.setAge(fresh)
	if _, _, h := do(t, "GET", gw.URL+"/kv/alice", ""); h.Get(StaleHeader) != "" {
		t.Errorf("fresh again: %s %q", StaleHeader, h.Get(StaleHeader))
	}
	if code, _ := ready(); code != 200 {
		t.Errorf("fresh again: /readyz %d", code)
	}
}
