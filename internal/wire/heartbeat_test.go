package wire

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestHeartbeatFieldsRoundTrip: a push's Request and SinceRequest survive
// the wire, a negative SinceRequest is refused, and a request that says
// names_once takes heartbeats.
func TestHeartbeatFieldsRoundTrip(t *testing.T) {
	in := &protocol.SyncResponse{Namespace: "default", Epoch: 2, Update: leasetable.Update{From: 9, To: 9},
		Request: 41, SinceRequest: 1500 * time.Millisecond}
	out, err := SyncResponseFromPB(SyncResponseToPB(in))
	if err != nil {
		t.Fatal(err)
	}
	if out.Request != 41 || out.SinceRequest != 1500*time.Millisecond {
		t.Fatalf("round trip gave Request %d SinceRequest %v", out.Request, out.SinceRequest)
	}
	m := SyncResponseToPB(in)
	m.SinceRequestNanos = -1
	if _, err := SyncResponseFromPB(m); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative since_request_nanos: %v, want ErrInvalid", err)
	}
	for _, once := range []bool{false, true} {
		req := SyncRequestToPB(&protocol.SyncRequest{Namespace: "default", ID: 1})
		req.NamesOnce = once
		got, err := SyncRequestFromPB(req)
		if err != nil {
			t.Fatal(err)
		}
		if got.Heartbeats != once {
			t.Fatalf("names_once %v: Heartbeats %v", once, got.Heartbeats)
		}
	}
}
