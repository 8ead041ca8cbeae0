// The Admin service: status, membership changes, drains and backups.

package manager

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/replica"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Status answers leasehold status.
func (s adminService) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	sayVersion(ctx)
	if req.GetReadLease() {
		return s.leaseStatus(ctx, req)
	}
	snap := s.stats.Load()
	// Namespaces are replicated: a replica serves those of its state (a
	// restored one's, say) as well as those it was configured with.
	known := s.namespaces[req.GetNamespace()] || slices.ContainsFunc(snap.Namespaces, func(n NamespaceSnapshot) bool { return n.Name == req.GetNamespace() })
	if req.GetNamespace() != "" && !known {
		return nil, status.Errorf(codes.NotFound, "leasehold: unknown namespace %q", req.GetNamespace())
	}
	out := &pb.StatusResponse{Epoch: snap.Epoch, Cluster: clusterPB(snap.Cluster)}
	for _, ns := range snap.Namespaces {
		if req.GetNamespace() != "" && ns.Name != req.GetNamespace() {
			continue
		}
		n := &pb.NamespaceStatus{Name: ns.Name, Lsn: uint64(ns.LSN), Segments: uint32(ns.Segments),
			FreeSegments: uint32(ns.FreeSegments), Lookups: uint32(ns.Lookups), Standbys: uint32(ns.StandbysPerRange)}
		for _, o := range ns.Owners {
			st := &pb.OwnerStatus{Id: o.ID, Addr: o.Addr, Incarnation: o.Incarnation,
				Member: o.Member, Ranges: uint32(o.Ranges), Share: o.Share, Load: o.Load, Capacity: o.Capacity, Draining: o.Draining,
				Zone: o.Zone, StandbyRanges: uint32(o.StandbyRanges), StandbyInSync: uint32(o.StandbyInSync)}
			for _, k := range o.HotKeys {
				st.HotKeys = append(st.HotKeys, &pb.HotKey{Key: uint64(k.Key), Rate: float64(k.Requests)})
			}
			n.Owners = append(n.Owners, st)
		}
		out.Namespaces = append(out.Namespaces, n)
	}
	return out, nil
}

// clusterPB converts a ClusterInfo. Every replica serves clients and peers
// on one address, so addr and client_addr are the same.
func clusterPB(ci ClusterInfo) *pb.Cluster {
	c := &pb.Cluster{Id: ci.ID, Role: ci.Role, Leader: ci.Leader, LeaderAddr: ci.LeaderAddr,
		Term: ci.Term, Commit: ci.Commit, Applied: ci.Applied, ReadLease: readLeasePB(ci.ReadLease), Serving: ci.Serving}
	for _, p := range ci.Peers {
		c.Peers = append(c.Peers, &pb.Peer{Id: p.ID, Addr: p.Addr, ClientAddr: p.Addr, Voter: p.Voter, ReadReplica: p.ReadReplica, Match: p.Match})
	}
	return c
}

// AddPeer adds a replica to the group (leasehold cluster add): as a
// learner, which the leader promotes to a voter once it has caught up, or,
// with ReadReplica, as a read replica, a learner it never promotes (then
// it returns once the read replica has caught up). Adding a read replica's
// ID without ReadReplica promotes it. It returns once the promotion is
// applied here; if the learner does not
// catch up within the learner timeout it is removed again and AddPeer
// fails with FailedPrecondition, saying what it saw. A change that would
// cost the group its quorum is refused with FailedPrecondition before it
// is proposed.
func (s adminService) AddPeer(ctx context.Context, req *pb.AddPeerRequest) (*pb.ClusterResponse, error) {
	if req.GetId() == 0 || req.GetAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "leasehold: a peer needs a non-zero ID and an address")
	}
	if _, _, err := net.SplitHostPort(req.GetAddr()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "leasehold: peer address %q: %v", req.GetAddr(), err)
	}
	id, addr, rr := req.GetId(), req.GetAddr(), req.GetReadReplica()
	var seen, match uint64 // learner seen in the published group; the last Match seen
	return s.changePeers(ctx, confEvent{id: id, addr: addr, readReplica: rr}, s.cfg.LearnerTimeout, func(ci ClusterInfo) (bool, error) {
		for _, p := range ci.Peers {
			if p.ID == id {
				seen++
				match = p.Match
				if rr {
					// A read replica is added once it has caught up
					// (as a voter's learner is before its promotion).
					return p.ReadReplica && p.Addr == addr && p.Match > 0 && p.Match >= ci.Commit-ci.Commit/10, nil
				}
				return p.Voter && p.Addr == addr, nil
			}
		}
		if seen > 0 {
			why := "it never answered: is it running, started with --join, at that address?"
			if match > 0 {
				why = fmt.Sprintf("it answered but had replicated only up to index %d", match)
			}
			return false, status.Errorf(codes.FailedPrecondition,
				"leasehold: replica %d at %s did not catch up with the leader's log within the learner timeout and was removed again; %s The group is as it was", id, addr, why)
		}
		return false, nil
	})
}

// RemovePeer removes a replica from the group (leasehold cluster remove).
// Removing a voter is refused with FailedPrecondition if the voters left
// would not have a quorum of replicas the leader hears from.
func (s adminService) RemovePeer(ctx context.Context, req *pb.RemovePeerRequest) (*pb.ClusterResponse, error) {
	if req.GetId() == 0 {
		return nil, status.Error(codes.InvalidArgument, "leasehold: peer ID 0")
	}
	snap := s.stats.Load()
	known := false
	for _, p := range snap.Cluster.Peers {
		known = known || p.ID == req.GetId()
	}
	// Only the leader's view is authoritative: a follower may not have
	// applied the change that added the replica yet, and refuses below as
	// a follower does, naming the leader.
	if !known && snap.Cluster.Role == "leader" {
		return nil, status.Errorf(codes.NotFound, "leasehold: no replica with ID %d in the group", req.GetId())
	}
	if len(snap.Cluster.Peers) == 1 {
		return nil, status.Error(codes.FailedPrecondition, "leasehold: cannot remove the last replica")
	}
	return s.changePeers(ctx, confEvent{id: req.GetId()}, 0, func(ci ClusterInfo) (bool, error) {
		for _, p := range ci.Peers {
			if p.ID == req.GetId() {
				return false, nil
			}
		}
		return true, nil
	})
}

// changePeers hands ev to the loop and waits until the published cluster
// satisfies done (or done fails): at most ten seconds, plus wait.
func (s *Server) changePeers(ctx context.Context, ev confEvent, wait time.Duration, done func(ClusterInfo) (bool, error)) (*pb.ClusterResponse, error) {
	errc := make(chan error, 1)
	ev.errc = errc
	if err := s.call(ctx, ev, errc); err != nil {
		return nil, err
	}
	if ev.addr != "" && wait <= 0 {
		wait = replica.DefaultLearnerTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second+wait)
	defer cancel()
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	for {
		ok, err := done(s.stats.Load().Cluster)
		if err != nil {
			return nil, err
		}
		if ok {
			return &pb.ClusterResponse{Cluster: clusterPB(s.stats.Load().Cluster)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "leasehold: the change was proposed but not applied in time (is a quorum up?); check leasehold cluster status")
		case <-s.stopped:
			return nil, status.Error(codes.Unavailable, "leasehold: manager is shutting down")
		case <-tick.C:
		}
	}
}

// Drain starts draining an Owner (leasehold drain): its ranges move to the
// others with their state. It is refused with FailedPrecondition while the
// maintenance gate is full, and by a replica that is not the leader.
func (s adminService) Drain(ctx context.Context, req *pb.DrainRequest) (*pb.DrainResponse, error) {
	ns := req.GetNamespace()
	if ns == "" {
		ns = protocol.DefaultNamespace
	}
	if req.GetOwner() == "" {
		return nil, status.Error(codes.InvalidArgument, "leasehold: drain needs an owner ID")
	}
	errc := make(chan error, 1)
	if err := s.call(ctx, drainEvent{ns: ns, owner: req.GetOwner(), errc: errc}, errc); err != nil {
		return nil, err
	}
	return &pb.DrainResponse{}, nil
}

// Backup streams a consistent copy of this replica's data directory.
func (s adminService) Backup(_ *pb.BackupRequest, stream pb.Admin_BackupServer) error {
	if s.store == nil {
		return status.Error(codes.FailedPrecondition, "leasehold: this manager keeps its state in memory (no --data-dir): nothing to back up")
	}
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.BackupChunk{Data: b}) }}
	if err := s.store.Backup(w); err != nil {
		return status.Errorf(codes.Internal, "leasehold: backup: %v", err)
	}
	return w.flush()
}

// chunkWriter cuts a stream of bytes into messages of at most 1 MiB.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), 1<<20-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == 1<<20 {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = nil
	return err
}
