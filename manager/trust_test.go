package manager_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// These tests attack a Manager that serves mutual TLS, over real TCP on
// 127.0.0.1 with real certificates, one attack each, and check that each
// is refused with the right code and leaves the lease table as it was.

// trustGroup is a CA, its certificates directory, and a Manager serving
// with replica 1's certificate, whose namespaces are default and other,
// with Owner "a" (of namespace default) holding every range of default.
type trustGroup struct {
	dir   string
	ca    *certs.CA
	srv   *manager.Server
	addr  string
	owner *owner.Owner
}

func startTrustGroup(t *testing.T) *trustGroup {
	t.Helper()
	g := &trustGroup{dir: t.TempDir()}
	var err error
	if g.ca, err = certs.CreateCA(g.dir, "", 0, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []certs.Identity{
		{Role: certs.Replica, Name: "1"},
		{Role: certs.Owner, Name: "a", Namespaces: []string{"default"}},
	} {
		if _, err := certs.Create(g.dir, g.ca, id, []string{"127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	src, err := certs.Open(g.dir, certs.Replica, "1")
	if err != nil {
		t.Fatal(err)
	}
	tm := protocol.Fast()
	g.srv, err = manager.NewServer(manager.Config{Timing: tm, Namespaces: []string{"other"},
		Certs: src, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	g.owner, err = owner.New(context.Background(), owner.Config{Connection: leasehold.Connection{Manager: g.addr, Timing: tm, CertsDir: g.dir}, ID: "a", Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.owner.Close(context.Background()) })
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := g.owner.CheckLeaseNow(keyspace.KeyOf("k")); ok && g.table().free == 1 { // other's one range
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("owner a holds no lease after 15s over TLS: %+v", g.table())
		}
	}
	return g
}

// tableView is what the attacks must not change.
type tableView struct {
	lsn    map[string]keyspace.LSN
	owners string
	free   int
}

func (g *trustGroup) table() tableView {
	v := tableView{lsn: map[string]keyspace.LSN{}}
	var owners []string
	for _, ns := range g.srv.Snapshot().Namespaces {
		v.lsn[ns.Name] = ns.LSN
		v.free += ns.FreeSegments
		for _, o := range ns.Owners {
			owners = append(owners, fmt.Sprintf("%s/%s@%s#%d", ns.Name, o.ID, o.Addr, o.Incarnation))
		}
	}
	slices.Sort(owners)
	v.owners = strings.Join(owners, ",")
	return v
}

// unchanged checks, after long enough for a change to be made, that the
// table is as it was and Owner a still holds its lease.
func (g *trustGroup) unchanged(t *testing.T, before tableView) {
	t.Helper()
	time.Sleep(2 * protocol.Fast().Renew)
	after := g.table()
	if after.owners != before.owners || !maps(after.lsn, before.lsn) || after.free != before.free {
		t.Errorf("the table changed: before %+v, after %+v", before, after)
	}
	if _, ok := g.owner.CheckLeaseNow(keyspace.KeyOf("k")); !ok {
		t.Error("owner a lost its lease")
	}
}

func maps(a, b map[string]keyspace.LSN) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// issue makes a certificate for id signed by ca (valid from now-age for
// lifetime) and returns it as a client's TLS certificate.
func issue(t *testing.T, ca *certs.CA, id certs.Identity, at time.Time, lifetime time.Duration) tls.Certificate {
	t.Helper()
	c, k, err := ca.Issue(id, []string{"127.0.0.1"}, at, lifetime)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// dialAs connects to addr presenting cert (none if nil). The attacker does
// not check the Manager's certificate: the Manager must not rely on it.
func dialAs(t *testing.T, addr string, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// leaseAttempt sends one lease message on a new stream and returns how the
// Manager ended the stream (nil if it answered).
func leaseAttempt(conn *grpc.ClientConn, req *pb.LeaseRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := pb.NewLeasesClient(conn).Session(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = st.Recv()
	return err
}

// refused checks that err is a refusal with code whose message says each
// of says.
func refused(t *testing.T, what string, err error, code codes.Code, says ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("%s: %q does not say %q", what, st.Message(), s)
		}
	}
}

func register(id, ns string) *pb.LeaseRequest {
	return &pb.LeaseRequest{Namespace: ns, Owner: id, Addr: "127.0.0.1:2", Incarnation: 1, Seq: 1}
}

func TestTrustAttacks(t *testing.T) {
	testwait.Side(t)
	g := startTrustGroup(t)
	owner := func(name string, ns ...string) certs.Identity {
		return certs.Identity{Role: certs.Owner, Name: name, Namespaces: ns}
	}
	now := time.Now()

	// A caller without a valid certificate is refused at the TLS
	// handshake: its connection ends there (Unavailable, the TLS alert in
	// the message when the client reads it before its write fails), and
	// the Manager counts it under role none, reason certificate.
	t.Run("no certificate", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		n := handshakeRefusals(t, g.srv)
		conn := dialAs(t, g.addr, nil)
		refused(t, "register", leaseAttempt(conn, register("a", "default")), codes.Unavailable)
		_, err := pb.NewAdminClient(conn).Status(context.Background(), &pb.StatusRequest{})
		refused(t, "status", err, codes.Unavailable)
		waitRefusedAtHandshake(t, g.srv, n)
		g.unchanged(t, before)
	})

	t.Run("another CA", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		other, err := certs.NewCA("another CA", now, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := issue(t, other, owner("a", "default"), now, time.Hour)
		n := handshakeRefusals(t, g.srv)
		refused(t, "register", leaseAttempt(dialAs(t, g.addr, &c), register("a", "default")), codes.Unavailable)
		waitRefusedAtHandshake(t, g.srv, n)
		g.unchanged(t, before)
	})

	t.Run("owner registering another ID", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		c := issue(t, g.ca, owner("mallory", "default"), now, time.Hour)
		conn := dialAs(t, g.addr, &c)
		// The live Owner's ID with a later incarnation: the takeover
		// of its address that the incarnation rule would allow.
		req := register("a", "default")
		req.Incarnation = uint64(time.Now().Add(time.Hour).UnixNano())
		refused(t, "register as a", leaseAttempt(conn, req), codes.PermissionDenied, `owner "mallory"`, `Owner "a"`, `namespace "default"`)
		g.unchanged(t, before)
	})

	t.Run("owner of one namespace in another", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		c := issue(t, g.ca, owner("b", "default"), now, time.Hour)
		refused(t, "register in other", leaseAttempt(dialAs(t, g.addr, &c), register("b", "other")), codes.PermissionDenied,
			`owner "b" (namespaces default)`, `namespace "other"`)
		g.unchanged(t, before)
	})

	t.Run("lookup calling operator methods", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		c := issue(t, g.ca, certs.Identity{Role: certs.Lookup, Name: "frontend"}, now, time.Hour)
		admin := pb.NewAdminClient(dialAs(t, g.addr, &c))
		ctx := context.Background()
		if _, err := admin.Status(ctx, &pb.StatusRequest{}); err != nil {
			t.Fatalf("a lookup may read the status: %v", err)
		}
		_, err := admin.Drain(ctx, &pb.DrainRequest{Namespace: "default", Owner: "a"})
		refused(t, "drain", err, codes.PermissionDenied, `lookup "frontend"`, "Drain", "operator")
		_, err = admin.AddPeer(ctx, &pb.AddPeerRequest{Id: 7, Addr: "127.0.0.1:9"})
		refused(t, "cluster add", err, codes.PermissionDenied, `lookup "frontend"`, "AddPeer", "operator")
		_, err = admin.RemovePeer(ctx, &pb.RemovePeerRequest{Id: 1})
		refused(t, "cluster remove", err, codes.PermissionDenied, "RemovePeer")
		bs, err := admin.Backup(ctx, &pb.BackupRequest{})
		if err == nil {
			_, err = bs.Recv()
		}
		refused(t, "backup", err, codes.PermissionDenied, `lookup "frontend"`, "Backup", "operator")
		g.unchanged(t, before)
		if cs := g.srv.Snapshot().Cluster; len(cs.Peers) != 1 {
			t.Errorf("the group changed: %+v", cs.Peers)
		}

		// The operator's certificate does what the lookup's may not.
		oc := issue(t, g.ca, certs.Identity{Role: certs.Operator, Name: "alice"}, now, time.Hour)
		bs, err = pb.NewAdminClient(dialAs(t, g.addr, &oc)).Backup(ctx, &pb.BackupRequest{})
		if err == nil {
			_, err = bs.Recv()
		}
		if err != nil {
			t.Errorf("an operator's backup: %v", err)
		}
	})

	t.Run("expired certificate", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		c := issue(t, g.ca, owner("a", "default"), now.Add(-48*time.Hour), time.Hour)
		n := handshakeRefusals(t, g.srv)
		refused(t, "register", leaseAttempt(dialAs(t, g.addr, &c), register("a", "default")), codes.Unavailable)
		waitRefusedAtHandshake(t, g.srv, n)
		g.unchanged(t, before)
	})

	t.Run("forged Leaving", func(t *testing.T) {
		testwait.Side(t)
		before := g.table()
		// Everything a forger can read from the status.
		var inc uint64
		for _, ns := range g.srv.Snapshot().Namespaces {
			for _, o := range ns.Owners {
				if o.ID == "a" {
					inc = o.Incarnation
				}
			}
		}
		c := issue(t, g.ca, owner("mallory", "default"), now, time.Hour)
		req := register("a", "default")
		req.Incarnation, req.Leaving = inc, true
		refused(t, "Leaving for a", leaseAttempt(dialAs(t, g.addr, &c), req), codes.PermissionDenied, `owner "mallory"`, `Owner "a"`)
		g.unchanged(t, before)
	})

	// The attacks run side by side (testwait.Side), each waiting two renewals for a change
	// that must not come; the count is read once they have all ended.
	t.Cleanup(func() {
		if n := refusedCount(t, g.srv); n < 10 {
			t.Errorf("leasehold_refused_total is %v after every attack above", n)
		}
	})
}

// waitRefusedAtHandshake waits until more than n refusals at the handshake
// are counted: the client may read the TLS alert before the server counts.
func waitRefusedAtHandshake(t *testing.T, srv *manager.Server, n float64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); handshakeRefusals(t, srv) <= n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal at the handshake counted in leasehold_refused_total{role=none,reason=certificate} (%v)", n)
		}
	}
}

// handshakeRefusals reads leasehold_refused_total{role="none",reason="certificate"}.
func handshakeRefusals(t *testing.T, srv *manager.Server) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["role"] == "none" && labels["reason"] == "certificate" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func refusedCount(t *testing.T, srv *manager.Server) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "leasehold_refused_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestTrustRaftTransport: replica 1 of a group of two (replica 2 never
// runs, so 1 never leads and follows any higher term it accepts). A
// heartbeat at a higher term moves its term only when it comes from
// replica 2's certificate: one from the certificate of replica 99, no
// member, is dropped whether it names 99 or 2 as its sender (the latter
// ends the stream with PermissionDenied), and an Owner's certificate may
// not open the Raft stream at all.
func TestTrustRaftTransport(t *testing.T) {
	testwait.Side(t)
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(dir, ca, certs.Identity{Role: certs.Replica, Name: "1"}, []string{"127.0.0.1"}, 0); err != nil {
		t.Fatal(err)
	}
	src, err := certs.Open(dir, certs.Replica, "1")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	srv, err := manager.NewServer(manager.Config{Timing: protocol.Fast(), Certs: src,
		Peers: []manager.Peer{{ID: 1, Addr: lis.Addr().String()}, {ID: 2, Addr: closedAddr}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	time.Sleep(300 * time.Millisecond)

	now := time.Now()
	send := func(cert tls.Certificate, from, term uint64) error {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		st, err := pb.NewRaftClient(dialAs(t, lis.Addr().String(), &cert)).Send(sctx)
		if err != nil {
			return err
		}
		m := raftpb.Message{Type: raftpb.MsgHeartbeat, From: from, To: 1, Term: term}
		b, _ := m.Marshal()
		if err := st.Send(&pb.RaftMessage{Message: b}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		time.Sleep(300 * time.Millisecond) // delivered, or refused
		_, err = st.CloseAndRecv()
		return err
	}
	term := func() uint64 { return srv.Snapshot().Cluster.Term }

	stranger := issue(t, ca, certs.Identity{Role: certs.Replica, Name: "99"}, now, time.Hour)
	before := term()
	if err := send(stranger, 99, before+100); err != nil {
		t.Fatalf("a non-member's stream: %v", err)
	}
	if got := term(); got != before {
		t.Errorf("a heartbeat from non-member 99 at term %d moved replica 1 to term %d (was %d)", before+100, got, before)
	}
	refused(t, "99 posing as 2", send(stranger, 2, before+100), codes.PermissionDenied, "replica 2", "replica 99", "wrong identity")
	if got := term(); got != before {
		t.Errorf("a heartbeat that 99 signed as 2 moved replica 1 to term %d (was %d)", got, before)
	}
	o := issue(t, ca, certs.Identity{Role: certs.Owner, Name: "a", Namespaces: []string{"default"}}, now, time.Hour)
	refused(t, "an owner on the Raft stream", send(o, 2, before+100), codes.PermissionDenied, `owner "a"`)
	if got := term(); got != before {
		t.Errorf("an owner's heartbeat moved replica 1 to term %d (was %d)", got, before)
	}

	// The control: the same heartbeat from replica 2's own certificate is
	// heard, so the refusals above are the certificates'.
	member := issue(t, ca, certs.Identity{Role: certs.Replica, Name: "2"}, now, time.Hour)
	if err := send(member, 2, before+100); err != nil {
		t.Fatalf("replica 2's stream: %v", err)
	}
	if got := term(); got != before+100 {
		t.Errorf("replica 2's heartbeat at term %d left replica 1 at term %d", before+100, got)
	}
}

// TestTrustRelayedStreams: a follower relays an Owner's lease stream to
// the leader over its own replica certificate, telling the leader whose
// stream it is. The leader answers the Owner that speaks for itself, and
// refuses, through the relay, an Owner that speaks for another; a
// replica's certificate alone may not hold leases.
func TestTrustRelayedStreams(t *testing.T) {
	testwait.Side(t)
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var peers []manager.Peer
	var lis []net.Listener
	for id := uint64(1); id <= 3; id++ {
		if _, err := certs.Create(dir, ca, certs.Identity{Role: certs.Replica, Name: fmt.Sprint(id)}, []string{"127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		peers = append(peers, manager.Peer{ID: id, Addr: l.Addr().String()})
	}
	var srvs []*manager.Server
	for i, p := range peers {
		src, err := certs.Open(dir, certs.Replica, fmt.Sprint(p.ID))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := manager.NewServer(manager.Config{Timing: protocol.Fast(), ID: p.ID, Peers: peers, Certs: src})
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, srv)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func(l net.Listener) { done <- srv.Serve(ctx, l) }(lis[i])
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager %d: %v", p.ID, err)
			}
		})
	}
	var follower string
	for deadline := time.Now().Add(15 * time.Second); follower == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader known to a follower within 15s")
		}
		for i, s := range srvs {
			if ci := s.Snapshot().Cluster; ci.Leader != 0 && ci.Leader != ci.ID && ci.LeaderAddr != "" {
				follower = peers[i].Addr
			}
		}
	}
	now := time.Now()
	relayed := func(as certs.Identity, req *pb.LeaseRequest) error {
		c := issue(t, ca, as, now, time.Hour)
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "leasehold-relay", "1"), 5*time.Second)
		defer cancel()
		st, err := pb.NewLeasesClient(dialAs(t, follower, &c)).Session(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = st.Recv()
		return err
	}
	req := register("a", "default")
	req.Incarnation = uint64(now.UnixNano())
	if err := relayed(certs.Identity{Role: certs.Owner, Name: "a", Namespaces: []string{"default"}}, req); err != nil {
		t.Fatalf("owner a through the follower at %s: %v", follower, err)
	}
	refused(t, "mallory as a, relayed", relayed(certs.Identity{Role: certs.Owner, Name: "mallory", Namespaces: []string{"default"}}, req),
		codes.PermissionDenied, `owner "mallory"`, `Owner "a"`)
	refused(t, "a replica holding leases", leaseAttempt(dialAs(t, follower, ptr(issue(t, ca, certs.Identity{Role: certs.Replica, Name: "2"}, now, time.Hour))), req),
		codes.PermissionDenied, `replica "2"`, "relay")
}

func ptr[T any](v T) *T { return &v }
