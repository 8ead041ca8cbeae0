package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/protocol"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Reads served from a replica's quorum read lease (docs/protocol.md,
// "Quorum read leases"): the loop checks the lease and reads the applied
// State in one step, so the answer is the State at the index the lease
// vouches for.

// ReadLeaseInfo is a replica's quorum read lease as the loop last saw it.
type ReadLeaseInfo struct {
	Holder, Serving  bool
	Remaining        time.Duration // of the lease, on this replica's clock
	Term             uint64
	Visible, Applied uint64
	Reads, Refused   uint64
}

func readLeaseInfo(r *replica.Replica, now time.Time) ReadLeaseInfo {
	st := r.ReadLease(now)
	return ReadLeaseInfo{Holder: st.Holder, Serving: st.Serving, Remaining: max(st.Until.Sub(now), 0), Term: st.Term,
		Visible: st.Visible, Applied: st.Applied, Reads: st.Stats.Reads, Refused: st.Stats.Refused}
}

func readLeasePB(i ReadLeaseInfo) *pb.ReadLeaseInfo {
	return &pb.ReadLeaseInfo{Holder: i.Holder, Serving: i.Serving, RemainingMs: i.Remaining.Milliseconds(), Term: i.Term,
		Visible: i.Visible, Applied: i.Applied, Reads: i.Reads, Refused: i.Refused}
}

// errNoReadLease refuses a lease read.
var errNoReadLease = errors.New("leasehold: this replica holds no valid read lease now (not a holder, its lease ran out, or a write is pending)")

// leaseReadEvent runs fn in the loop on the State a lease read vouches
// for, at the log index it returns.
type leaseReadEvent struct {
	fn   func(now time.Time, st *lease.State, index uint64)
	errc chan error
}

func (l *loop) leaseRead(now time.Time, ev leaseReadEvent) {
	index, ok := l.r.LeaseRead(now)
	if !ok {
		_, addr := l.r.Leader()
		ev.errc <- fmt.Errorf("%w; leader at %q", errNoReadLease, addr)
		return
	}
	ev.fn(now, l.r.State(), index)
	ev.errc <- nil
}

// readUnderLease runs fn under the replica's read lease, or returns
// FAILED_PRECONDITION.
func (s *Server) readUnderLease(ctx context.Context, fn func(now time.Time, st *lease.State, index uint64)) error {
	errc := make(chan error, 1)
	if !s.post(ctx, leaseReadEvent{fn: fn, errc: errc}) {
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
	select {
	case err := <-errc:
		if errors.Is(err, errNoReadLease) {
			return status.Error(codes.FailedPrecondition, err.Error())
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped:
		return status.Error(codes.Unavailable, "leasehold: manager is shutting down")
	}
}

// Holder answers who holds a key, from the replica's read lease.
func (s adminService) Holder(ctx context.Context, req *pb.HolderRequest) (*pb.HolderResponse, error) {
	ns := req.GetNamespace()
	if ns == "" {
		ns = protocol.DefaultNamespace
	}
	if err := s.checkSync(ctx, ns); err != nil {
		return nil, err
	}
	var out *pb.HolderResponse
	known := true
	err := s.readUnderLease(ctx, func(_ time.Time, st *lease.State, index uint64) {
		t := st.Table(ns)
		if t == nil {
			known = false
			return
		}
		seg := t.At(keyspace.Key(req.GetKey()))
		out = &pb.HolderResponse{Owner: seg.Entry.Owner, Addr: seg.Entry.Addr, Lgn: uint64(seg.Entry.LGN),
			Start: uint64(seg.Range.Start), End: uint64(seg.Range.End), Lsn: uint64(t.LSN()), Index: index, Replica: s.cfg.ID}
	})
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, status.Errorf(codes.NotFound, "leasehold: unknown namespace %q", ns)
	}
	return out, nil
}

// leaseStatus answers Status with read_lease set: the namespaces of the
// State the lease vouches for, with the owners the State records.
func (s adminService) leaseStatus(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	out := &pb.StatusResponse{}
	known := req.GetNamespace() == ""
	err := s.readUnderLease(ctx, func(now time.Time, st *lease.State, _ uint64) {
		out.Epoch = st.Epoch()
		for _, name := range st.Namespaces() {
			if req.GetNamespace() != "" && name != req.GetNamespace() {
				continue
			}
			known = true
			t := st.Table(name)
			n := &pb.NamespaceStatus{Name: name, Lsn: uint64(t.LSN()), Segments: uint32(t.Len())}
			t.Each(func(seg leasetable.Segment) bool {
				if seg.Entry.Owner == "" {
					n.FreeSegments++
				}
				return true
			})
			for _, o := range ownerInfos(st, name) {
				n.Owners = append(n.Owners, &pb.OwnerStatus{Id: o.ID, Addr: o.Addr, Incarnation: o.Incarnation,
					Member: o.Member, Ranges: uint32(o.Ranges), Share: o.Share})
			}
			out.Namespaces = append(out.Namespaces, n)
		}
	})
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, status.Errorf(codes.NotFound, "leasehold: unknown namespace %q", req.GetNamespace())
	}
	snap := s.stats.Load()
	out.Cluster = clusterPB(snap.Cluster)
	return out, nil
}
