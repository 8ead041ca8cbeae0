// Package clienttest runs a fake replicated Manager on 127.0.0.1 for the
// tests of the clients that follow its leader (the owner and lookup
// runtimes, the CLI). Each member is a real gRPC server on its own port with
// the Leases, Lookups and Admin services. The member the test makes leader
// serves; the others refuse every stream with client.NotLeader naming the
// leader, as a follower of the real Manager does. The state the members
// answer from is shared, as if replicated: one lease on the whole key space
// (granted to the first Owner that asks) and one lease-table entry, with
// sequence numbers that grow across leaders.
package clienttest

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// The timings the members send, which Owners and Lookups adopt: renewals
// and polls every 100 ms, and leases long enough that a failover in a slow
// test never lets one lapse.
const (
	OwnerLease  = 10 * time.Second
	Renew       = 100 * time.Millisecond
	Sync        = 100 * time.Millisecond
	SyncTimeout = 10 * time.Second
)

// Namespace is the one namespace the members know.
const Namespace = "default"

// Group is a fake replicated Manager.
type Group struct {
	t       testing.TB
	members []*Member

	mu      sync.Mutex
	leader  int            // the serving member; -1: none
	refer   map[int]string // members told to name another leader
	seq     uint64         // of the last LeaseResponse, across leaders
	holder  string         // the Owner holding the lease on the key space
	leaseNo keyspace.LGN   // its LGN
	lsn     keyspace.LSN   // the lease table's LSN
	entry   leasetable.Entry
	tableNo keyspace.LGN // the last LGN put in the table

	listed map[uint64][]protocol.Lease // the leases of each LeaseResponse, by Seq
}

// Epoch is the fake Manager's epoch.
const Epoch = 1

// Start runs n members, none of them leader yet, and stops them when the
// test ends.
func Start(t testing.TB, n int) *Group {
	t.Helper()
	g := &Group{t: t, leader: -1, refer: map[int]string{}, lsn: 1}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := &Member{g: g, i: i, Addr: lis.Addr().String(), down: make(chan struct{})}
		m.serve(lis)
		g.members = append(g.members, m)
	}
	t.Cleanup(func() {
		for _, m := range g.members {
			m.Stop()
		}
	})
	return g
}

// Addrs returns the members' addresses.
func (g *Group) Addrs() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.Addr)
	}
	return out
}

// List returns the members' addresses as a comma-separated list.
func (g *Group) List() string { return strings.Join(g.Addrs(), ",") }

// Member returns member i.
func (g *Group) Member(i int) *Member { return g.members[i] }

// Lead makes member i the leader (-1: none; the others then refuse with
// "leader unknown") and forgets every Refer. The old leader ends its
// streams with a NotLeader refusal naming the new one.
func (g *Group) Lead(i int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leader >= 0 && g.leader != i {
		close(g.members[g.leader].down)
		g.members[g.leader].down = make(chan struct{})
	}
	g.leader = i
	clear(g.refer)
}

// Crash stops member i as a crash would and makes member next the leader
// at the same instant, as if elected before any client noticed: i's
// streams end with its connections, without a hint.
func (g *Group) Crash(i, next int) {
	g.mu.Lock()
	g.leader = next
	clear(g.refer)
	g.mu.Unlock()
	g.members[i].Stop()
}

// Refer makes member i refuse every stream naming leader (which need not be
// a member, and may be ""), until the next Lead. If i leads, it steps down.
func (g *Group) Refer(i int, leader string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refer[i] = leader
	if g.leader == i {
		close(g.members[i].down)
		g.members[i].down = make(chan struct{})
	}
}

// SetRoute changes the lease table: the whole key space is held by owner
// at addr under a new LGN.
func (g *Group) SetRoute(owner, addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tableNo++
	g.lsn++
	g.entry = leasetable.Entry{Owner: owner, Addr: addr, LGN: g.tableNo}
}

// role says whether member i serves, and if not whom it names; when it
// serves, down is closed when it stops.
func (g *Group) role(i int) (serves bool, leader string, down <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l, ok := g.refer[i]; ok {
		return false, l, nil
	}
	if g.leader == i {
		return true, "", g.members[i].down
	}
	if g.leader >= 0 {
		return false, g.members[g.leader].Addr, nil
	}
	return false, "", nil
}

func (g *Group) lease(req *protocol.LeaseRequest) *protocol.LeaseResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	resp := &protocol.LeaseResponse{
		Namespace: req.Namespace, Owner: req.Owner, Incarnation: req.Incarnation,
		Epoch: Epoch, Seq: g.seq, AckSeq: req.Seq, OwnerLease: OwnerLease, Renew: Renew,
	}
	if req.Leaving {
		if g.holder == req.Owner {
			g.holder = ""
		}
		return resp
	}
	if g.holder == "" {
		g.holder = req.Owner
		g.leaseNo++
	}
	if g.holder == req.Owner {
		heldSet := req.Held
		if req.HeldAsAcked && req.AckEpoch == Epoch {
			heldSet = g.listed[req.AckSeq] // what the acknowledged message listed
		}
		held := slices.ContainsFunc(heldSet, func(l protocol.Lease) bool {
			return l.Range == keyspace.Full && l.LGN == g.leaseNo
		})
		resp.Leases = []protocol.Lease{{Range: keyspace.Full, LGN: g.leaseNo, Grant: !held}}
	}
	if g.listed == nil {
		g.listed = map[uint64][]protocol.Lease{}
	}
	g.listed[resp.Seq] = resp.Leases
	return resp
}

func (g *Group) sync(req *protocol.SyncRequest) *protocol.SyncResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := &protocol.SyncResponse{Namespace: req.Namespace, ID: req.ID, Epoch: Epoch, Sync: Sync, SyncTimeout: SyncTimeout}
	if req.Epoch == Epoch && req.LSN == g.lsn {
		resp.Update = leasetable.Update{From: g.lsn, To: g.lsn}
	} else {
		resp.Update = leasetable.Update{From: req.LSN, To: g.lsn, Snapshot: true,
			Segments: []leasetable.Segment{{Range: keyspace.Full, Entry: g.entry}}}
	}
	return resp
}

// Member is one replica of a Group.
type Member struct {
	pb.UnimplementedLeasesServer
	pb.UnimplementedLookupsServer
	pb.UnimplementedAdminServer

	g    *Group
	i    int
	Addr string
	down chan struct{} // closed when it stops leading; guarded by g.mu

	sessions, syncs, answered, refused, relayed atomic.Int64
	muted                                       atomic.Bool

	srvMu  sync.Mutex
	srv    *grpc.Server
	served chan struct{}
}

func (m *Member) serve(lis net.Listener) {
	srv := grpc.NewServer()
	pb.RegisterLeasesServer(srv, m)
	pb.RegisterLookupsServer(srv, m)
	pb.RegisterAdminServer(srv, m)
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	m.srvMu.Lock()
	m.srv, m.served = srv, served
	m.srvMu.Unlock()
}

// Stop stops the member as a crash would: its connections close and its
// port refuses connections. Its role in the group stays as it was.
func (m *Member) Stop() {
	m.srvMu.Lock()
	srv, served := m.srv, m.served
	m.srv = nil
	m.srvMu.Unlock()
	if srv != nil {
		srv.Stop()
		<-served
	}
}

// Restart serves the member again on its address.
func (m *Member) Restart() {
	m.g.t.Helper()
	var lis net.Listener
	var err error
	// The port was just closed; another process may hold it for a moment.
	for try := 0; try < 50; try++ {
		if lis, err = net.Listen("tcp", m.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		m.g.t.Fatalf("restarting the member at %s: %v", m.Addr, err)
	}
	m.serve(lis)
}

// Mute makes the member stall as a stopped process does, or a proxy in
// front of it that stops forwarding: its connections stay open, and it
// reads what arrives on its streams, new and old, and answers nothing,
// not even a refusal, until Mute(false). The other members still name it
// leader if it leads, and still relay to it (it is cut off from the
// clients, not from them).
func (m *Member) Mute(on bool) { m.muted.Store(on) }

// Sessions is the number of lease streams the member served.
func (m *Member) Sessions() int64 { return m.sessions.Load() }

// Syncs is the number of sync streams the member served.
func (m *Member) Syncs() int64 { return m.syncs.Load() }

// Answered is the number of messages the member answered, on either kind
// of stream.
func (m *Member) Answered() int64 { return m.answered.Load() }

// Refused is the number of streams the member refused with NotLeader.
func (m *Member) Refused() int64 { return m.refused.Load() }

// Relayed is the number of lease streams the member relayed to the leader.
func (m *Member) Relayed() int64 { return m.relayed.Load() }

// Session serves an Owner's lease stream. A follower asked to relay
// (client.RelayKey) serves it as the leader would, the state being shared:
// the relay of the real Manager, whose leader answers through it.
func (m *Member) Session(ss pb.Leases_SessionServer) error {
	if m.muted.Load() {
		return stall(ss)
	}
	serves, leader, down := m.g.role(m.i)
	md, _ := metadata.FromIncomingContext(ss.Context())
	if !serves && leader != "" && len(md.Get(client.RelayKey)) > 0 {
		m.relayed.Add(1)
		serves, down = true, nil
	}
	if !serves {
		m.refused.Add(1)
		return client.NotLeader(ss.Context(), leader)
	}
	m.sessions.Add(1)
	return answer(m, ss, down, func(req *pb.LeaseRequest) (*pb.LeaseResponse, error) {
		r, err := wire.LeaseRequestFromPB(req)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return wire.LeaseResponseToPB(m.g.lease(r)), nil
	})
}

// Sync serves a Lookup's sync stream.
func (m *Member) Sync(ss pb.Lookups_SyncServer) error {
	if m.muted.Load() {
		return stall(ss)
	}
	serves, leader, down := m.g.role(m.i)
	if !serves {
		m.refused.Add(1)
		return client.NotLeader(ss.Context(), leader)
	}
	m.syncs.Add(1)
	return answer(m, ss, down, func(req *pb.SyncRequest) (*pb.SyncResponse, error) {
		r, err := wire.SyncRequestFromPB(req)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return wire.SyncResponseToPB(m.g.sync(r)), nil
	})
}

// Status answers on every member, leader or not, naming the leader.
func (m *Member) Status(_ context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if ns := req.GetNamespace(); ns != "" && ns != Namespace {
		return nil, status.Errorf(codes.NotFound, "leasehold: unknown namespace %q", ns)
	}
	serves, leader, _ := m.g.role(m.i)
	role := "follower"
	if serves {
		role, leader = "leader", m.Addr
	}
	m.g.mu.Lock()
	lsn, free := uint64(m.g.lsn), uint32(0)
	if m.g.entry.Free() {
		free = 1
	}
	m.g.mu.Unlock()
	return &pb.StatusResponse{
		Epoch:      Epoch,
		Namespaces: []*pb.NamespaceStatus{{Name: Namespace, Lsn: lsn, Segments: 1, FreeSegments: free}},
		Cluster:    &pb.Cluster{Id: uint64(m.i + 1), Role: role, LeaderAddr: leader},
	}, nil
}

// answer answers each request on ss until the client ends the stream or the
// member stops leading, which ends it with a NotLeader refusal.
func answer[Req, Resp any](m *Member, ss grpc.BidiStreamingServer[Req, Resp], down <-chan struct{},
	fn func(*Req) (*Resp, error)) error {
	ctx := ss.Context()
	reqs := make(chan *Req)
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := ss.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-down:
			if m.muted.Load() {
				down = nil // stalled: it says nothing
				continue
			}
			_, leader, _ := m.g.role(m.i)
			return client.NotLeader(ctx, leader)
		case r := <-reqs:
			if m.muted.Load() {
				continue
			}
			// A member that has stepped down answers nothing more, though
			// select may pick a request that came with the news.
			select {
			case <-down:
				_, leader, _ := m.g.role(m.i)
				return client.NotLeader(ctx, leader)
			default:
			}
			resp, err := fn(r)
			if err != nil {
				return err
			}
			m.answered.Add(1) // before the client can see the answer, so a test that got it counts it
			if err := ss.Send(resp); err != nil {
				return err
			}
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stall reads a stream and answers nothing until the client ends it.
func stall[Req, Resp any](ss grpc.BidiStreamingServer[Req, Resp]) error {
	for {
		if _, err := ss.Recv(); err != nil {
			return nil
		}
	}
}
