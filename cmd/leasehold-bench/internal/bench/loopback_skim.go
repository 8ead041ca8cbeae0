package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/keyspace"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// A thin Lookup's sync stream that skims its answers. A thin Lookup keeps
// only its LSN, yet decoding a snapshot into the protobuf structs builds
// every segment of it (64 per Owner: 64,000 at 1,000 Owners, about 2 MB of
// wire), which at thousands of Lookups makes the one driver process, not
// the Manager, what a point measures. skimCodec reads an answer's header
// (its ID, epoch, the Manager's timings, the request a push or heartbeat
// vouches for and the update's from, to and whether it is a snapshot) with
// protowire and steps over the changes and segments by their length. Every byte the Manager sends is still received
// and framed by gRPC, and the LSN the Lookup keeps is the update's own
// (from, to, snapshot): it asks again on a gap exactly as before; what it
// does not do is check the segments, which it never kept.

// skimmedSync is a SyncResponse's header as skimCodec reads it.
type skimmedSync struct {
	id, epoch         uint64
	from, to          uint64
	snapshot, update  bool
	sync, syncTimeout int64 // nanoseconds
	maxDrift          float64
	request           uint64 // the request a push or heartbeat vouches for (0: none)
	sinceRequest      int64  // nanoseconds
	watch             uint64 // a Watch's number, in its first message
}

// skimCodec marshals requests as the proto codec does and unmarshals
// answers into skimmedSync. Its name is "proto": the Manager sees the
// same content type.
type skimCodec struct{}

func (skimCodec) Name() string { return "proto" }

func (skimCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (skimCodec) Unmarshal(data mem.BufferSlice, v any) error {
	s, ok := v.(*skimmedSync)
	if !ok {
		return fmt.Errorf("skimCodec: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return s.parse(buf.ReadOnlyData())
}

var errSkim = errors.New("skimCodec: malformed SyncResponse")

// parse reads SyncResponse's fields 2 (id), 3 (epoch), 4 (update: from 1,
// to 2, snapshot 3), 5, 6 and 10 (the timings), 8 and 9 (request,
// since_request_nanos) and 11 (watch), and steps over the rest. A heartbeat
// is a push whose update is an empty delta (from = to, the table's LSN): it
// has field 4 like any other.
func (s *skimmedSync) parse(b []byte) error {
	*s = skimmedSync{}
	return skimFields(b, func(num protowire.Number, v uint64) {
		switch num {
		case 2:
			s.id = v
		case 3:
			s.epoch = v
		case 5:
			s.sync = int64(v)
		case 6:
			s.syncTimeout = int64(v)
		case 8:
			s.request = v
		case 9:
			s.sinceRequest = int64(v)
		case 10:
			s.maxDrift = math.Float64frombits(v) // a double: fixed64
		case 11:
			s.watch = v
		}
	}, func(num protowire.Number, u []byte) error {
		if num != 4 {
			return nil
		}
		s.update = true
		return skimFields(u, func(num protowire.Number, v uint64) {
			switch num {
			case 1:
				s.from = v
			case 2:
				s.to = v
			case 3:
				s.snapshot = v != 0
			}
		}, nil)
	})
}

// skimFields walks the fields of message b, handing each varint and each
// fixed64 (its bits: a double or fixed64 field) to scalar and each
// length-delimited field to bytes (when not nil), and stepping over
// everything else without decoding it.
func skimFields(b []byte, scalar func(protowire.Number, uint64), bytes func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errSkim
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType || typ == protowire.Fixed64Type:
			var v uint64
			if typ == protowire.VarintType {
				v, n = protowire.ConsumeVarint(b)
			} else {
				v, n = protowire.ConsumeFixed64(b)
			}
			if n < 0 {
				return errSkim
			}
			b = b[n:]
			scalar(num, v)
		case typ == protowire.BytesType && bytes != nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errSkim
			}
			b = b[n:]
			if err := bytes(num, v); err != nil {
				return err
			}
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errSkim
			}
			b = b[n:]
		}
	}
	return nil
}

// response is the header as the thin Lookup's loop takes it: a
// SyncResponse without changes or segments, and without its namespace. On
// a stream whose requests said names_once the Manager leaves the timings
// out after the first response; they come out zero, and the Lookup keeps
// the last ones (thinlookup.Core).
func (s *skimmedSync) response() (*protocol.SyncResponse, error) {
	if !s.update {
		return nil, fmt.Errorf("%w: no update", errSkim)
	}
	r := &protocol.SyncResponse{ID: s.id, Epoch: s.epoch,
		Sync: time.Duration(s.sync), SyncTimeout: time.Duration(s.syncTimeout), MaxDrift: s.maxDrift,
		Request: s.request, SinceRequest: time.Duration(s.sinceRequest)}
	r.Update.From, r.Update.To, r.Update.Snapshot = keyspace.LSN(s.from), keyspace.LSN(s.to), s.snapshot
	return r, nil
}

// openSkimmed opens a Watch (or with sync a Lookups.Sync stream) whose
// answers skimCodec reads; wait bounds the Watch's first message and each
// Poll (client.OpenWatch).
func openSkimmed(ctx context.Context, cc grpc.ClientConnInterface, sync bool, wait time.Duration) (client.Stream[pb.SyncRequest, skimmedSync], error) {
	if !sync {
		return client.OpenWatch(ctx, cc, func() time.Duration { return wait }, func(s *skimmedSync) uint64 { return s.watch }, nil, grpc.ForceCodecV2(skimCodec{}))
	}
	st, err := cc.NewStream(ctx, &pb.Lookups_ServiceDesc.Streams[0], pb.Lookups_Sync_FullMethodName, grpc.ForceCodecV2(skimCodec{}))
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[pb.SyncRequest, skimmedSync]{ClientStream: st}, nil
}
