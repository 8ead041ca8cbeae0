package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// OpenWatch opens a Lookup's Watch on cc and returns it as one sync stream
// (docs/protocol.md, "Watch and Poll"): Recv reads the Watch, decoded with
// opts' codec, and Send polls, naming the Watch by the number its first
// message carries (number reads it). A Watch costs the Manager half the
// memory of a Sync stream per idle Lookup. wait bounds the first message
// and each Poll: a replica that does not answer within it is left for the
// next, as one that leaves a poll unanswered is. A replica that predates
// Watch refuses it with codes.Unimplemented: the caller then opens Sync.
func OpenWatch[R any](ctx context.Context, cc grpc.ClientConnInterface, wait time.Duration,
	number func(*R) uint64, opts ...grpc.CallOption) (Stream[pb.SyncRequest, R], error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := openWatch[R](ctx, cc, opts)
	var first *R
	if err == nil {
		t := time.AfterFunc(wait, cancel)
		first, err = w.Recv()
		if !t.Stop() {
			err = fmt.Errorf("no first message on the Watch within %s", wait)
		}
	}
	if err == nil && number(first) == 0 {
		err = errors.New("the Watch's first message names no Watch")
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &watchStream[R]{cc: cc, w: w, id: number(first), wait: wait, cancel: cancel}, nil
}

// openWatch opens the Watch and sends its empty request.
func openWatch[R any](ctx context.Context, cc grpc.ClientConnInterface, opts []grpc.CallOption) (*grpc.GenericClientStream[pb.WatchRequest, R], error) {
	cs, err := cc.NewStream(ctx, watchDesc, pb.Lookups_Watch_FullMethodName, opts...)
	if err != nil {
		return nil, err
	}
	w := &grpc.GenericClientStream[pb.WatchRequest, R]{ClientStream: cs}
	if err := w.Send(&pb.WatchRequest{}); err != nil {
		return nil, err
	}
	return w, w.CloseSend()
}

// watchDesc is the Watch method's stream description.
var watchDesc = func() *grpc.StreamDesc {
	for i, d := range pb.Lookups_ServiceDesc.Streams {
		if d.StreamName == "Watch" {
			return &pb.Lookups_ServiceDesc.Streams[i]
		}
	}
	panic("client: the Lookups service has no Watch")
}()

// watchStream is a Watch and its Polls as one sync stream. Send is called
// from one goroutine and Recv from another, as on a gRPC stream.
type watchStream[R any] struct {
	cc     grpc.ClientConnInterface
	w      *grpc.GenericClientStream[pb.WatchRequest, R]
	id     uint64
	wait   time.Duration
	cancel context.CancelFunc
}

// Send polls with m and returns once the replica has taken it; the answer
// comes on the Watch. A refused or unanswered Poll fails the stream.
func (s *watchStream[R]) Send(m *pb.SyncRequest) error {
	ctx, cancel := context.WithTimeout(s.w.Context(), s.wait)
	defer cancel()
	return s.cc.Invoke(ctx, pb.Lookups_Poll_FullMethodName, &pb.PollRequest{Watch: s.id, Request: m}, &pb.PollResponse{})
}

func (s *watchStream[R]) Recv() (*R, error) { return s.w.Recv() }

// CloseSend ends the Watch: it has no requests of its own to end.
func (s *watchStream[R]) CloseSend() error {
	s.cancel()
	return nil
}

func (s *watchStream[R]) Trailer() metadata.MD { return s.w.Trailer() }
