package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/protocol"
)

// TestNextDeadlineCached: NextDeadline, cached between steps, is what a
// fresh computation over every session gives after any step — requests,
// raced requests (which schedule a resend), restarts, leaves, drains, ticks
// — however often it is asked.
func TestNextDeadlineCached(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCore(Settings{Timing: tm, Epoch: epoch, Seed: 1, Policy: assign.ConsistentHash{}}, base)
	peers := []*peer{newPeer("a"), newPeer("b"), newPeer("c"), newPeer("d")}
	var inflight []OwnerMessage
	now := base
	check := func(step int, what string) {
		t.Helper()
		for range 2 {
			if got, want := c.NextDeadline(), c.nextDeadline(); !got.Equal(want) {
				t.Fatalf("step %d (%s): NextDeadline() = %v, want %v", step, what, got.Sub(base), want.Sub(base))
			}
		}
	}
	for step := range 3000 {
		now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		what := ""
		switch x := rng.IntN(10); {
		case x < 5:
			p := peers[rng.IntN(len(peers))]
			req := p.request()
			if rng.IntN(8) == 0 {
				req.Leaving = true
			}
			if rng.IntN(10) == 0 {
				req.AckSeq-- // raced: the Manager drops it and schedules a resend
			}
			what = "request from " + p.id
			if err := c.StepLease(now, req); err != nil {
				t.Fatal(err)
			}
		case x < 8:
			what = "tick"
			c.Tick(now)
		case x < 9:
			p := peers[rng.IntN(len(peers))]
			what = "restart " + p.id
			p.restart()
			if err := c.StepLease(now, p.request()); err != nil {
				t.Fatal(err)
			}
		default:
			what = "drain"
			_ = c.Drain(now, protocol.DefaultNamespace, peers[rng.IntN(len(peers))].id)
		}
		inflight = append(inflight, c.Ready().Owners...)
		// Deliver some of what is in flight, in order.
		n := rng.IntN(len(inflight) + 1)
		for _, m := range inflight[:n] {
			for _, p := range peers {
				if p.id == m.To {
					p.take(m.Msg)
				}
			}
		}
		inflight = inflight[n:]
		check(step, what)
	}
}
