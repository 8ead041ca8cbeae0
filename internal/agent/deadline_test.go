package agent

import (
	"testing"
	"time"
)

// TestDeadlineOnClockMonotonic: a deadline is the expiry's instant on
// CLOCK_MONOTONIC, never later. The instant t is read between two readings
// of CLOCK_MONOTONIC, m1 and m2; the deadline of t + 1 h, less 1 h, must
// fall between them, early by at most the time between the conversion's
// own two reads (a preemption on a loaded machine: up to 250 ms allowed).
// Were Go's monotonic clock not CLOCK_MONOTONIC less a constant, it would
// not: the deadlines would be on another clock than the application's.
func TestDeadlineOnClockMonotonic(t *testing.T) {
	for range 1000 {
		m1 := monoNow()
		at := time.Now()
		m2 := monoNow()
		d := deadline(at.Add(time.Hour)) - int64(time.Hour)
		if d > m2 {
			t.Fatalf("deadline %d ns after the last CLOCK_MONOTONIC reading %d: later than the expiry", d-m2, m2)
		}
		if d < m1-int64(250*time.Millisecond) {
			t.Fatalf("deadline %d ns before the first CLOCK_MONOTONIC reading: not the same clock", m1-d)
		}
	}
	if got := deadline(time.Now().Add(-time.Second)) - monoNow(); got > 0 {
		t.Fatalf("the deadline of a past expiry is %d ns ahead", got)
	}
}
