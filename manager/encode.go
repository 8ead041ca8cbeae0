package manager

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// A snapshot or a large delta goes to every Lookup at once, as one wire
// Update shared by all their messages (syncResponseToPB). It is also
// encoded once: the first stream to send it marshals it, and every
// stream's message is its own fields, encoded per stream, followed by the
// shared bytes as the update field. The codec (limitCodec) hands gRPC the
// two pieces without copying them, so a snapshot of a large table sent to
// thousands of Lookups costs one marshal and no copies, instead of one
// marshal per Lookup.
//
// Only an Update that names its Owners in full is shared this way: a
// stream that names Owners by number (wire.ManagerSyncNames.Send) sends
// its own copy of a small update, encoded with its message as usual, and
// never changes the shared one or its bytes.

// sharedUpdate is a wire Update sent to many streams, encoded on first
// use. Its bytes are never changed once encoded.
type sharedUpdate struct {
	pb   *pb.Update
	once sync.Once
	b    []byte
	err  error
}

// bytes returns the Update's encoding, marshalling it the first time and
// counting that in encodings.
func (u *sharedUpdate) bytes(encodings *atomic.Int64) ([]byte, error) {
	u.once.Do(func() {
		encodings.Add(1)
		u.b, u.err = proto.Marshal(u.pb)
	})
	return u.b, u.err
}

// syncOut is a message for a Lookup's stream as the loop queues it: the
// message, and the Update it shares with other streams (nil when it
// shares none).
type syncOut struct {
	m      *pb.SyncResponse
	shared *sharedUpdate
}

// encodedSync is a SyncResponse whose update is a sharedUpdate, as the
// stream hands it to the codec (SendMsg).
type encodedSync struct {
	m *pb.SyncResponse // the stream's own; m.Update is shared.pb
	u *sharedUpdate
}

// syncUpdateField is the field number of SyncResponse.update.
var syncUpdateField = (&pb.SyncResponse{}).ProtoReflect().Descriptor().Fields().ByName("update").Number()

// marshal encodes e: the message's own fields, then the update field
// holding the shared bytes. A field's place in the encoding does not
// matter to a decoder, and the update field appears once.
func (e *encodedSync) marshal(encodings *atomic.Int64) (mem.BufferSlice, error) {
	ub, err := e.u.bytes(encodings)
	if err != nil {
		return nil, err
	}
	m := e.m
	pu := m.Update
	m.Update = nil // m is this stream's alone
	head, err := proto.Marshal(m)
	m.Update = pu
	if err != nil {
		return nil, err
	}
	head = protowire.AppendTag(head, syncUpdateField, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(ub)))
	// SliceBuffers are never written to by gRPC, and their Free does
	// nothing: the shared bytes stay as they are for the other streams.
	return mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(ub)}, nil
}
