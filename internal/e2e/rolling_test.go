package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/protocol"
)

// rollingKeys is how many keys the rolling restart writes and reads.
const rollingKeys = 1000

// TestRollingRestart is the acceptance scenario of planned moves (C§2.1.2):
// a Manager, three kv servers and leasehold watch as real processes; 1,000
// keys put; a frontend reading and writing them continuously, each write a
// new value; then each server in turn is stopped with SIGTERM — it drains,
// handing every range over to the others with its values — and started
// again under the same ID and address, and the ranges move back to it,
// values and all. No request fails (after the client's retries), every key
// reads back its latest acknowledged value at the end, and watch prints no
// loss. Every process speaks mutual TLS, and before each restart every
// certificate of the group (the Manager's, the servers', the frontend's) is
// replaced: rotation under load costs no request and no state.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	t.Parallel()
	leasehold, kvBin := build(t)
	started := time.Now()

	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	plaintextRefused(t, leasehold, addr)
	w := &watcher{p: start(t, "watch", leasehold, "watch", "--manager", addr, "--json")}

	ids := []string{"kv-1", "kv-2", "kv-3"}
	listen := map[string]string{}
	servers := map[string]*proc{}
	for _, id := range ids {
		listen[id] = freeAddr(t)
		servers[id] = c.serveAt(id, listen[id])
	}
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), ids) && s.sumRanges() == 192
	})

	cl, err := kv.NewClient(context.Background(), kv.ClientConfig{Manager: addr, Timing: protocol.Fast(), Timeout: 20 * time.Second, CertsDir: certsDirFor(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.WaitSynced(t.Context()); err != nil {
		t.Fatal(err)
	}
	f := newFrontend(cl, rollingKeys, workers)
	if err := f.putAll(); err != nil {
		t.Fatal(err)
	}
	// A sample through the kv command as well.
	sample := f.keys[:40]
	for k, res := range c.getAll(sample) {
		if want := f.latest(k); !res.found || res.value != want {
			t.Fatalf("kv get %s = %+v, want %q", k, res, want)
		}
	}
	t.Logf("%s: three servers, %d keys put", since(started), rollingKeys)

	// The frontend reads and writes until the restarts are over.
	f.run()
	time.Sleep(500 * time.Millisecond) // some traffic before the first restart
	reported := 0
	noLoss := func(when string) {
		t.Helper()
		ls := w.losses()
		for _, l := range ls[reported:] {
			var rs []string
			for _, r := range l.ranges {
				rs = append(rs, r.String())
			}
			t.Errorf("%s: watch printed a loss at %s (all %v) of %d ranges: %s", when, l.at.Sub(started).Round(time.Millisecond),
				l.all, len(rs), strings.Join(rs, " "))
		}
		reported = len(ls)
	}
	for _, id := range ids {
		// Every certificate of the group is replaced under load before each
		// restart: the running processes keep going, and pick the new ones
		// up at their next handshake.
		rotateAll(t)
		stopAt := time.Now()
		p := servers[id]
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM %s: %v", id, err)
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit within 30 s of SIGTERM; stderr:\n%s", id, tail(p.stderr.String(), 20))
		}
		exited := time.Since(stopAt)
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited with %d after SIGTERM; stderr:\n%s", id, code, tail(p.stderr.String(), 20))
		}
		stopped := p.waitLine(t, "kv stopped after ", time.Second)

		servers[id] = c.serveAt(id, listen[id])
		c.settle(id+" back", func(s status) bool { return slices.Equal(s.holders(), ids) })
		t.Logf("%s: %s: SIGTERM to exit %s (%q), back holding ranges %s after the SIGTERM; frontend so far: %s",
			since(started), id, exited.Round(time.Millisecond), stopped, time.Since(stopAt).Round(time.Millisecond), f.summary())
		noLoss("after restarting " + id)
	}
	f.stop()
	servesCurrent(t, addr, "replica.1.crt")
	servesCurrent(t, listen["kv-2"], "owner.kv-2.crt")
	if n := f.failed.Load(); n != 0 {
		t.Errorf("%d frontend requests failed after retries; the first: %v", n, f.firstErr.Load())
	}

	// Every key reads back its latest acknowledged value.
	wrong := 0
	for _, k := range f.keys {
		v, err := cl.Get(context.Background(), k)
		if want := f.latest(k); err != nil || string(v) != want {
			if wrong++; wrong <= 10 {
				t.Errorf("get %q = %q, %v; want %q", k, v, err, want)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d keys did not read back their latest value", wrong, rollingKeys)
	}
	st := cl.Stats()
	t.Logf("%s: done; frontend: %s; client: %d requests, %d retries, %d failed", since(started), f.summary(), st.Ops, st.Retries, st.Failed)
	noLoss("at the end")
	for k, res := range c.getAll(sample) { // stops the test if it failed already
		if want := f.latest(k); !res.found || res.value != want {
			t.Errorf("kv get %s = %+v, want %q", k, res, want)
		}
	}
}

// serveAt starts kv serve with the given ID on a fixed address and waits
// until it serves.
func (c *cli) serveAt(id, listen string) *proc {
	c.t.Helper()
	ownerCert(c.t, id)
	p := start(c.t, id, c.kv, "serve", "--manager", c.manager, "--listen", listen, "--id", id)
	p.waitLine(c.t, "kv serving on ", 10*time.Second)
	return p
}

// frontend reads and writes keys through a kv.Client: each worker owns a
// share of the keys, so it knows the latest acknowledged value of each.
type frontend struct {
	cl      *kv.Client
	keys    []string
	workers int

	mu     sync.Mutex
	values map[string]string // guarded by mu: the latest acknowledged value

	writes, reads, failed atomic.Int64
	slowest               atomic.Int64 // nanoseconds
	firstErr              atomic.Value
	stopc                 chan struct{}
	wg                    sync.WaitGroup
}

func newFrontend(cl *kv.Client, n, workers int) *frontend {
	f := &frontend{cl: cl, workers: workers, values: map[string]string{}, stopc: make(chan struct{})}
	for i := range n {
		f.keys = append(f.keys, fmt.Sprintf("key-%04d", i))
	}
	return f
}

func (f *frontend) latest(k string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.values[k]
}

// putAll writes generation 0 of every key.
func (f *frontend) putAll() error {
	errc := make(chan error, f.workers)
	var wg sync.WaitGroup
	for i := range f.workers {
		wg.Go(func() {
			for j := i; j < len(f.keys); j += f.workers {
				k := f.keys[j]
				v := "g0-" + k
				if err := f.cl.Put(context.Background(), k, []byte(v)); err != nil {
					errc <- err
					return
				}
				f.mu.Lock()
				f.values[k] = v
				f.mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// run starts the workers: each writes its keys in turn, a new value each
// time, and after each write reads one of its keys at random, which must
// be the latest value written to it.
func (f *frontend) run() {
	for i := range f.workers {
		f.wg.Go(func() {
			var mine []string
			for j := i; j < len(f.keys); j += f.workers {
				mine = append(mine, f.keys[j])
			}
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for gen := 1; ; gen++ {
				for _, k := range mine {
					select {
					case <-f.stopc:
						return
					default:
					}
					v := fmt.Sprintf("g%d-%s", gen, k)
					if f.op(func(ctx context.Context) error { return f.cl.Put(ctx, k, []byte(v)) }) {
						f.mu.Lock()
						f.values[k] = v
						f.mu.Unlock()
					}
					f.writes.Add(1)
					r := mine[rng.IntN(len(mine))]
					want := f.latest(r)
					var got []byte
					f.op(func(ctx context.Context) error {
						var err error
						got, err = f.cl.Get(ctx, r)
						if err == nil && string(got) != want {
							err = fmt.Errorf("get %q = %q, want %q", r, got, want)
						}
						return err
					})
					f.reads.Add(1)
				}
			}
		})
	}
}

// op runs one request and records its outcome and duration.
func (f *frontend) op(do func(context.Context) error) bool {
	start := time.Now()
	err := do(context.Background())
	d := int64(time.Since(start))
	for {
		s := f.slowest.Load()
		if d <= s || f.slowest.CompareAndSwap(s, d) {
			break
		}
	}
	if err != nil {
		f.failed.Add(1)
		if errors.Is(err, kv.ErrNotFound) {
			err = fmt.Errorf("a value was lost: %w", err)
		}
		f.firstErr.CompareAndSwap(nil, err.Error())
		return false
	}
	return true
}

func (f *frontend) stop() {
	close(f.stopc)
	f.wg.Wait()
}

func (f *frontend) summary() string {
	return fmt.Sprintf("%d writes, %d reads, %d failed, slowest %s", f.writes.Load(), f.reads.Load(), f.failed.Load(),
		time.Duration(f.slowest.Load()).Round(time.Millisecond))
}
