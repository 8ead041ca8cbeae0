package manager

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// ownerOp is what an operator asks of an Owner's record: a drain, its
// cancel, or forgetting it.
type ownerOp uint8

const (
	opDrain ownerOp = iota
	opUndrain
	opForget
)

// ownerAdmin carries out an operator's drainEvent on the leader's loop.
func (l *loop) ownerAdmin(now time.Time, ev drainEvent) error {
	switch ev.op {
	case opUndrain:
		return l.r.Undrain(now, ev.ns, ev.owner)
	case opForget:
		return l.r.Forget(now, ev.ns, ev.owner)
	}
	return l.r.Drain(now, ev.ns, ev.owner)
}

// ownerRequest checks an operator's request about an Owner and returns its
// namespace (the default one when none is named).
func ownerRequest(what, ns, owner string) (string, error) {
	if owner == "" {
		return "", status.Errorf(codes.InvalidArgument, "leasehold: %s needs an owner ID", what)
	}
	if ns == "" {
		ns = protocol.DefaultNamespace
	}
	return ns, nil
}

// Undrain cancels an Owner's drain (leasehold drain --cancel): it is given
// ranges again and no longer counts at the maintenance gate. Refused by a
// replica that is not the leader; NOT_FOUND for an Owner not recorded.
func (s adminService) Undrain(ctx context.Context, req *pb.DrainRequest) (*pb.DrainResponse, error) {
	ns, err := ownerRequest("drain --cancel", req.GetNamespace(), req.GetOwner())
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	if err := s.call(ctx, drainEvent{ns: ns, owner: req.GetOwner(), op: opUndrain, errc: errc}, errc); err != nil {
		return nil, err
	}
	return &pb.DrainResponse{}, nil
}

// Forget removes an Owner's record (leasehold forget): FAILED_PRECONDITION
// while it is a member or is owed anything, NOT_FOUND when not recorded.
func (s adminService) Forget(ctx context.Context, req *pb.ForgetRequest) (*pb.ForgetResponse, error) {
	ns, err := ownerRequest("forget", req.GetNamespace(), req.GetOwner())
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	if err := s.call(ctx, drainEvent{ns: ns, owner: req.GetOwner(), op: opForget, errc: errc}, errc); err != nil {
		return nil, err
	}
	return &pb.ForgetResponse{}, nil
}
