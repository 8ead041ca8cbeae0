package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/lookup"
)

// TestOverloadShedsLowFirst offers an Owner about three times what it can
// serve, from two priority classes over real HTTP: the high class keeps at
// least 95% success while the low class is shed with 429 and Retry-After.
func TestOverloadShedsLowFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a few seconds")
	}
	// The Owner serves 4 at a time, 5 ms each: about 800 requests/s.
	slots := make(chan struct{}, 4)
	ownerSrv := ownerServer(t, "o", func(w http.ResponseWriter, r *http.Request) {
		slots <- struct{}{}
		time.Sleep(5 * time.Millisecond)
		<-slots
		io.WriteString(w, "ok")
	})
	_, fr, gw := newTest(t, Config{MaxInFlight: 4, MaxQueue: 8, Routes: []Route{
		{Name: "hi", Prefix: "/hi/", Key: "path:1", Priority: "high", Timeout: Duration(2 * time.Second)},
		{Name: "lo", Prefix: "/lo/", Key: "path:1", Priority: "low", Timeout: Duration(2 * time.Second)},
	}})
	fr.mu.Lock()
	fr.dflt = &lookup.Route{Owner: "o", Addr: addr(ownerSrv)}
	fr.mu.Unlock()

	type tally struct{ ok, shed, other, noRetryAfter atomic.Int64 }
	var hi, lo tally
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	load := func(n int, path string, c *tally) {
		for range n {
			wg.Go(func() {
				for ctx.Err() == nil {
					resp, err := client.Get(gw.URL + path)
					if err != nil {
						c.other.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case 200:
						c.ok.Add(1)
					case 429:
						c.shed.Add(1)
						if resp.Header.Get("Retry-After") == "" {
							c.noRetryAfter.Add(1)
						}
						time.Sleep(5 * time.Millisecond) // a client that heeds the shed a little
					default:
						c.other.Add(1)
					}
				}
			})
		}
	}
	load(6, "/hi/alice", &hi)
	load(24, "/lo/bob", &lo)
	wg.Wait()
	share := func(c *tally) float64 {
		n := c.ok.Load() + c.shed.Load() + c.other.Load()
		if n == 0 {
			return 0
		}
		return float64(c.ok.Load()) / float64(n)
	}
	t.Logf("high: %d ok, %d shed, %d other (%.1f%% success); low: %d ok, %d shed, %d other (%.1f%% success)",
		hi.ok.Load(), hi.shed.Load(), hi.other.Load(), 100*share(&hi), lo.ok.Load(), lo.shed.Load(), lo.other.Load(), 100*share(&lo))
	if share(&hi) < 0.95 || hi.ok.Load() == 0 {
		t.Errorf("the high class succeeded %.1f%%, want at least 95%%", 100*share(&hi))
	}
	if lo.shed.Load() == 0 || lo.noRetryAfter.Load() != 0 {
		t.Errorf("the low class: %d shed, %d without Retry-After; want shed with Retry-After", lo.shed.Load(), lo.noRetryAfter.Load())
	}
}
