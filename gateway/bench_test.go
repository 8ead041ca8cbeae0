package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/lookup"
)

// BenchmarkCost measures the gateway's cost on loopback, side by side with
// a client going straight to the Owner and with Go's httputil.ReverseProxy
// to a fixed target: closed-loop clients, one small GET each time. It
// reports p50 and p99 latency and requests/s per core (GOMAXPROCS).
//
//	go test ./gateway -run '^$' -bench Cost -benchtime 20000x
func BenchmarkCost(b *testing.B) {
	ownerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "value")
	}))
	defer ownerSrv.Close()
	target, _ := url.Parse(ownerSrv.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rpTransport := http.DefaultTransport.(*http.Transport).Clone()
	rpTransport.MaxIdleConnsPerHost = 256
	rp.Transport = rpTransport
	rpSrv := httptest.NewServer(rp)
	defer rpSrv.Close()

	fr := &fakeRouter{dflt: &lookup.Route{Owner: "o", Addr: target.Host}}
	g, err := New(b.Context(), Config{Insecure: true,
		Routes:    []Route{{Name: "kv", Prefix: "/kv/", Key: "path:1"}},
		NewRouter: func(_ context.Context, _ string, _ func(lookup.Loss)) (Router, error) { return fr, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	gwSrv := httptest.NewServer(g)
	defer gwSrv.Close()

	for _, tc := range []struct{ name, base string }{
		{"direct", ownerSrv.URL},
		{"reverseproxy", rpSrv.URL},
		{"gateway", gwSrv.URL},
	} {
		b.Run(tc.name, func(b *testing.B) { closedLoop(b, tc.base+"/kv/alice") })
	}
}

func closedLoop(b *testing.B, u string) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var mu sync.Mutex
	var all []time.Duration
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var lat []time.Duration
		for pb.Next() {
			t0 := time.Now()
			resp, err := client.Get(u)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
			lat = append(lat, time.Since(t0))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(all))/elapsed.Seconds()/float64(runtime.GOMAXPROCS(0)), "req/s/core")
}
