package wire_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// TestMaxDriftTravelsWithSyncTimings: a Manager run with MaxDrift 0.2 and
// a Lookup on the default 0.05, the messages between them going through
// the conversions and both ends' names-once stream state as on a real
// stream. The Lookup's requests say the MaxDrift it judges with, its own
// and then the Manager's; the heartbeat, which leaves out the namespace
// and timings the stream has carried, is judged with 0.2: freshness moves
// by SinceRequest / 1.2, not / 1.05.
func TestMaxDriftTravelsWithSyncTimings(t *testing.T) {
	mtm := protocol.Fast()
	mtm.MaxDrift = 0.2
	ltm := protocol.Fast() // MaxDrift 0.05
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	core := lookup.NewCore(lookup.CoreConfig{Namespace: "default", Timing: ltm}, base)
	var ln wire.LookupNames
	var mn wire.ManagerSyncNames

	// poll sends the Core's request over the wire and returns it as the
	// Manager reads it.
	poll := func(now time.Time) *protocol.SyncRequest {
		t.Helper()
		core.Tick(now)
		reqs, _ := core.Ready()
		if len(reqs) != 1 {
			t.Fatalf("%d requests at %v, want 1", len(reqs), now)
		}
		m := onWire(t, ln.Send(wire.SyncRequestToPB(reqs[0])), new(leaseholdv1.SyncRequest))
		mn.Recv(m)
		got, err := wire.SyncRequestFromPB(m)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// deliver sends the Manager's message over the wire to the Core.
	deliver := func(now time.Time, r *protocol.SyncResponse) *leaseholdv1.SyncResponse {
		t.Helper()
		sent := mn.Send(wire.SyncResponseToPB(r))
		m := onWire(t, sent, new(leaseholdv1.SyncResponse))
		if err := ln.Recv(m); err != nil {
			t.Fatal(err)
		}
		got, err := wire.SyncResponseFromPB(m)
		if err != nil {
			t.Fatal(err)
		}
		core.Step(now, got)
		return sent
	}
	tab := leasetable.New(0)
	tab.Set(base, keyspace.Range{Start: 0, End: 100}, leasetable.Entry{Owner: "a", Addr: "a:1", LGN: 1})
	resp := func(id uint64, u leasetable.Update) *protocol.SyncResponse {
		return &protocol.SyncResponse{Namespace: "default", ID: id, Epoch: 2, Update: u,
			Sync: mtm.Sync, SyncTimeout: mtm.SyncTimeout, MaxDrift: mtm.MaxDrift}
	}

	if req := poll(base); req.MaxDrift != ltm.MaxDrift || !req.Heartbeats {
		t.Fatalf("first request read as %+v, want heartbeats and the Lookup's own MaxDrift %g", req, ltm.MaxDrift)
	}
	deliver(base.Add(10*time.Millisecond), resp(1, leasetable.Update{To: tab.LSN(), Snapshot: true, Segments: tab.Segments()}))
	if !core.Fresh().Equal(base) {
		t.Fatalf("Fresh() = %v after the answer, want the request's send time", core.Fresh())
	}
	at := base.Add(time.Second)
	if req := poll(at); req.MaxDrift != mtm.MaxDrift {
		t.Fatalf("request after the answer says MaxDrift %g, want the Manager's %g", req.MaxDrift, mtm.MaxDrift)
	}
	// The replica received request 2 and, 1.2 s later on its clock, sent a
	// heartbeat: an empty delta at the copy's LSN.
	beat := resp(0, tab.Since(tab.LSN()))
	beat.Request, beat.SinceRequest = 2, 1200*time.Millisecond
	sent := deliver(at.Add(1300*time.Millisecond), beat)
	if sent.GetSyncNanos() != 0 || sent.GetMaxDrift() != 0 {
		t.Errorf("the heartbeat repeats the timings the stream has carried: %v", sent)
	}
	if want := at.Add(time.Second); !core.Fresh().Equal(want) {
		t.Fatalf("Fresh() = %v, want %v: request 2's send time + 1.2 s / (1 + the Manager's 0.2)", core.Fresh(), want)
	}

	// A Manager whose MaxDrift changes (another replica) says it again.
	beat = resp(0, tab.Since(tab.LSN()))
	beat.MaxDrift = 0.1
	if sent := deliver(at.Add(1400*time.Millisecond), beat); sent.GetMaxDrift() != 0.1 {
		t.Errorf("a changed MaxDrift was left out: %v", sent)
	}
	if d := core.Timing().MaxDrift; d != 0.1 {
		t.Errorf("Timing().MaxDrift = %g after the Manager said 0.1, want 0.1", d)
	}
}

// onWire marshals m and unmarshals it into into, as a stream carries it.
func onWire[M proto.Message](t *testing.T, m M, into M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
	return into
}

// TestMaxDriftChecked: a MaxDrift outside [0, 1), or NaN, is refused in a
// request and in a response, naming the field.
func TestMaxDriftChecked(t *testing.T) {
	for _, d := range []float64{-0.01, 1, 1.5, math.NaN(), math.Inf(1)} {
		req := &leaseholdv1.SyncRequest{Namespace: "default", Id: 1, MaxDrift: d}
		if _, err := wire.SyncRequestFromPB(req); !errors.Is(err, wire.ErrInvalid) ||
			!strings.Contains(err.Error(), "SyncRequest.max_drift") || !strings.Contains(err.Error(), "[0, 1)") {
			t.Errorf("SyncRequest max_drift %g: %v, want ErrInvalid naming the field and the range", d, err)
		}
		resp := &leaseholdv1.SyncResponse{Namespace: "default", Epoch: 1, Update: &leaseholdv1.Update{}, MaxDrift: d}
		if _, err := wire.SyncResponseFromPB(resp); !errors.Is(err, wire.ErrInvalid) ||
			!strings.Contains(err.Error(), "SyncResponse.max_drift") {
			t.Errorf("SyncResponse max_drift %g: %v, want ErrInvalid naming the field", d, err)
		}
	}
	for _, d := range []float64{0, 0.05, 0.999} {
		if _, err := wire.SyncRequestFromPB(&leaseholdv1.SyncRequest{Namespace: "default", MaxDrift: d}); err != nil {
			t.Errorf("SyncRequest max_drift %g refused: %v", d, err)
		}
	}
}
