package pubsub_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startManager serves a Manager in-process on 127.0.0.1 with fast timings.
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

func startServer(tb testing.TB, mgr, id string) *pubsub.Server {
	tb.Helper()
	s, err := pubsub.NewServer(context.Background(), pubsub.ServerConfig{Insecure: true, Manager: mgr, ID: id, Listen: "127.0.0.1:0", Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { closeServer(tb, s) })
	return s
}

func closeServer(tb testing.TB, s *pubsub.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		tb.Errorf("close %s: %v", s.ID(), err)
	}
}

func newClient(tb testing.TB, mgr string) *pubsub.Client {
	tb.Helper()
	c, err := pubsub.NewClient(context.Background(), pubsub.ClientConfig{Insecure: true, Manager: mgr, Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if err := c.WaitSynced(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return c
}

// recorder keeps a subscription's events.
type recorder struct {
	mu     sync.Mutex
	msgs   []string
	fresh  int // subscribed events with New set
	opened chan struct{}
	once   sync.Once
}

func newRecorder() *recorder { return &recorder{opened: make(chan struct{})} }

func (r *recorder) event(e pubsub.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case "subscribed":
		if e.New {
			r.fresh++
		}
		r.once.Do(func() { close(r.opened) })
	case "message":
		r.msgs = append(r.msgs, e.Message.Data)
	}
}

func (r *recorder) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...), r.fresh
}

// waitFor polls until the recorder holds n messages.
func (r *recorder) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m, _ := r.snapshot(); len(m) >= n {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	m, _ := r.snapshot()
	t.Fatalf("received %d messages within 20 s, want %d: %v", len(m), n, m)
	return nil
}

// TestDrainHandsSubscriptionsOver subscribes to topics spread over two
// servers, publishes, closes one server (it drains, handing its
// subscriptions over) while publishing goes on, and checks every
// subscriber received every message, in order, once, and never had to
// resubscribe afresh.
func TestDrainHandsSubscriptionsOver(t *testing.T) {
	testwait.Side(t)
	mgr := startManager(t)
	a := startServer(t, mgr, "ps-1")
	startServer(t, mgr, "ps-2")
	c := newClient(t, mgr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	const ntopics, nmsgs = 8, 30
	recs := map[string]*recorder{}
	for i := range ntopics {
		topic := fmt.Sprintf("topic-%d", i)
		recs[topic] = newRecorder()
		s := c.Subscribe(topic, "sub-"+topic, recs[topic].event)
		defer s.Close()
		select {
		case <-recs[topic].opened:
		case <-ctx.Done():
			t.Fatalf("no stream opened on %s", topic)
		}
	}
	for i := range nmsgs {
		if i == nmsgs/3 {
			go closeServer(t, a)
		}
		for topic := range recs {
			if _, err := c.Publish(ctx, topic, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for topic, r := range recs {
		got := r.waitFor(t, nmsgs)
		for i, m := range got {
			if m != fmt.Sprint(i) {
				t.Fatalf("%s: got %v, want 0..%d in order, once each", topic, got, nmsgs-1)
			}
		}
		if _, fresh := r.snapshot(); fresh != 1 {
			t.Errorf("%s: subscribed afresh %d times, want once (the first)", topic, fresh)
		}
	}
}

// BenchmarkFanout measures fan-out: one publish to a topic with N
// subscribers on one server, written to every stream (over HTTP on
// 127.0.0.1) before the publish returns, and read by every subscriber.
// Deliveries/s is the figure.
func BenchmarkFanout(b *testing.B) {
	for _, nsubs := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("subscribers=%d", nsubs), func(b *testing.B) { benchFanout(b, nsubs) })
	}
}

func benchFanout(b *testing.B, nsubs int) {
	mgr := startManager(b)
	startServer(b, mgr, "ps-1")
	c := newClient(b, mgr)
	var received sync.WaitGroup
	for i := range nsubs {
		r := newRecorder()
		s := c.Subscribe("bench", fmt.Sprint("sub-", i), func(e pubsub.Event) {
			r.event(e)
			if e.Kind == "message" {
				received.Done()
			}
		})
		b.Cleanup(s.Close)
		<-r.opened
	}
	ctx := context.Background()
	n := 0
	for b.Loop() {
		received.Add(nsubs)
		p, err := c.Publish(ctx, "bench", "x")
		if err != nil || p.Attached != nsubs || !p.Written {
			b.Fatalf("publish: %+v, %v", p, err)
		}
		n++
	}
	received.Wait()
	b.ReportMetric(float64(n*nsubs)/b.Elapsed().Seconds(), "deliveries/s")
}
