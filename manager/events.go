// The events the gRPC handlers post to the loop, and the streams they
// stand for: the loop is their only reader.

package manager

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type event interface{}

type leaseEvent struct {
	st   *ownerStream
	req  *protocol.LeaseRequest
	errc chan error
	at   time.Time // when it arrived
}

type syncEvent struct {
	st   *lookupStream
	req  *protocol.SyncRequest
	errc chan error
}

type closeEvent struct {
	owner  *ownerStream
	lookup *lookupStream
}

type drainEvent struct {
	ns, owner string
	op        ownerOp // admin_owners.go
	errc      chan error
}

// confEvent adds replica id at addr as a learner (addr set), or as a read
// replica (readReplica too), or removes it.
type confEvent struct {
	id          uint64
	addr        string
	readReplica bool
	errc        chan error
}

type unreachableEvent uint64

type snapshotEvent struct {
	id uint64
	ok bool
}

// ownerStream is one Owner's lease stream. Only the loop reads or writes
// key and inc: the Owner it speaks for (set by its first accepted request)
// and that Owner's incarnation; and heard, when the loop last had a
// request from it.
type ownerStream struct {
	snd   *sender[*pb.LeaseResponse] // its queue and its sends
	key   *routeKey
	inc   uint64
	heard time.Time
}

type lookupStream struct {
	id    uint64
	names *wire.ManagerSyncNames // the stream's encoding; Accepts: it takes merged deltas
	ns    string
	snd   *sender[syncOut] // its queue and its sends
	sent  keyspace.LSN     // the newest LSN handed to it (loop only)
}

type routeKey struct{ ns, owner string }

// post hands an event to the loop, unless the stream or the server ends first.
func (s *Server) post(ctx context.Context, ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-ctx.Done():
	case <-s.stopped:
	}
	return false
}

// tryPost hands an event to the loop if it has room, and drops it if not.
func (s *Server) tryPost(ev event) {
	select {
	case s.events <- ev:
	default:
	}
}

// call posts an event carrying errc and waits for the loop's verdict.
func (s *Server) call(ctx context.Context, ev event, errc chan error) error {
	if !s.post(ctx, ev) {
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
	select {
	case err := <-errc:
		return grpcError(ctx, err)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped:
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
}
