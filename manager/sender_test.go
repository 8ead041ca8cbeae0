package manager

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// TestSenderLosesNoWakeUp queues messages with and without pauses, as the
// loop does, on a sender whose goroutine ends whenever its queue is empty:
// every message queued is sent, in order, whenever it was queued against
// the goroutine's end.
func TestSenderLosesNoWakeUp(t *testing.T) {
	t.Parallel()
	const n = 20000
	var got atomic.Int64
	var last int64
	order := true
	done := make(chan struct{})
	s := newSender(64, func(m int64) error {
		if m != last+1 {
			order = false
		}
		last = m
		if rand.IntN(4) == 0 {
			time.Sleep(time.Microsecond)
		}
		if got.Add(1) == n {
			close(done)
		}
		return nil
	})
	for i := int64(1); i <= n; i++ {
		for !s.offer(i) {
			time.Sleep(time.Microsecond) // full: wait for the sender, not drop, so order is checkable
		}
		if rand.IntN(8) == 0 {
			time.Sleep(time.Duration(rand.IntN(3)) * time.Microsecond)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	// The last goroutine ends with the queue empty, and the queue goes
	// with it: an idle stream holds no queue.
	s.wg.Wait()
	s.mu.Lock()
	running, queue := s.running, s.queue
	s.mu.Unlock()
	if running || queue != nil {
		t.Errorf("idle sender: running %v, queue of capacity %d held", running, cap(queue))
	}
	s.stop()
	if got.Load() != n {
		t.Fatalf("%d of %d messages sent: a message was queued with no goroutine to send it", got.Load(), n)
	}
	if !order {
		t.Error("messages sent out of order")
	}
}
