package presence_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/examples/presence/presence"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TestMain lets the package's tests that wait on real leases wait side by
// side (internal/testwait).
func TestMain(m *testing.M) {
	testwait.Parallel()
	goleak.VerifyTestMain(m)
}

func startManager(tb testing.TB) string {
	tb.Helper()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("manager: %v", err)
		}
	})
	return lis.Addr().String()
}

func startServer(tb testing.TB, mgr, id string) *presence.Server {
	tb.Helper()
	s, err := presence.NewServer(context.Background(), presence.ServerConfig{Insecure: true, Manager: mgr, ID: id, Listen: "127.0.0.1:0", Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newClient(tb testing.TB, mgr string) *presence.Client {
	tb.Helper()
	c, err := presence.NewClient(context.Background(), presence.ClientConfig{Insecure: true, Manager: mgr, Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if err := c.WaitSynced(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestLossRepublishes heartbeats once for 20 users' devices, stops one of
// the two servers (its users' state is gone with it), and checks every
// device is online again at its last acknowledged heartbeat without
// another Beat: the Client republished it on the loss notification.
func TestLossRepublishes(t *testing.T) {
	testwait.Side(t)
	mgr := startManager(t)
	a := startServer(t, mgr, "pr-1")
	startServer(t, mgr, "pr-2")
	c := newClient(t, mgr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const users = 20
	for u := range users {
		for _, dev := range []string{"phone", "laptop"} {
			d := c.Device(fmt.Sprint("user-", u), dev)
			for range 2 {
				if _, err := d.Beat(ctx, "on"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if users, _ := a.Counts(); users == 0 {
		t.Fatal("pr-1 holds no user; the test needs some on it")
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for u := range users {
		user := fmt.Sprint("user-", u)
		for {
			ans, err := c.Query(ctx, user)
			if err != nil {
				t.Fatal(err)
			}
			if len(ans.Devices) == 2 && ans.Devices[0].Seq == 2 && ans.Devices[1].Seq == 2 {
				break
			}
			for _, d := range ans.Devices {
				if d.Seq != 2 {
					t.Fatalf("%s: %+v, want seq 2 (the last acknowledged) or nothing", user, d)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// BenchmarkHeartbeat measures heartbeats over HTTP on 127.0.0.1 to one
// server from 64 concurrent devices in the same process. heartbeats/s is
// the rate; heartbeats/cpu-s divides by the process's CPU time (the
// devices' and the Lookup's included, so the server alone does better).
func BenchmarkHeartbeat(b *testing.B) {
	mgr := startManager(b)
	startServer(b, mgr, "pr-1")
	c := newClient(b, mgr)
	var next atomic.Int64
	ctx := context.Background()
	// Wait for the server to hold the key space.
	for {
		if _, err := c.Device("warm", "up").Beat(ctx, "on"); err == nil {
			break
		}
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.SetParallelism(32) // 64 devices on 2 cores
	start := cpu()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		d := c.Device(fmt.Sprint("user-", next.Add(1)), "phone")
		for pb.Next() {
			if _, err := d.Beat(ctx, "on"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	used := cpu() - start
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
	b.ReportMetric(float64(b.N)/used.Seconds(), "heartbeats/cpu-s")
}
