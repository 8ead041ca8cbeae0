package owner

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAnswerWaitLongest: the longest answer wait counts from the oldest
// request an answer acknowledges, not from the request it names, so an
// answer held while renewals piled up shows its whole wait; and 64
// unanswered requests keep the oldest.
func TestAnswerWaitLongest(t *testing.T) {
	m := &metrics{renewal: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x"}), sent: map[uint64]time.Time{}}
	base := time.Unix(1000, 0)
	m.requestSent(1, base)
	m.answered(1, base.Add(10*time.Millisecond))
	if got := time.Duration(m.longest.Load()); got != 10*time.Millisecond {
		t.Fatalf("longest = %v after one 10-ms round trip, want 10ms", got)
	}
	// Requests 2..100 go out every 100 ms; the answer to the last comes
	// 50 ms after it: request 2 waited 9.85 s.
	for seq := uint64(2); seq <= 100; seq++ {
		m.requestSent(seq, base.Add(time.Duration(seq)*100*time.Millisecond))
	}
	m.answered(100, base.Add(10050*time.Millisecond))
	if got, want := time.Duration(m.longest.Load()), 9850*time.Millisecond; got != want {
		t.Fatalf("longest = %v after answers held for 99 requests, want %v (from the oldest)", got, want)
	}
	if len(m.sent) != 0 {
		t.Fatalf("%d requests still timed after an answer acknowledged them all", len(m.sent))
	}
}
