// The Leases and Lookups services: an Owner's or a Lookup's stream, paced
// by a limiter and served by the loop.

package manager

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/wire"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// limiter is a token bucket: rate tokens a second, up to burst.
type limiter struct {
	rate, burst, tokens float64
	last                time.Time
}

func newLimiter(rate float64) *limiter {
	return &limiter{rate: rate, burst: 2 * rate, tokens: 2 * rate, last: time.Now()}
}

func (l *limiter) allow() bool {
	now := time.Now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// Session serves one Owner's lease stream, or relays it to the leader when
// the Owner asks (client.RelayKey) and this replica follows a known leader.
func (s leasesService) Session(stream pb.Leases_SessionServer) error {
	if leader := s.relayTo(stream.Context()); leader != "" {
		return s.relay(stream, leader)
	}
	var who certs.Identity
	if s.cfg.Certs != nil {
		var err error
		if who, err = s.leaseSpeaker(stream.Context()); err != nil {
			return err
		}
	}
	names := &wire.ManagerNames{} // names said once per stream
	snd := newSender(64, func(m *pb.LeaseResponse) error {
		names.Send(m)
		return stream.Send(m)
	})
	st := &ownerStream{snd: snd}
	return serveStream(s.Server, stream.Context(), snd, func() (event, chan error, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkSize(m); err != nil {
			return nil, nil, err
		}
		names.Recv(m)
		req, err := wire.LeaseRequestFromPB(m)
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkLease(who, req); err != nil {
			return nil, nil, err
		}
		errc := make(chan error, 1)
		return leaseEvent{st: st, req: req, errc: errc, at: time.Now()}, errc, nil
	}, closeEvent{owner: st})
}

// newLookupStream is a Lookup's stream as the loop knows it, sending on
// stream (a Sync's or a Watch's) with its names said once.
func (s *Server) newLookupStream(stream grpc.ServerStream) *lookupStream {
	names := &wire.ManagerSyncNames{} // names said once per stream
	snd := newSender(64, func(o syncOut) error {
		s.pushTaken()
		m := names.Send(o.m)
		if o.shared != nil && m.Update == o.shared.pb && s.sharedCodec.Load() {
			// The update went out as it is, shared: its bytes are too.
			return stream.SendMsg(&encodedSync{m: m, u: o.shared})
		}
		return stream.SendMsg(m)
	})
	return &lookupStream{id: s.sessions.Add(1), snd: snd, names: names}
}

// Sync serves one Lookup's sync stream.
func (s lookupsService) Sync(stream pb.Lookups_SyncServer) error {
	st := s.newLookupStream(stream)
	names, snd := st.names, st.snd
	return serveStream(s.Server, stream.Context(), snd, func() (event, chan error, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkSize(m); err != nil {
			return nil, nil, err
		}
		names.Recv(m)
		req, err := wire.SyncRequestFromPB(m)
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkSync(stream.Context(), req.Namespace); err != nil {
			return nil, nil, err
		}
		errc := make(chan error, 1)
		return syncEvent{st: st, req: req, errc: errc}, errc, nil
	}, closeEvent{lookup: st})
}

// serveStream runs a bidirectional stream: this goroutine receives,
// validates and hands requests to the loop, and the loop queues what it
// sends with snd, whose goroutine writes it (see sender). A malformed
// message, or one the core refuses (an unknown namespace), ends only this
// stream, with a status that says what was wrong.
//
// ctx is the stream's own, which gRPC cancels when the handler returns:
// a context of the handler's own derived from it cost each stream about
// 450 bytes for its whole life (the context, its done channel, and the
// stream context's map of children), and nothing it would cancel outlives
// the handler.
func serveStream[T any](s *Server, ctx context.Context, snd *sender[T],
	recv func() (event, chan error, error), closed event) error {
	defer func() {
		snd.stop() // never Send after the handler returns
		s.post(context.Background(), closed)
	}()
	lim := newLimiter(s.cfg.MaxRequestRate)
	for {
		ev, errc, err := recv()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			if _, ok := status.FromError(err); ok {
				return err // the transport's own error
			}
			return grpcError(ctx, err) // a message that did not decode
		}
		if !lim.allow() {
			return s.rateError()
		}
		if err := s.call(ctx, ev, errc); err != nil {
			return err
		}
	}
}
