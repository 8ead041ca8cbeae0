package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
)

// TestWebhookAtLeastOnce: a hook that fails is sent the notification again
// until it accepts it, and then the next, in order.
func TestWebhookAtLeastOnce(t *testing.T) {
	var mu sync.Mutex
	var got []uint64 // the IDs accepted, in order
	attempts := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if attempts++; attempts <= 2 {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var e LossEvent
		if err := json.Unmarshal(b, &e); err != nil || r.Header.Get("Leasehold-Loss-Id") == "" {
			t.Errorf("hook got %q (%v), Leasehold-Loss-Id %q", b, err, r.Header.Get("Leasehold-Loss-Id"))
		}
		got = append(got, e.ID)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	g, fr, _ := newTest(t, Config{Webhooks: []string{hook.URL}})
	fr.onLoss(lookup.Loss{Ranges: []keyspace.Range{{Start: 1, End: 2}}})
	fr.onLoss(lookup.Loss{Ranges: []keyspace.Range{{Start: 5, End: 9}}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hook accepted %d notifications within 10 s, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if len(got) != 2 || got[0] != 1 || got[1] != 2 || attempts != 4 {
		t.Errorf("the hook accepted %v after %d attempts, want [1 2] after 4", got, attempts)
	}
	mu.Unlock()
	g.Close() // the delivery stops
	if _, err := New(t.Context(), Config{Insecure: true, Manager: "x", Routes: []Route{{Key: "path:1"}}, Webhooks: []string{"ftp://x"}}); err == nil || !strings.Contains(err.Error(), "want an http://") {
		t.Errorf("a bad webhook URL: %v", err)
	}
}
