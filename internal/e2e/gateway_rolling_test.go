package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// TestGatewayRollingRestart is Ninja's online evolution through the
// gateway: a Manager, three kv servers and two gateways as real processes;
// clients that speak only HTTP to the gateways read and write keys in a
// closed loop (at least 200 requests/s); every kv server in turn is stopped
// with SIGTERM (it drains) and started again, then every gateway in turn.
// No client request fails, and every key reads back its latest
// acknowledged value. A client whose gateway refuses the connection (it is
// restarting) sends the request to the other, as an L4 balancer would.
func TestGatewayRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	started := time.Now()
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	ids := []string{"kv-1", "kv-2", "kv-3"}
	listen := map[string]string{}
	servers := map[string]*proc{}
	for _, id := range ids {
		listen[id] = freeAddr(t)
		servers[id] = c.serveAt(id, listen[id])
	}
	c.settle("three owners", func(s status) bool { return slices.Equal(s.holders(), ids) && s.sumRanges() == 192 })

	gwAddrs := []string{freeAddr(t), freeAddr(t)}
	gws := make([]*proc, 2)
	startGateway := func(i int) {
		gws[i] = start(t, fmt.Sprintf("gateway-%d", i+1), leasehold, "gateway", "--manager", addr, "--listen", gwAddrs[i],
			"--tls", "--client-certs", "--route", "name=kv,prefix=/kv/,key=path:1,timeout=20s")
		gws[i].waitLine(t, "leasehold gateway listening on ", 10*time.Second)
		newGatewayClient(t, "https://"+gwAddrs[i]).waitReady()
	}
	startGateway(0)
	startGateway(1)

	f := newGatewayFrontend(frontendTransport(t, certs.Lookup), gwAddrs, 200, workers)
	if err := f.putAll(); err != nil {
		t.Fatal(err)
	}
	f.run()
	time.Sleep(500 * time.Millisecond) // some traffic before the first restart
	for _, id := range ids {
		p := servers[id]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit within 30 s of SIGTERM", id)
		}
		servers[id] = c.serveAt(id, listen[id])
		c.settle(id+" back", func(s status) bool { return slices.Equal(s.holders(), ids) })
		t.Logf("%s: %s restarted; clients so far: %s", since(started), id, f.summary())
	}
	for i := range gws {
		gws[i].stop()
		gws[i].waitLine(t, "leasehold gateway stopped", time.Second)
		startGateway(i)
		time.Sleep(300 * time.Millisecond) // traffic through both again
		t.Logf("%s: gateway %d restarted; clients so far: %s", since(started), i+1, f.summary())
	}
	f.stop()
	if n := f.failed.Load(); n != 0 {
		t.Errorf("%d client requests failed; the first: %v", n, f.firstErr.Load())
	}
	if rate := float64(f.ops.Load()) / f.elapsed.Seconds(); rate < 200 {
		t.Errorf("the clients made %.0f requests/s, want at least 200", rate)
	}
	wrong := 0
	for _, k := range f.keys {
		code, body, _, err := f.do(0, "GET", k, "")
		if want := f.latest(k); err != nil || code != 200 || body != want {
			if wrong++; wrong <= 10 {
				t.Errorf("GET %s = %d %q %v, want %q", k, code, body, err, want)
			}
		}
	}
	t.Logf("%s: done; clients: %s", since(started), f.summary())
}

// gatewayFrontend reads and writes keys through two gateways: each worker
// owns a share of the keys, so it knows the latest acknowledged value.
type gatewayFrontend struct {
	gws     []string
	keys    []string
	workers int
	tr      *http.Transport
	hc      *http.Client

	mu     sync.Mutex
	values map[string]string // guarded by mu; the latest acknowledged value

	ops, failed, retries, failovers atomic.Int64
	firstErr                        atomic.Value
	quit                            chan struct{}
	wg                              sync.WaitGroup
	began                           time.Time
	elapsed                         time.Duration
}

func newGatewayFrontend(tr *http.Transport, gws []string, nkeys, workers int) *gatewayFrontend {
	f := &gatewayFrontend{gws: gws, workers: workers, values: map[string]string{}, quit: make(chan struct{})}
	f.tr = tr
	f.tr.MaxIdleConnsPerHost = 64
	f.hc = &http.Client{Transport: f.tr, Timeout: 30 * time.Second}
	for i := range nkeys {
		f.keys = append(f.keys, fmt.Sprintf("gk-%03d", i))
	}
	return f
}

func (f *gatewayFrontend) latest(k string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.values[k]
}

// do sends a request through gateway first, and through the other if the
// first cannot be reached.
func (f *gatewayFrontend) do(first int, method, key, body string) (int, string, int, error) {
	var err error
	for i := range f.gws {
		gw := f.gws[(first+i)%len(f.gws)]
		req, _ := http.NewRequest(method, "https://"+gw+"/kv/"+key, strings.NewReader(body))
		var resp *http.Response
		resp, err = f.hc.Do(req)
		if err != nil {
			f.failovers.Add(1)
			continue
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil {
			err = rerr
			f.failovers.Add(1)
			continue
		}
		retries, _ := strconv.Atoi(resp.Header.Get("Leasehold-Retries"))
		return resp.StatusCode, string(b), retries, nil
	}
	return 0, "", 0, err
}

func (f *gatewayFrontend) put(w int, k, v string) error {
	code, body, retries, err := f.do(w, "PUT", k, v)
	f.ops.Add(1)
	f.retries.Add(int64(retries))
	if err != nil || code != http.StatusNoContent {
		return fmt.Errorf("PUT %s = %d %q %v", k, code, body, err)
	}
	f.mu.Lock()
	f.values[k] = v
	f.mu.Unlock()
	return nil
}

func (f *gatewayFrontend) putAll() error {
	for i, k := range f.keys {
		if err := f.put(i, k, "v0"); err != nil {
			return err
		}
	}
	return nil
}

func (f *gatewayFrontend) run() {
	f.began = time.Now()
	f.ops.Store(0)
	for w := range f.workers {
		f.wg.Go(func() {
			var mine []string // the keys this worker alone writes
			for i := w; i < len(f.keys); i += f.workers {
				mine = append(mine, f.keys[i])
			}
			for n := 0; ; n++ {
				select {
				case <-f.quit:
					return
				default:
				}
				k := mine[(n/2)%len(mine)] // a write, then a read of it
				var err error
				if n%2 == 0 {
					err = f.put(w, k, fmt.Sprintf("v%d-%d", w, n))
				} else {
					code, body, retries, derr := f.do(w, "GET", k, "")
					f.ops.Add(1)
					f.retries.Add(int64(retries))
					if want := f.latest(k); derr != nil || code != 200 || body != want {
						err = fmt.Errorf("GET %s = %d %q %v, want %q", k, code, body, derr, want)
					}
				}
				if err != nil {
					f.failed.Add(1)
					f.firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
}

func (f *gatewayFrontend) stop() {
	close(f.quit)
	f.wg.Wait()
	f.elapsed = time.Since(f.began)
}

func (f *gatewayFrontend) summary() string {
	d := time.Since(f.began)
	if f.elapsed > 0 {
		d = f.elapsed
	}
	return fmt.Sprintf("%d requests (%.0f/s), %d failed, %d retries by the gateways, %d failovers between gateways",
		f.ops.Load(), float64(f.ops.Load())/d.Seconds(), f.failed.Load(), f.retries.Load(), f.failovers.Load())
}
