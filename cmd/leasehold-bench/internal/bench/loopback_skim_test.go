package bench

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestSkimCodec: the thin Lookups' codec reads a SyncResponse's ID, epoch,
// timings, the request it vouches for and the update's from, to and
// snapshot as the proto codec does, for a snapshot with segments, a delta
// with changes and a heartbeat alike, whatever fields it steps over; it
// refuses a truncated message and one without an update.
func TestSkimCodec(t *testing.T) {
	segs := make([]*pb.Segment, 300)
	for i := range segs {
		segs[i] = &pb.Segment{Range: &pb.Range{Start: uint64(i) << 40}, Entry: &pb.Entry{Owner: ownerID(i), Addr: "127.0.0.1:1", Lgn: uint64(i + 1)}}
	}
	for _, m := range []*pb.SyncResponse{
		{Namespace: "default", Id: 7, Epoch: 3, SyncNanos: 30e9, SyncTimeoutNanos: 90e9, MaxDrift: 0.01, Request: 4, SinceRequestNanos: 5,
			Update: &pb.Update{To: 1234567, Snapshot: true, Segments: segs}},
		{Id: 8, Epoch: 3, NamesOnce: true, Update: &pb.Update{From: 1234567, To: 1234569,
			Changes: []*pb.Change{{Lsn: 1234568, Entry: &pb.Entry{Owner: "a"}}, {Lsn: 1234569, ViaFree: true}}, Merged: true}},
		{Epoch: 1, Update: &pb.Update{}},
		// A heartbeat on a names_once stream: an empty delta at the table's
		// LSN, vouching for request 9, with the names left out.
		{Epoch: 3, NamesOnce: true, Request: 9, SinceRequestNanos: 15e9, Update: &pb.Update{From: 1234569, To: 1234569}},
		{Epoch: 3, NamesOnce: true, Request: 1 << 40, SinceRequestNanos: 1, Update: &pb.Update{}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var s skimmedSync
		if err := (skimCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &s); err != nil {
			t.Fatal(err)
		}
		r, err := s.response()
		if err != nil {
			t.Fatal(err)
		}
		u := m.GetUpdate()
		if r.ID != m.GetId() || r.Epoch != m.GetEpoch() || int64(r.Sync) != m.GetSyncNanos() || int64(r.SyncTimeout) != m.GetSyncTimeoutNanos() ||
			r.MaxDrift != m.GetMaxDrift() || r.Request != m.GetRequest() || int64(r.SinceRequest) != m.GetSinceRequestNanos() ||
			uint64(r.Update.From) != u.GetFrom() || uint64(r.Update.To) != u.GetTo() || r.Update.Snapshot != u.GetSnapshot() {
			t.Fatalf("skimmed %+v from %v", r, m)
		}
		if len(b) > 10 {
			if err := s.parse(b[:len(b)-3]); err == nil {
				t.Fatalf("no error for a truncated message of %d bytes", len(b))
			}
		}
	}
	b, _ := proto.Marshal(&pb.SyncResponse{Id: 1, Epoch: 1})
	var s skimmedSync
	if err := s.parse(b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.response(); err == nil {
		t.Fatal("no error for a SyncResponse without an update")
	}
}
