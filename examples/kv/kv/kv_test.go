package kv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMain lets the tests that wait on the fast timings' leases wait side
// by side (internal/testwait).
func TestMain(m *testing.M) {
	testwait.Parallel()
	goleak.VerifyTestMain(m)
}

// These tests run a Manager in-process with the fast profile (2 s leases)
// and kv servers and clients over real HTTP on 127.0.0.1. Every wait is a
// bounded poll.
//
// A value may be lost legitimately at any time: if the process stalls for
// longer than a lease (a loaded test machine), the lease lapses and the key
// is granted anew. The guarantee then is recovery notification (P§2.1), so
// the tests accept "not found" for a key only when the Lookup raised a loss
// notification covering it after it was put. A wrong value is never
// accepted.
const (
	// settleTimeout bounds waiting for an assignment. A fresh Manager
	// reserves the whole key space for one ManagerLease (2.2 s) before it
	// grants anything.
	settleTimeout = 20 * time.Second
	// quiet is how long the lease table must stay unchanged to count as
	// settled: recalls and grants are pushed at once, so a transition still
	// under way changes the table well within this.
	quiet  = time.Second
	opTime = 20 * time.Second // bound for one Put or Get, retries included
)

// notifyWait bounds the wait for a loss notification explaining a value
// found missing: the loss happened before the new owner answered, so the
// notification is due within NotificationBound; the rest is slack for a
// loaded machine.
var notifyWait = protocol.Fast().NotificationBound() + 3*time.Second

// debugLogger logs to stderr when KV_DEBUG is set.
func debugLogger(who string) *slog.Logger {
	if os.Getenv("KV_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", who)
}

// cluster is a Manager served in-process on 127.0.0.1 with fast timings,
// or over an in-memory network (net, startVirtual).
type cluster struct {
	addr string
	srv  *manager.Server
	net  *kv.Net // nil: 127.0.0.1
}

func startManager(t *testing.T) *cluster {
	t.Helper()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast(), Logger: debugLogger("manager")})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveManager(t, srv, lis, nil)
}

// startVirtual is startManager over an in-memory network (kv.Net), for a
// test run in virtual time (testing/synctest): call it inside the bubble,
// and the cluster's servers, clients and routers use the same network. A
// test of a move that waits for leases, grants and quiet spells takes
// seconds on the wall clock that pass at once there.
func startVirtual(t *testing.T) *cluster {
	t.Helper()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast(), Logger: debugLogger("manager")})
	if err != nil {
		t.Fatal(err)
	}
	n := kv.NewNet()
	lis, err := n.Listen("manager")
	if err != nil {
		t.Fatal(err)
	}
	return serveManager(t, srv, lis, n)
}

func serveManager(t *testing.T, srv *manager.Server, lis net.Listener, n *kv.Net) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return &cluster{addr: lis.Addr().String(), srv: srv, net: n}
}

// conn is the connection to the cluster's Manager for a Lookup of the test's
// own, over the cluster's network.
func (c *cluster) conn(reg prometheus.Registerer) leasehold.Connection {
	conn := leasehold.Connection{Insecure: true, Manager: c.addr, Timing: protocol.Fast(), Registerer: reg}
	if c.net != nil {
		conn.DialOptions = []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return c.net.DialContext(ctx, "tcp", addr) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
	}
	return conn
}

// httpGet gets url over the cluster's network.
func (c *cluster) httpGet(url string) (*http.Response, error) {
	if c.net == nil {
		return http.Get(url)
	}
	hc := c.net.HTTPClient()
	defer hc.CloseIdleConnections()
	return hc.Get(url)
}

// startServer starts a kv server with the given ID; it is closed at cleanup
// unless the test closes it first.
func (c *cluster) startServer(t *testing.T, id string) *kv.Server {
	t.Helper()
	cfg := kv.ServerConfig{Insecure: true,
		Manager: c.addr, ID: id, Listen: "127.0.0.1:0", Timing: protocol.Fast(), Logger: debugLogger(id),
	}
	if c.net != nil {
		cfg = kv.Over(cfg, c.net)
	}
	s, err := kv.NewServer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeServer(t, s) })
	return s
}

func closeServer(t *testing.T, s *kv.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("close %s: %v", s.ID(), err)
	}
}

// settle waits until exactly the owners ids hold ranges, no range is free,
// and the table has not changed for quiet. It returns the LSN then.
func (c *cluster) settle(t *testing.T, ids ...string) keyspace.LSN {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	deadline := time.Now().Add(settleTimeout)
	var lsn keyspace.LSN
	var since time.Time
	var last string
	for time.Now().Before(deadline) {
		for _, n := range c.srv.Snapshot().Namespaces {
			if n.Name != protocol.DefaultNamespace {
				continue
			}
			var holders []string
			for _, o := range n.Owners {
				if o.Ranges > 0 {
					holders = append(holders, o.ID)
				}
			}
			slices.Sort(holders)
			last = fmt.Sprintf("holders %v, %d free of %d ranges, LSN %d", holders, n.FreeSegments, n.Segments, n.LSN)
			switch {
			case !slices.Equal(holders, want) || n.FreeSegments != 0:
				since = time.Time{}
			case since.IsZero() || n.LSN != lsn:
				lsn, since = n.LSN, time.Now()
			case time.Since(since) >= quiet:
				return lsn
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the assignment did not settle on %v within %s: %s", want, settleTimeout, last)
	return 0
}

// router is the test's own Lookup: it shows which server owns each key and
// records loss notifications.
type router struct {
	l      *lookup.Lookup
	mu     sync.Mutex
	losses []timedLoss // guarded by mu
}

type timedLoss struct {
	at time.Time
	lookup.Loss
}

func newRouter(t *testing.T, c *cluster) *router {
	t.Helper()
	r := &router{}
	l, err := lookup.New(context.Background(), lookup.Config{
		Connection: c.conn(nil),
		OnLoss: func(loss lookup.Loss) {
			r.mu.Lock()
			r.losses = append(r.losses, timedLoss{time.Now(), loss})
			r.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	t.Cleanup(func() { l.Close() })
	if err := l.WaitSynced(t.Context()); err != nil {
		t.Fatal(err)
	}
	return r
}

// owners waits until the router's copy reaches lsn and returns the owner of
// each key.
func (r *router) owners(t *testing.T, lsn keyspace.LSN, keys []string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for r.l.LSN() < lsn {
		if time.Now().After(deadline) {
			t.Fatalf("the lookup's copy is at LSN %d, want %d", r.l.LSN(), lsn)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := map[string]string{}
	for _, k := range keys {
		route, ok := r.l.Lookup(keyspace.KeyOf(k))
		if !ok {
			t.Fatalf("no route for %q at LSN %d", k, lsn)
		}
		out[k] = route.Owner
	}
	return out
}

// explained waits up to notifyWait for a loss notification raised after
// since that covers key.
func (r *router) explained(key string, since time.Time) bool {
	k := keyspace.KeyOf(key)
	deadline := time.Now().Add(notifyWait)
	for {
		r.mu.Lock()
		found := slices.ContainsFunc(r.losses, func(l timedLoss) bool {
			return !l.at.Before(since) && (l.All || slices.ContainsFunc(l.Ranges, func(rg keyspace.Range) bool { return rg.Contains(k) }))
		})
		r.mu.Unlock()
		if found || time.Now().After(deadline) {
			return found
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lossesOf describes every loss notification that covered key, for a
// failure's message.
func (r *router) lossesOf(key string) string {
	k := keyspace.KeyOf(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.losses {
		if l.All || slices.ContainsFunc(l.Ranges, func(rg keyspace.Range) bool { return rg.Contains(k) }) {
			out = append(out, l.at.Format("15:04:05.000"))
		}
	}
	if len(out) == 0 {
		return "no loss notification ever covered it"
	}
	return "loss notifications covered it at " + strings.Join(out, ", ")
}

func newClient(t *testing.T, c *cluster) *kv.Client {
	t.Helper()
	cfg := kv.ClientConfig{Insecure: true,
		Manager: c.addr, Timing: protocol.Fast(), Timeout: opTime, Logger: debugLogger("client"),
	}
	if c.net != nil {
		cfg = kv.ClientOver(cfg, c.net)
	}
	cl, err := kv.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if err := cl.WaitSynced(t.Context()); err != nil {
		t.Fatal(err)
	}
	return cl
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%03d", i)
	}
	return out
}

// putAll puts value(k) under every key, a few at a time, and returns when
// each put started.
func putAll(t *testing.T, cl *kv.Client, ks []string, value func(string) string) map[string]time.Time {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	started := map[string]time.Time{}
	sem := make(chan struct{}, 8)
	for _, k := range ks {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			mu.Lock()
			started[k] = time.Now()
			mu.Unlock()
			if err := cl.Put(context.Background(), k, []byte(value(k))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return started
}

// get returns the value under k, or "" and false for ErrNotFound.
func get(t *testing.T, cl *kv.Client, k string) (string, bool) {
	t.Helper()
	v, err := cl.Get(context.Background(), k)
	if errors.Is(err, kv.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(v), true
}

// expect checks that k reads back want, or is missing with a loss
// notification raised after since to explain it. It reports whether the
// value was there.
func expect(t *testing.T, cl *kv.Client, r *router, k, want string, since time.Time) bool {
	t.Helper()
	v, ok := get(t, cl, k)
	switch {
	case ok && v != want:
		t.Errorf("get %q = %q, want %q", k, v, want)
	case !ok && !r.explained(k, since):
		route, _ := r.l.Lookup(keyspace.KeyOf(k))
		t.Errorf("get %q: not found, and no loss notification after %s covers it (want %q); it is at %s (lgn %d); %s",
			k, since.Format("15:04:05.000"), want, route.Owner, route.LGN, r.lossesOf(k))
	case !ok:
		t.Logf("get %q: not found; its lease was lost (loss notified), as a lapse under load does", k)
	}
	return ok
}

// expectMissing checks that k is not found: its value went with its server.
func expectMissing(t *testing.T, cl *kv.Client, k, why string) {
	t.Helper()
	if v, ok := get(t, cl, k); ok {
		t.Errorf("get %q = %q %s, want ErrNotFound", k, v, why)
	}
}

func v1(k string) string { return "v1-" + k }
func v2(k string) string { return "v2-" + k }

// TestRoundTrip puts 200 keys through a Client across three servers and
// reads them back.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c := startManager(t)
	ids := []string{"kv-a", "kv-b", "kv-c"}
	for _, id := range ids {
		c.startServer(t, id)
	}
	lsn := c.settle(t, ids...)
	r := newRouter(t, c)
	cl := newClient(t, c)
	ks := keys(200)
	put := putAll(t, cl, ks, v1)
	perOwner := map[string]int{}
	for k, o := range r.owners(t, lsn, ks) {
		perOwner[o]++
		expect(t, cl, r, k, v1(k), put[k])
	}
	if len(perOwner) != 3 {
		t.Errorf("keys per owner %v: want keys on all three servers", perOwner)
	}
	if _, err := cl.Get(t.Context(), "never-put"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("get never-put: %v, want ErrNotFound", err)
	}
}

// TestAbandonedServerLosesItsValues closes the server that owns some keys
// without draining (a done context: as in a crash, but the ranges move at
// once): those keys read back ErrNotFound — never the old value — with a
// loss notification, while the others keep theirs. When the same ID comes
// back, with nothing in memory, its ranges return to it with their values
// (planned moves hand them over).
func TestAbandonedServerLosesItsValues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startVirtual(t)
		ids := []string{"kv-a", "kv-b", "kv-c"}
		servers := map[string]*kv.Server{}
		for _, id := range ids {
			servers[id] = c.startServer(t, id)
		}
		lsn := c.settle(t, ids...)
		r := newRouter(t, c)
		cl := newClient(t, c)
		ks := keys(200)
		put := putAll(t, cl, ks, v1)
		before := r.owners(t, lsn, ks)
		// checked is when each key's latest value was last read back, or when
		// it was put if that read found it lost (loss notified): a loss of
		// the value later, on a loaded machine before kv-b even comes back,
		// is notified after that, not necessarily after kv-b's return.
		checked := map[string]time.Time{}
		confirm := func(k, want string, since time.Time) time.Time {
			t.Helper()
			at := time.Now()
			if expect(t, cl, r, k, want, since) {
				return at
			}
			return since
		}

		gone := "kv-b"
		abandonedAt := time.Now()
		abandonServer(t, servers[gone])
		lsn = c.settle(t, "kv-a", "kv-c")
		after := r.owners(t, lsn, ks)
		var lost []string
		for _, k := range ks {
			switch {
			case before[k] == gone:
				lost = append(lost, k)
				expectMissing(t, cl, k, "after its server "+gone+" was abandoned")
				if !r.explained(k, abandonedAt) {
					t.Errorf("%q was lost with %s, but no loss notification covers it", k, gone)
				}
			case after[k] != before[k]:
				t.Errorf("%q moved from %s to %s, though its server stayed", k, before[k], after[k])
			default:
				checked[k] = confirm(k, v1(k), put[k])
			}
		}
		if len(lost) == 0 {
			t.Fatalf("no key was on %s", gone)
		}
		reput := putAll(t, cl, lost, v2)
		latest := map[string]string{}
		for _, k := range ks {
			latest[k] = v1(k)
		}
		for _, k := range lost {
			latest[k] = v2(k)
			checked[k] = confirm(k, v2(k), reput[k])
		}

		// The same ID comes back, on another port, with nothing in memory: its
		// ranges return to it, handed over by the others with their values.
		c.startServer(t, gone)
		lsn = c.settle(t, ids...)
		again := r.owners(t, lsn, ks)
		moved := 0
		for _, k := range ks {
			if again[k] == gone {
				moved++
			}
			expect(t, cl, r, k, latest[k], checked[k])
		}
		if moved == 0 {
			t.Errorf("no key moved back to the restarted %s", gone)
		}
	})
}

// abandonServer closes s with a context already done: no drain, so its
// values are not handed over.
func abandonServer(t *testing.T, s *kv.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("close %s: %v", s.ID(), err)
	}
}

// TestWrongServerAnswers421 sends requests straight to the servers: the one
// that does not own a key answers 421, the owner serves it.
func TestWrongServerAnswers421(t *testing.T) {
	t.Parallel()
	c := startManager(t)
	ids := []string{"kv-a", "kv-b"}
	servers := map[string]*kv.Server{}
	for _, id := range ids {
		servers[id] = c.startServer(t, id)
	}
	lsn := c.settle(t, ids...)
	r := newRouter(t, c)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	do := func(method string, s *kv.Server, key, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+s.Addr()+"/kv/"+url.PathEscape(key), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// atOwner retries while the owner's lease is briefly away (a lapse
	// under load): only a 421 is retried.
	atOwner := func(method string, s *kv.Server, key, body string) (int, string) {
		t.Helper()
		deadline := time.Now().Add(opTime)
		for {
			code, got := do(method, s, key, body)
			if code != http.StatusMisdirectedRequest || time.Now().After(deadline) {
				return code, got
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ks := append(keys(20), "a/b c%?")
	for k, o := range r.owners(t, lsn, ks) {
		other := servers[ids[0]]
		if o == ids[0] {
			other = servers[ids[1]]
		}
		for _, method := range []string{"PUT", "GET"} {
			code, body := do(method, other, k, "x")
			if code == http.StatusMisdirectedRequest && body == "not the owner" {
				continue
			}
			if route, _ := r.l.Lookup(keyspace.KeyOf(k)); route.Owner == other.ID() {
				t.Logf("%q moved to %s meanwhile", k, other.ID()) // a lapse under load
				continue
			}
			t.Errorf("%s %q at %s (owner %s) = %d %q, want 421 \"not the owner\"", method, k, other.ID(), o, code, body)
		}
		if code, _ := atOwner("GET", servers[o], k, ""); code != http.StatusNotFound {
			t.Errorf("GET %q at its owner %s = %d, want 404", k, o, code)
		}
		putAt := time.Now()
		if code, _ := atOwner("PUT", servers[o], k, "x"); code != http.StatusNoContent {
			t.Errorf("PUT %q at its owner %s = %d, want 204", k, o, code)
		}
		switch code, body := atOwner("GET", servers[o], k, ""); {
		case code == http.StatusOK && body == "x":
		case code == http.StatusNotFound && r.explained(k, putAt): // lost with its lease
		default:
			t.Errorf("GET %q at its owner %s = %d %q, want 200 \"x\"", k, o, code, body)
		}
	}
}
