package wire

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// The fuzz targets decode arbitrary bytes as a message. Whatever FromPB
// accepts must convert back with ToPB to a message that marshals and decodes
// to the same value; whatever it rejects must be rejected with ErrInvalid; and
// nothing may panic.
//
//	go test -run '^$' -fuzz '^FuzzSyncResponse$' -fuzztime 2m ./internal/wire/

// addSeeds adds a few random valid messages, the given fixtures and the
// empty message to f's corpus. It leaves out random messages over 512 bytes:
// the fuzzer minimizes every input that finds new coverage, and long ones
// (gen makes strings of MaxStringLen bytes) take it minutes.
func addSeeds[V any, M proto.Message](f *testing.F, gen func(*rand.Rand) V, to func(V) M, fixtures ...proto.Message) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 6; {
		b, err := proto.Marshal(to(gen(rng)))
		if err != nil {
			f.Fatal(err)
		}
		if len(b) <= 512 {
			f.Add(b)
			n++
		}
	}
	for _, m := range fixtures {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
}

// checkDecoded is the body of every fuzz target.
func checkDecoded[V any, M proto.Message](t *testing.T, data []byte, m M, from func(M) (V, error), to func(V) M) {
	if err := proto.Unmarshal(data, m); err != nil {
		return
	}
	v, err := from(m)
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("FromPB error %q does not wrap ErrInvalid", err)
		}
		return
	}
	m2 := to(v)
	again, err := from(m2)
	if err != nil {
		t.Fatalf("FromPB rejects ToPB of a value it accepted: %v\nvalue: %+v", err, v)
	}
	if !reflect.DeepEqual(again, v) {
		t.Fatalf("ToPB then FromPB changed the value\n got %+v\nwant %+v", again, v)
	}
	b, err := proto.Marshal(m2)
	if err != nil {
		t.Fatalf("ToPB of an accepted value does not marshal: %v\nvalue: %+v", err, v)
	}
	m3 := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, m3); err != nil {
		t.Fatalf("re-encoded message does not unmarshal: %v", err)
	}
	decoded, err := from(m3)
	if err != nil {
		t.Fatalf("FromPB rejects the re-encoded message: %v", err)
	}
	if !reflect.DeepEqual(decoded, v) {
		t.Fatalf("re-encoding changed the value\n got %+v\nwant %+v", decoded, v)
	}
}

func FuzzLeaseRequest(f *testing.F) {
	bad := pbLeaseRequest()
	bad.Held[1].Lgn = 0
	compact := pbLeaseRequest()
	compact.Held, compact.HeldAsAcked = nil, true
	badCompact := pbLeaseRequest()
	badCompact.HeldAsAcked = true
	addSeeds(f, randLeaseRequest, LeaseRequestToPB, pbLeaseRequest(), bad, compact, badCompact)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecoded(t, data, new(leaseholdv1.LeaseRequest), LeaseRequestFromPB, LeaseRequestToPB)
	})
}

func FuzzLeaseResponse(f *testing.F) {
	bad := pbLeaseResponse()
	bad.Leases[0].Range = pbRange(3, 3)
	compact := pbLeaseResponse()
	compact.Leases, compact.RenewHeld = nil, true
	badCompact := pbLeaseResponse()
	badCompact.RenewHeld = true
	addSeeds(f, randLeaseResponse, LeaseResponseToPB, pbLeaseResponse(), bad, compact, badCompact)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecoded(t, data, new(leaseholdv1.LeaseResponse), LeaseResponseFromPB, LeaseResponseToPB)
	})
}

func FuzzSyncRequest(f *testing.F) {
	addSeeds(f, randSyncRequest, SyncRequestToPB, &leaseholdv1.SyncRequest{Namespace: "default", Id: 1, Lsn: 9},
		&leaseholdv1.SyncRequest{Namespace: "default", Id: 2, NamesOnce: true, MaxDrift: 0.2},
		&leaseholdv1.SyncRequest{Namespace: "default", Id: 3, MaxDrift: 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecoded(t, data, new(leaseholdv1.SyncRequest), SyncRequestFromPB, SyncRequestToPB)
	})
}

func FuzzSyncResponse(f *testing.F) {
	bad := pbSnapshot()
	bad.Update.Segments[1].Entry.Lgn = 4 // free with an LGN
	drift, nanDrift := pbDelta(), pbDelta()
	drift.MaxDrift, nanDrift.MaxDrift = 0.2, math.NaN()
	addSeeds(f, randSyncResponse, SyncResponseToPB, pbDelta(), pbSnapshot(), bad, SyncResponseToPB(snapshotResponse(16)),
		drift, nanDrift)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecoded(t, data, new(leaseholdv1.SyncResponse), SyncResponseFromPB, SyncResponseToPB)
	})
}
