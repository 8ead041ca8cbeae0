package gateway

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/keyspace"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// GatewayService is the path prefix of the gateway's own gRPC service
// (leasehold.v1.Gateway: Losses and Covers), served on the gateway's port
// next to the calls it proxies; no route may take it.
const GatewayService = "/" + "leasehold.v1.Gateway" + "/"

// lossService serves leasehold.v1.Gateway: the loss notifications of
// /v1/losses and /v1/covers, for gRPC clients.
type lossService struct {
	pb.UnimplementedGatewayServer
	g *Gateway
}

func newGRPCServer(g *Gateway) *grpc.Server {
	s := grpc.NewServer()
	pb.RegisterGatewayServer(s, &lossService{g: g})
	return s
}

// Losses streams the loss notifications after req.After (from now on if 0)
// that pass its filters, as /v1/losses does.
func (s *lossService) Losses(req *pb.LossesRequest, st grpc.ServerStreamingServer[pb.LossNotification]) error {
	g := s.g
	if len(req.GetKey()) > g.cfg.MaxKeyBytes {
		return status.Errorf(codes.InvalidArgument, "key of %d bytes: the limit is %d", len(req.GetKey()), g.cfg.MaxKeyBytes)
	}
	after := req.GetAfter()
	if after == 0 {
		after = g.losses.last() // a new subscriber hears of the losses from now on
	}
	ns, key := req.GetNamespace(), req.GetKey()
	k := keyspace.KeyOf(key)
	// Headers now, so the client knows it is subscribed.
	if err := st.SendHeader(nil); err != nil {
		return err
	}
	err := g.follow(st.Context(), after,
		func(e *LossEvent) bool { return (ns == "" || e.Namespace == ns) && (key == "" || e.Covers(k)) },
		func(e *LossEvent) error { return st.Send(lossToPB(e)) },
		func() error { return nil },
		func() error { return nil }) // HTTP/2 keeps the stream open with its own pings
	if err != nil && st.Context().Err() != nil {
		return status.FromContextError(st.Context().Err()).Err()
	}
	if err == nil {
		return status.Error(codes.Unavailable, "the gateway is stopping: resubscribe elsewhere with after set to the last id")
	}
	return err
}

// Covers says whether loss req.Id covers req.Key, as /v1/covers does.
func (s *lossService) Covers(_ context.Context, req *pb.CoversRequest) (*pb.CoversResponse, error) {
	g := s.g
	switch key := req.GetKey(); {
	case key == "":
		return nil, status.Error(codes.InvalidArgument, "no key")
	case len(key) > g.cfg.MaxKeyBytes:
		return nil, status.Errorf(codes.InvalidArgument, "key of %d bytes: the limit is %d", len(key), g.cfg.MaxKeyBytes)
	}
	e, ok := g.losses.get(req.GetId())
	if !ok {
		return nil, status.Error(codes.NotFound, fmt.Sprintf("loss %d is not kept (the gateway keeps the last %d)", req.GetId(), g.losses.keep))
	}
	k := keyspace.KeyOf(req.GetKey())
	return &pb.CoversResponse{Covers: e.Covers(k), Hash: uint64(k)}, nil
}

func lossToPB(e *LossEvent) *pb.LossNotification {
	n := &pb.LossNotification{Id: e.ID, Namespace: e.Namespace, All: e.All, AtUnixNano: e.At.UnixNano()}
	for _, r := range e.ranges {
		n.Ranges = append(n.Ranges, &pb.Range{Start: uint64(r.Start), End: uint64(r.End)})
	}
	for _, o := range e.owners {
		lo := &pb.LostOwner{Owner: o.Owner, Addr: o.Addr}
		for _, r := range o.Ranges {
			lo.Ranges = append(lo.Ranges, &pb.Range{Start: uint64(r.Start), End: uint64(r.End)})
		}
		n.Owners = append(n.Owners, lo)
	}
	return n
}
