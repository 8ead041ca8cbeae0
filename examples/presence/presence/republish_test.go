package presence_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/lookup"
)

// heldAnswer is a transport that holds the answer to the heartbeat whose
// query is hold until onHeld, called with the answer in hand, returns;
// it records the query of every heartbeat it sends.
type heldAnswer struct {
	next   http.RoundTripper
	hold   string
	onHeld func()

	mu   sync.Mutex
	sent []string
}

func (h *heldAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if r.Method == http.MethodPut {
		h.mu.Lock()
		h.sent = append(h.sent, r.URL.RawQuery)
		h.mu.Unlock()
		if err == nil && r.URL.RawQuery == h.hold {
			h.onHeld()
		}
	}
	return resp, err
}

// count returns how many heartbeats were sent through h.
func (h *heldAnswer) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sent)
}

// TestRepublishesAHeartbeatStillAnswering: a loss notification that
// arrives after the Owner stored and acknowledged a heartbeat, before the
// answer reached the device, republishes that heartbeat, not the one
// acknowledged before it: the device is told its heartbeat is stored, so
// the new Owner must not be left an older status (the presence scenario's
// promise, TestPresenceScenario in internal/e2e).
func TestRepublishesAHeartbeatStillAnswering(t *testing.T) {
	testwait.Side(t)
	mgr := startManager(t)
	startServer(t, mgr, "pr-1")
	c := newClient(t, mgr)
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	d := c.Device("user-1", "phone")
	if _, err := d.Beat(wctx, "on"); err != nil {
		t.Fatal(err)
	}
	// The second heartbeat's answer is held while a loss of everything is
	// notified and its republish sent: that is the race the scenario met.
	h := &heldAnswer{next: c.Transport(), hold: "seq=2"}
	h.onHeld = func() {
		c.NotifyLoss(lookup.Loss{All: true})
		for h.count() < 2 && wctx.Err() == nil {
			time.Sleep(time.Millisecond) // the republish is on its own goroutine
		}
	}
	c.SetTransport(h)
	if _, err := d.Beat(wctx, "away"); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	sent := h.sent
	h.mu.Unlock()
	if len(sent) != 2 || sent[1] != "seq=2" {
		t.Fatalf("heartbeats sent while the second's answer was held: %q; want the republish to send seq=2 (the last heartbeat, acknowledged by its Owner)", sent)
	}
}
