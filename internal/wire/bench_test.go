package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// decodedSnapshot is a 6400-segment snapshot as a Lookup receives it: a
// message proto.Unmarshal produced.
func decodedSnapshot(b *testing.B) *leaseholdv1.SyncResponse {
	enc, err := proto.Marshal(SyncResponseToPB(snapshotResponse(6400)))
	if err != nil {
		b.Fatal(err)
	}
	var m leaseholdv1.SyncResponse
	if err := proto.Unmarshal(enc, &m); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	return &m
}

func BenchmarkSyncResponseFromPB(b *testing.B) {
	m := decodedSnapshot(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SyncResponseFromPB(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSyncResponseToPB(b *testing.B) {
	r := snapshotResponse(6400)
	b.ReportAllocs()
	for b.Loop() {
		SyncResponseToPB(r)
	}
}

// For scale: what decoding the same snapshot costs in protobuf itself.
func BenchmarkSyncResponseUnmarshal(b *testing.B) {
	enc, err := proto.Marshal(decodedSnapshot(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var m leaseholdv1.SyncResponse
		if err := proto.Unmarshal(enc, &m); err != nil {
			b.Fatal(err)
		}
	}
}
