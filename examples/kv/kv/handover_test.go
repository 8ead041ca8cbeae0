package kv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/examples/kv/kv"
)

// TestCloseHandsValuesOver closes one of two servers while a writer keeps
// writing new values: the closing server hands every range over with its
// values, so every key reads back from the other server its last
// acknowledged value, no write fails (writes on a moving range are retried)
// and the Lookup reports no loss. The closed server then comes back under
// the same ID and its share moves back to it, values and all.
func TestCloseHandsValuesOver(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startVirtual(t)
		a := c.startServer(t, "kv-a")
		b := c.startServer(t, "kv-b")
		lsn := c.settle(t, "kv-a", "kv-b")
		r := newRouter(t, c)
		cl := newClient(t, c)
		ks := keys(300)
		putAll(t, cl, ks, v1)
		onB := 0
		for _, o := range r.owners(t, lsn, ks) {
			if o == "kv-b" {
				onB++
			}
		}
		if onB == 0 {
			t.Fatal("no key is on kv-b")
		}

		// One writer: each write a new value, the last acknowledged one kept.
		var mu sync.Mutex
		latest := map[string]string{}
		for _, k := range ks {
			latest[k] = v1(k)
		}
		write := func(ctx context.Context) {
			for n := 0; ctx.Err() == nil; n++ {
				k := ks[n%len(ks)]
				v := fmt.Sprintf("w%d-%s", n, k)
				if err := cl.Put(context.Background(), k, []byte(v)); err != nil {
					t.Errorf("put %q during the move: %v", k, err)
					return
				}
				mu.Lock()
				latest[k] = v
				mu.Unlock()
				// In virtual time the clock moves only when every goroutine
				// waits on it: a writer that never did would stop it.
				time.Sleep(time.Millisecond)
			}
		}
		check := func(when string, since time.Time) {
			t.Helper()
			mu.Lock()
			defer mu.Unlock()
			for _, k := range ks {
				v, err := cl.Get(context.Background(), k)
				switch {
				case errors.Is(err, kv.ErrNotFound):
					t.Errorf("%s: get %q: not found, want %q", when, k, latest[k])
				case err != nil:
					t.Errorf("%s: get %q: %v", when, k, err)
				case string(v) != latest[k]:
					t.Errorf("%s: get %q = %q, want %q", when, k, v, latest[k])
				}
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, l := range r.losses {
				if !l.at.Before(since) {
					t.Errorf("%s: the lookup reported a loss: %+v", when, l.Loss)
				}
			}
		}
		move := func(what string, do func(), holders ...string) {
			t.Helper()
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { write(ctx) })
			started := time.Now()
			do()
			c.settle(t, holders...)
			took := time.Since(started)
			stop()
			wg.Wait()
			check(what, started)
			t.Logf("%s: settled in %s", what, took.Round(time.Millisecond))
		}

		move("kv-b closed", func() { closeServer(t, b) }, "kv-a")
		sb, sa := b.Stats(), a.Stats()
		t.Logf("kv-b handed over %d ranges with %d values (%d failed); kv-a took up %d values, discarded %d",
			sb.HandedOver, sb.ValuesSent, sb.HandoverFailures, sa.ValuesTakenUp, sa.ValuesDiscarded)
		if sb.HandedOver == 0 || sb.ValuesSent < onB || sb.HandoverFailures != 0 {
			t.Errorf("kv-b stats %+v: want every range handed over with at least its %d values", sb, onB)
		}
		if sa.ValuesTakenUp != sb.ValuesSent || sa.ValuesPending != 0 {
			t.Errorf("kv-a stats %+v: want the %d values kv-b sent taken up", sa, sb.ValuesSent)
		}

		var b2 *kv.Server
		move("kv-b back", func() { b2 = c.startServer(t, "kv-b") }, "kv-a", "kv-b")
		sa, sb = a.Stats(), b2.Stats()
		if sa.HandedOver == 0 || sa.HandoverFailures != 0 || sb.ValuesTakenUp == 0 {
			t.Errorf("after kv-b came back: kv-a %+v, kv-b %+v; want kv-a to hand ranges over to kv-b", sa, sb)
		}
		st := cl.Stats()
		t.Logf("client: %d operations, %d retries, %d failed", st.Ops, st.Retries, st.Failed)
		if st.Failed != 0 {
			t.Errorf("%d client operations failed", st.Failed)
		}
	})
}
