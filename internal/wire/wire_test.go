package wire

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/leasetable"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// roundTrip encodes v with to and proto.Marshal, decodes the bytes with
// proto.Unmarshal and from, and reports the decoded value.
func roundTrip[V any, M proto.Message](t *testing.T, v V, to func(V) M, from func(M) (V, error)) V {
	t.Helper()
	m := to(v)
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal(%v): %v", m, err)
	}
	m2 := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, m2); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	got, err := from(m2)
	if err != nil {
		t.Fatalf("FromPB(%v): %v", m2, err)
	}
	return got
}

func TestRoundTrip(t *testing.T) {
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 0))

		lreq := randLeaseRequest(rng)
		if got, want := roundTrip(t, lreq, LeaseRequestToPB, LeaseRequestFromPB), normLeaseRequest(lreq); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: LeaseRequest round trip\n got %+v\nwant %+v", seed, got, want)
		}
		lresp := randLeaseResponse(rng)
		if got, want := roundTrip(t, lresp, LeaseResponseToPB, LeaseResponseFromPB), normLeaseResponse(lresp); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: LeaseResponse round trip\n got %+v\nwant %+v", seed, got, want)
		}
		sreq := randSyncRequest(rng)
		if got := roundTrip(t, sreq, SyncRequestToPB, SyncRequestFromPB); !reflect.DeepEqual(got, sreq) {
			t.Fatalf("seed %d: SyncRequest round trip\n got %+v\nwant %+v", seed, got, sreq)
		}
		sresp := randSyncResponse(rng)
		if got, want := roundTrip(t, sresp, SyncResponseToPB, SyncResponseFromPB), normSyncResponse(sresp); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: SyncResponse round trip\n got %+v\nwant %+v", seed, got, want)
		}
	}
}

func TestRoundTripSnapshot(t *testing.T) {
	want := snapshotResponse(6400)
	// The fixture is a real table: a View accepts it.
	if _, err := leasetable.NewView().Apply(want.Update); err != nil {
		t.Fatalf("fixture snapshot is not a valid table: %v", err)
	}
	if got := roundTrip(t, want, SyncResponseToPB, SyncResponseFromPB); !reflect.DeepEqual(got, want) {
		t.Fatal("6400-segment snapshot changed in a round trip")
	}
}

func TestToPBNil(t *testing.T) {
	if LeaseRequestToPB(nil) != nil || LeaseResponseToPB(nil) != nil ||
		SyncRequestToPB(nil) != nil || SyncResponseToPB(nil) != nil || UpdateToPB(nil) != nil {
		t.Error("a ToPB function returned a message for nil")
	}
}

// Valid building blocks for the rejection table.
func pbRange(start, end uint64) *leaseholdv1.Range {
	return &leaseholdv1.Range{Start: start, End: end}
}

func pbLease() *leaseholdv1.Lease { return &leaseholdv1.Lease{Range: pbRange(0, 0), Lgn: 1} }

func pbLeaseRequest() *leaseholdv1.LeaseRequest {
	return &leaseholdv1.LeaseRequest{
		Namespace: "default", Owner: "o1", Addr: "10.0.0.1:7000", Incarnation: 1, Seq: 1,
		Held: []*leaseholdv1.Lease{pbLease(), {Range: pbRange(5, 9), Lgn: 2}},
	}
}

func pbLeaseResponse() *leaseholdv1.LeaseResponse {
	return &leaseholdv1.LeaseResponse{
		Namespace: "default", Owner: "o1", Incarnation: 1, Epoch: 1, Seq: 1,
		Leases: []*leaseholdv1.Lease{pbLease()}, OwnerLeaseNanos: 60e9, RenewNanos: 15e9,
	}
}

func pbOwned() *leaseholdv1.Entry { return &leaseholdv1.Entry{Owner: "o1", Addr: "a", Lgn: 3} }

func pbDelta() *leaseholdv1.SyncResponse {
	return &leaseholdv1.SyncResponse{Namespace: "default", Epoch: 1, Update: &leaseholdv1.Update{
		From: 0, To: 2, Changes: []*leaseholdv1.Change{
			{Lsn: 1, Range: pbRange(0, 0), Entry: pbOwned()},
			{Lsn: 2, Range: pbRange(1, 2), Entry: &leaseholdv1.Entry{}},
		},
	}}
}

func pbSnapshot() *leaseholdv1.SyncResponse {
	return &leaseholdv1.SyncResponse{Namespace: "default", Epoch: 1, Update: &leaseholdv1.Update{
		To: 2, Snapshot: true, Segments: []*leaseholdv1.Segment{
			{Range: pbRange(0, 1<<63), Entry: pbOwned()},
			{Range: pbRange(1<<63, 0), Entry: &leaseholdv1.Entry{}},
		},
	}}
}

func TestFromPBRejects(t *testing.T) {
	long := strings.Repeat("x", MaxStringLen+1)
	const badUTF8 = "o\xff1"
	manyLeases := make([]*leaseholdv1.Lease, MaxLeases+1)
	for i := range manyLeases {
		manyLeases[i] = pbLease()
	}

	lreq := func(edit func(*leaseholdv1.LeaseRequest)) func() error {
		return func() error {
			m := pbLeaseRequest()
			edit(m)
			_, err := LeaseRequestFromPB(m)
			return err
		}
	}
	lresp := func(edit func(*leaseholdv1.LeaseResponse)) func() error {
		return func() error {
			m := pbLeaseResponse()
			edit(m)
			_, err := LeaseResponseFromPB(m)
			return err
		}
	}
	sreq := func(edit func(*leaseholdv1.SyncRequest)) func() error {
		return func() error {
			m := &leaseholdv1.SyncRequest{Namespace: "default", Id: 1, Lsn: 4}
			edit(m)
			_, err := SyncRequestFromPB(m)
			return err
		}
	}
	delta := func(edit func(*leaseholdv1.SyncResponse)) func() error {
		return func() error {
			m := pbDelta()
			edit(m)
			_, err := SyncResponseFromPB(m)
			return err
		}
	}
	snap := func(edit func(*leaseholdv1.SyncResponse)) func() error {
		return func() error {
			m := pbSnapshot()
			edit(m)
			_, err := SyncResponseFromPB(m)
			return err
		}
	}
	segEntry := func(e *leaseholdv1.Entry) func() error {
		return snap(func(m *leaseholdv1.SyncResponse) { m.Update.Segments[0].Entry = e })
	}

	for _, c := range []struct {
		name string
		err  func() error
		want string // a substring of the error
	}{
		// LeaseRequest
		{"lease request nil", func() error { _, err := LeaseRequestFromPB(nil); return err }, "nil LeaseRequest"},
		{"lease request no namespace", lreq(func(m *leaseholdv1.LeaseRequest) { m.Namespace = "" }),
			"LeaseRequest.namespace: empty; it is required"},
		{"lease request long namespace", lreq(func(m *leaseholdv1.LeaseRequest) { m.Namespace = long }),
			"LeaseRequest.namespace: 1025 bytes long; at most 1024 allowed"},
		{"lease request long owner", lreq(func(m *leaseholdv1.LeaseRequest) { m.Owner = long }),
			"LeaseRequest.owner: 1025 bytes long"},
		{"lease request bad UTF-8 owner", lreq(func(m *leaseholdv1.LeaseRequest) { m.Owner = badUTF8 }),
			"LeaseRequest.owner: not valid UTF-8"},
		{"lease request long addr", lreq(func(m *leaseholdv1.LeaseRequest) { m.Addr = long }),
			"LeaseRequest.addr: 1025 bytes long"},
		{"lease request nil lease", lreq(func(m *leaseholdv1.LeaseRequest) { m.Held[1] = nil }),
			"LeaseRequest.held[1]: nil lease"},
		{"lease request missing range", lreq(func(m *leaseholdv1.LeaseRequest) { m.Held[1].Range = nil }),
			"LeaseRequest.held[1]: missing range"},
		{"lease request empty range", lreq(func(m *leaseholdv1.LeaseRequest) { m.Held[1].Range = pbRange(5, 5) }),
			"LeaseRequest.held[1]: empty range [0000000000000005, 0000000000000005)"},
		{"lease request inverted range", lreq(func(m *leaseholdv1.LeaseRequest) { m.Held[0].Range = pbRange(9, 5) }),
			"LeaseRequest.held[0]: empty range [0000000000000009, 0000000000000005)"},
		{"lease request handed without target", lreq(func(m *leaseholdv1.LeaseRequest) {
			m.Handed = []*leaseholdv1.Handed{{Range: pbRange(1, 5), Lgn: 3, Incarnation: 1}}
		}), "LeaseRequest.handed[0]: a handover needs an LGN, a target owner and its incarnation"},
		{"lease request handed nil", lreq(func(m *leaseholdv1.LeaseRequest) { m.Handed = []*leaseholdv1.Handed{nil} }),
			"LeaseRequest.handed[0]: nil handover"},
		{"lease request NaN capacity", lreq(func(m *leaseholdv1.LeaseRequest) { m.Capacity = math.NaN() }),
			"LeaseRequest.capacity: NaN"},
		{"lease request negative capacity", lreq(func(m *leaseholdv1.LeaseRequest) { m.Capacity = -1 }),
			"LeaseRequest.capacity: -1"},
		{"lease request capacity over the maximum", lreq(func(m *leaseholdv1.LeaseRequest) { m.Capacity = 1e6 }),
			"LeaseRequest.capacity: 1e+06; want a finite number in [0, 100] (wire.MaxCapacity)"},
		{"lease request load without range", lreq(func(m *leaseholdv1.LeaseRequest) { m.Load = []*leaseholdv1.RangeLoad{{Requests: 3}} }),
			"LeaseRequest.load[0]: missing range"},
		{"lease request too many hot keys", lreq(func(m *leaseholdv1.LeaseRequest) { m.HotKeys = make([]*leaseholdv1.KeyLoad, MaxHotKeys+1) }),
			"LeaseRequest.hot_keys: 65 hot keys; at most 64 allowed"},
		{"lease request negative window", lreq(func(m *leaseholdv1.LeaseRequest) { m.WindowNanos = -1 }),
			"LeaseRequest.window_nanos"},
		{"lease response handover without incarnation", lresp(func(m *leaseholdv1.LeaseResponse) {
			m.Handovers = []*leaseholdv1.Handover{{Range: pbRange(1, 5), Lgn: 3, To: "b", WithinNanos: 1}}
		}), "LeaseResponse.handovers[0]: a handover needs an LGN, a target owner and its incarnation"},
		{"lease response handover without deadline", lresp(func(m *leaseholdv1.LeaseResponse) {
			m.Handovers = []*leaseholdv1.Handover{{Range: pbRange(1, 5), Lgn: 3, To: "b", Incarnation: 2}}
		}), "LeaseResponse.handovers[0].within_nanos: 0; want a positive duration"},
		{"lease response bad drain", lresp(func(m *leaseholdv1.LeaseResponse) { m.Drain = 7 }),
			"LeaseResponse.drain: 7; want 0, 1 or 2"},
		{"lease request LGN 0", lreq(func(m *leaseholdv1.LeaseRequest) { m.Held[1].Lgn = 0 }),
			"LeaseRequest.held[1]: lease on [0000000000000005, 0000000000000009) has LGN 0"},
		{"lease request too many leases", lreq(func(m *leaseholdv1.LeaseRequest) { m.Held = manyLeases }),
			"LeaseRequest.held: 65537 leases; at most 65536 allowed"},
		{"lease request compact with held", lreq(func(m *leaseholdv1.LeaseRequest) { m.HeldAsAcked = true }),
			"LeaseRequest: held_as_acked set and 2 leases in held; the compact form lists none"},

		// LeaseResponse
		{"lease response nil", func() error { _, err := LeaseResponseFromPB(nil); return err }, "nil LeaseResponse"},
		{"lease response long owner", lresp(func(m *leaseholdv1.LeaseResponse) { m.Owner = long }),
			"LeaseResponse.owner: 1025 bytes long"},
		{"lease response bad UTF-8 namespace", lresp(func(m *leaseholdv1.LeaseResponse) { m.Namespace = badUTF8 }),
			"LeaseResponse.namespace: not valid UTF-8"},
		{"lease response negative lease", lresp(func(m *leaseholdv1.LeaseResponse) { m.OwnerLeaseNanos = -1 }),
			"LeaseResponse.owner_lease_nanos: negative duration -1ns"},
		{"lease response negative renew", lresp(func(m *leaseholdv1.LeaseResponse) { m.RenewNanos = -5 }),
			"LeaseResponse.renew_nanos: negative duration -5ns"},
		{"lease response LGN 0", lresp(func(m *leaseholdv1.LeaseResponse) { m.Leases[0].Lgn = 0 }),
			"LeaseResponse.leases[0]: lease on [0000000000000000, end) has LGN 0"},
		{"lease response missing range", lresp(func(m *leaseholdv1.LeaseResponse) { m.Leases[0].Range = nil }),
			"LeaseResponse.leases[0]: missing range"},
		{"lease response too many leases", lresp(func(m *leaseholdv1.LeaseResponse) { m.Leases = manyLeases }),
			"LeaseResponse.leases: 65537 leases"},
		{"lease response compact with leases", lresp(func(m *leaseholdv1.LeaseResponse) { m.RenewHeld = true }),
			"LeaseResponse: renew_held set and 1 leases in leases; the compact form lists none"},

		// SyncRequest
		{"sync request nil", func() error { _, err := SyncRequestFromPB(nil); return err }, "nil SyncRequest"},
		{"sync request no namespace", sreq(func(m *leaseholdv1.SyncRequest) { m.Namespace = "" }),
			"SyncRequest.namespace: empty; it is required"},
		{"sync request long namespace", sreq(func(m *leaseholdv1.SyncRequest) { m.Namespace = long }),
			"SyncRequest.namespace: 1025 bytes long"},

		// SyncResponse
		{"sync response nil", func() error { _, err := SyncResponseFromPB(nil); return err }, "nil SyncResponse"},
		{"sync response missing update", delta(func(m *leaseholdv1.SyncResponse) { m.Update = nil }),
			"SyncResponse.update: missing update"},
		{"sync response long namespace", delta(func(m *leaseholdv1.SyncResponse) { m.Namespace = long }),
			"SyncResponse.namespace: 1025 bytes long"},
		{"sync response negative sync", delta(func(m *leaseholdv1.SyncResponse) { m.SyncNanos = -1 }),
			"SyncResponse.sync_nanos: negative duration"},
		{"sync response negative timeout", delta(func(m *leaseholdv1.SyncResponse) { m.SyncTimeoutNanos = -1 }),
			"SyncResponse.sync_timeout_nanos: negative duration"},
		{"delta with segments", delta(func(m *leaseholdv1.SyncResponse) { m.Update.Segments = pbSnapshot().Update.Segments }),
			"SyncResponse.update: delta carries 2 segments"},
		{"snapshot with changes", snap(func(m *leaseholdv1.SyncResponse) { m.Update.Changes = pbDelta().Update.Changes }),
			"SyncResponse.update: snapshot carries 2 changes"},
		{"too many items", delta(func(m *leaseholdv1.SyncResponse) {
			m.Update.Changes = make([]*leaseholdv1.Change, MaxUpdateItems)
			m.Update.Segments = make([]*leaseholdv1.Segment, 1)
		}), "SyncResponse.update: 4194305 changes and segments; at most 4194304 allowed"},
		{"nil change", delta(func(m *leaseholdv1.SyncResponse) { m.Update.Changes[1] = nil }),
			"SyncResponse.update.changes[1]: nil change"},
		{"change missing range", delta(func(m *leaseholdv1.SyncResponse) { m.Update.Changes[1].Range = nil }),
			"SyncResponse.update.changes[1]: missing range"},
		{"change empty range", delta(func(m *leaseholdv1.SyncResponse) { m.Update.Changes[0].Range = pbRange(7, 7) }),
			"SyncResponse.update.changes[0]: empty range"},
		{"change missing entry", delta(func(m *leaseholdv1.SyncResponse) { m.Update.Changes[0].Entry = nil }),
			"SyncResponse.update.changes[0] on [0000000000000000, end): missing entry"},
		{"change owned LGN 0", delta(func(m *leaseholdv1.SyncResponse) { m.Update.Changes[0].Entry.Lgn = 0 }),
			`SyncResponse.update.changes[0] on [0000000000000000, end): entry for owner "o1" has LGN 0`},
		{"nil segment", snap(func(m *leaseholdv1.SyncResponse) { m.Update.Segments[0] = nil }),
			"SyncResponse.update.segments[0]: nil segment"},
		{"segment missing range", snap(func(m *leaseholdv1.SyncResponse) { m.Update.Segments[1].Range = nil }),
			"SyncResponse.update.segments[1]: missing range"},
		{"segment missing entry", snap(func(m *leaseholdv1.SyncResponse) { m.Update.Segments[1].Entry = nil }),
			"SyncResponse.update.segments[1] on [8000000000000000, end): missing entry"},
		{"free entry with LGN", segEntry(&leaseholdv1.Entry{Lgn: 4}),
			"segments[0] on [0000000000000000, 8000000000000000): free entry (no Owner) has LGN 4; want 0"},
		{"free entry with addr", segEntry(&leaseholdv1.Entry{Addr: "a"}),
			`segments[0] on [0000000000000000, 8000000000000000): free entry (no Owner) has Addr "a"`},
		{"free entry migrated", segEntry(&leaseholdv1.Entry{Migrated: true}),
			"free entry (no Owner) is marked Migrated"},
		{"migrated from without migrated", segEntry(&leaseholdv1.Entry{Owner: "o1", Lgn: 3, MigratedFrom: 2}),
			`entry for owner "o1" has MigratedFrom 2 but Migrated is false`},
		{"migrated from itself", segEntry(&leaseholdv1.Entry{Owner: "o1", Lgn: 3, Migrated: true, MigratedFrom: 3}),
			`entry for owner "o1" has MigratedFrom equal to its own LGN 3`},
		{"entry long owner", segEntry(&leaseholdv1.Entry{Owner: long, Lgn: 3}),
			"segments[0] on [0000000000000000, 8000000000000000): entry owner: 1025 bytes long"},
		{"entry bad UTF-8 addr", segEntry(&leaseholdv1.Entry{Owner: "o1", Addr: badUTF8, Lgn: 3}),
			"segments[0] on [0000000000000000, 8000000000000000): entry addr: not valid UTF-8"},
		{"update nil", func() error { _, err := UpdateFromPB(nil); return err }, "nil Update"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), ErrInvalid.Error()+": ") {
				t.Errorf("error %q does not start with %q", err, ErrInvalid.Error()+": ")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q\ndoes not contain %q", err, c.want)
			}
		})
	}
}

// The fixtures of the rejection table are valid before they are edited, and
// FromPB does not enforce protocol rules the cores check.
func TestFromPBAccepts(t *testing.T) {
	if _, err := LeaseRequestFromPB(pbLeaseRequest()); err != nil {
		t.Errorf("LeaseRequest fixture: %v", err)
	}
	// Seq 0, no owner, no incarnation: the Manager's core rejects these,
	// in its own terms; the wire layer lets them through.
	if _, err := LeaseRequestFromPB(&leaseholdv1.LeaseRequest{Namespace: "n"}); err != nil {
		t.Errorf("minimal LeaseRequest: %v", err)
	}
	if _, err := LeaseResponseFromPB(pbLeaseResponse()); err != nil {
		t.Errorf("LeaseResponse fixture: %v", err)
	}
	if _, err := LeaseResponseFromPB(&leaseholdv1.LeaseResponse{}); err != nil {
		t.Errorf("empty LeaseResponse: %v", err)
	}
	if _, err := SyncResponseFromPB(pbDelta()); err != nil {
		t.Errorf("delta fixture: %v", err)
	}
	if _, err := SyncResponseFromPB(pbSnapshot()); err != nil {
		t.Errorf("snapshot fixture: %v", err)
	}
	// An empty update (no changes since the Lookup's LSN) is a valid answer.
	got, err := SyncResponseFromPB(&leaseholdv1.SyncResponse{Namespace: "n", Update: &leaseholdv1.Update{From: 4, To: 4}})
	if err != nil {
		t.Errorf("empty delta: %v", err)
	} else if want := (&protocol.SyncResponse{Namespace: "n", Update: leasetable.Update{From: 4, To: 4}}); !reflect.DeepEqual(got, want) {
		t.Errorf("empty delta = %+v, want %+v", got, want)
	}
	// A free entry and the full key space encode as empty messages, which
	// are present on the wire: they survive a round trip.
	b, err := proto.Marshal(SyncResponseToPB(&protocol.SyncResponse{Update: leasetable.Update{
		Snapshot: true, Segments: []leasetable.Segment{{}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	var m leaseholdv1.SyncResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := SyncResponseFromPB(&m); err != nil {
		t.Errorf("snapshot of one free segment on the full range: %v", err)
	}
}

// TestLoadWindowMinimum: a load report over a window shorter than
// protocol.MinLoadWindow is refused naming the field (a 1-ns window made a
// handful of requests 1e28 a second); no window at all is no report.
func TestLoadWindowMinimum(t *testing.T) {
	m := &leaseholdv1.LeaseRequest{Namespace: "default", Owner: "a", Addr: "a:1", Incarnation: 1, Seq: 1, WindowNanos: 1}
	if _, err := LeaseRequestFromPB(m); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "window_nanos") {
		t.Fatalf("a 1-ns window: %v, want ErrInvalid naming window_nanos", err)
	}
	for _, w := range []int64{0, int64(protocol.MinLoadWindow)} {
		m.WindowNanos = w
		if _, err := LeaseRequestFromPB(m); err != nil {
			t.Fatalf("a window of %d ns: %v", w, err)
		}
	}
}
