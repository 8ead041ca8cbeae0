package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// OpenWatch opens a Lookup's Watch on cc and returns it as one sync stream
// (docs/protocol.md, "Watch and Poll"): Recv reads the Watch, decoded with
// opts' codec, and Send polls, naming the Watch by the number its first
// message carries (number reads it). A Watch costs the Manager half the
// memory of a Sync stream per idle Lookup. wait is the answer wait: it
// bounds the first message and each Poll, and a replica that does not
// answer within it is left for the next, as one that leaves a poll
// unanswered is. A replica that predates Watch refuses it with
// codes.Unimplemented: the caller then opens Sync. So must it where its
// Polls cannot reach their Watch (a proxy that spreads a client's calls
// over connections of its own, or over replicas): the stream's first Poll
// then finds no Watch, and OpenWatch calls unreachable (if not nil) before
// the stream fails.
func OpenWatch[R any](ctx context.Context, cc grpc.ClientConnInterface, wait func() time.Duration,
	number func(*R) uint64, unreachable func(), opts ...grpc.CallOption) (Stream[pb.SyncRequest, R], error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := openWatch[R](ctx, cc, opts)
	var first *R
	if err == nil {
		t := time.AfterFunc(wait(), cancel)
		first, err = w.Recv()
		if !t.Stop() {
			err = fmt.Errorf("%w: no first message on the Watch within %s", errNoAnswer, wait())
		}
	}
	if err == nil && number(first) == 0 {
		err = errors.New("the Watch's first message names no Watch")
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &watchStream[R]{cc: cc, w: w, id: number(first), wait: wait, cancel: cancel, unreachable: unreachable}, nil
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
	cc          grpc.ClientConnInterface
	w           *grpc.GenericClientStream[pb.WatchRequest, R]
	id          uint64
	wait        func() time.Duration
	cancel      context.CancelFunc
	unreachable func()
	polled      bool // a Poll has been taken on this Watch
}

// Send polls with m and returns once the replica has taken it; the answer
// comes on the Watch. Any Poll that fails ends the stream, so that no
// request is lost without its stream ending, as on a gRPC stream: one the
// replica refuses, one that goes unanswered within the answer wait
// (errNoAnswer, as a poll left unanswered), and one cut short by the
// Watch's own end, for which it returns io.EOF so that the stream's end
// is read from the Watch, with its status and trailer, as for Sync.
func (s *watchStream[R]) Send(m *pb.SyncRequest) error {
	wait := s.wait()
	ctx, cancel := context.WithTimeout(s.w.Context(), wait)
	defer cancel()
	err := s.cc.Invoke(ctx, pb.Lookups_Poll_FullMethodName, &pb.PollRequest{Watch: s.id, Request: m}, &pb.PollResponse{})
	switch {
	case err == nil:
		s.polled = true
	case s.w.Context().Err() != nil:
		return io.EOF
	case ctx.Err() != nil:
		return fmt.Errorf("%w to a Poll within %s", errNoAnswer, wait)
	case !s.polled && status.Code(err) == codes.NotFound && s.unreachable != nil:
		// NotFound: no such Watch on this connection (a Watch that has
		// ended is Aborted), so the Poll came on another connection.
		s.unreachable()
	}
	return err
}

func (s *watchStream[R]) Recv() (*R, error) { return s.w.Recv() }

// CloseSend ends the Watch: it has no requests of its own to end.
func (s *watchStream[R]) CloseSend() error {
	s.cancel()
	return nil
}

func (s *watchStream[R]) Trailer() metadata.MD { return s.w.Trailer() }
