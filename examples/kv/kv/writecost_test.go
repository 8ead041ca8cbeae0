package kv_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

var (
	writeCost = flag.Duration("kv.writecost", 0,
		"run TestStandbyWriteCost for this long: a put's latency with and without a standby, side by side (0: skip)")
	writeCostWorkers = flag.Int("kv.writecost.workers", 4, "TestStandbyWriteCost's concurrent writers")
	writeCostBytes   = flag.Int("kv.writecost.bytes", 100, "TestStandbyWriteCost's value size in bytes")
)

// TestStandbyWriteCost measures what a standby costs a write: one Manager
// serving two namespaces, "plain" (no standbys) and "standby" (one per
// range), three kv servers in each (zones a, b, c, over loopback HTTP),
// and -kv.writecost.workers writers that each put to the two namespaces in
// turn, one put on each, so that both see the same machine at the same
// moment. It prints each namespace's put latency (p50, p90, p99, p99.9)
// and the throughput. Run it with
//
//	go test ./examples/kv/kv -run TestStandbyWriteCost -v -kv.writecost=20s
func TestStandbyWriteCost(t *testing.T) {
	if *writeCost <= 0 {
		t.Skip("run with -kv.writecost DURATION")
	}
	const plain, standby = "plain", "standby"
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast(),
		Namespaces: []string{plain, standby}, Standbys: map[string]int{standby: 1}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() { cancel(); <-done }()
	addr := lis.Addr().String()

	var servers []*kv.Server
	for _, ns := range []string{plain, standby} {
		for i, zone := range []string{"a", "b", "c"} {
			s, err := kv.NewServer(context.Background(), kv.ServerConfig{Insecure: true, Manager: addr, Namespace: ns,
				ID: fmt.Sprintf("%s-%d", ns, i+1), Listen: "127.0.0.1:0", Timing: protocol.Fast(), Zone: zone,
				Standbys: map[string]int{standby: 1}[ns]})
			if err != nil {
				t.Fatal(err)
			}
			servers = append(servers, s)
		}
	}
	defer func() {
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel() // leave at once: nothing to hand over
		for _, s := range servers {
			_ = s.Close(cctx)
		}
	}()
	waitInSync(t, srv, standby, 3)

	clients := map[string]*kv.Client{}
	for _, ns := range []string{plain, standby} {
		c, err := kv.NewClient(context.Background(), kv.ClientConfig{Insecure: true, Manager: addr, Namespace: ns,
			Timing: protocol.Fast(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.WaitSynced(t.Context()); err != nil {
			t.Fatal(err)
		}
		clients[ns] = c
	}
	value := make([]byte, *writeCostBytes)
	lat := map[string][]time.Duration{}
	var mu sync.Mutex
	var failed int
	var wg sync.WaitGroup
	until := time.Now().Add(*writeCost)
	for w := range *writeCostWorkers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			mine := map[string][]time.Duration{}
			bad := 0
			for i := 0; time.Now().Before(until); i++ {
				order := []string{plain, standby}
				if i%2 == 1 {
					order = []string{standby, plain}
				}
				for _, ns := range order {
					k := fmt.Sprintf("key-%04d", r.IntN(1000))
					at := time.Now()
					if err := clients[ns].Put(context.Background(), k, value); err != nil {
						bad++
						continue
					}
					mine[ns] = append(mine[ns], time.Since(at))
				}
			}
			mu.Lock()
			for ns, ds := range mine {
				lat[ns] = append(lat[ns], ds...)
			}
			failed += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d writers, %d-byte values, %s, loopback HTTP, fast timings; %d puts failed", *writeCostWorkers,
		*writeCostBytes, *writeCost, failed)
	t.Logf("%-8s %8s %9s %9s %9s %9s %9s", "ns", "puts", "puts/s", "p50", "p90", "p99", "p99.9")
	for _, ns := range []string{plain, standby} {
		ds := lat[ns]
		slices.Sort(ds)
		q := func(p float64) time.Duration {
			if len(ds) == 0 {
				return 0
			}
			return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(time.Microsecond)
		}
		t.Logf("%-8s %8d %9.0f %9s %9s %9s %9s", ns, len(ds), float64(len(ds))/writeCost.Seconds(),
			q(0.50), q(0.90), q(0.99), q(0.999))
	}
	if len(lat[standby]) == 0 || len(lat[plain]) == 0 {
		t.Fatal("no put succeeded")
	}
}

// waitInSync waits until every range of namespace ns is held by one of
// owners Owners and has a standby in sync.
func waitInSync(t *testing.T, srv *manager.Server, ns string, owners int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		for _, n := range srv.Snapshot().Namespaces {
			if n.Name != ns {
				continue
			}
			held, standing, inSync := 0, 0, 0
			for _, o := range n.Owners {
				held += o.Ranges
				standing += o.StandbyRanges
				inSync += o.StandbyInSync
			}
			last = fmt.Sprintf("%d owners, %d of %d ranges held (%d free), %d standing by, %d in sync",
				len(n.Owners), held, n.Segments, n.FreeSegments, standing, inSync)
			if len(n.Owners) == owners && n.FreeSegments == 0 && held > 0 && inSync == held && standing == held {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("namespace %s: not every range's standby in sync within 30 s: %s", ns, last)
}
