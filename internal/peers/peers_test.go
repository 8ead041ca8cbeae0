package peers

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// guard bounds every wait: reaching it is a failure, never a way to pace a
// test.
const guard = 10 * time.Second

type snapReport struct {
	id uint64
	ok bool
}

// node is one replica's transport, served on a real socket.
type node struct {
	id          uint64
	tr          *Transport
	srv         *grpc.Server
	addr        string
	got         chan raftpb.Message
	unreachable chan uint64
	snaps       chan snapReport
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	lis := listen(t)
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func newNode(t *testing.T, id uint64, mod func(*Config)) *node {
	return serveNode(t, id, listen(t), mod)
}

func serveNode(t *testing.T, id uint64, lis net.Listener, mod func(*Config)) *node {
	t.Helper()
	n := &node{
		id:          id,
		addr:        lis.Addr().String(),
		got:         make(chan raftpb.Message, 1024),
		unreachable: make(chan uint64, 1024),
		snaps:       make(chan snapReport, 1024),
	}
	cfg := Config{
		Self:    id,
		Deliver: func(m raftpb.Message) { n.got <- m }, // never fills in these tests
		OnUnreachable: func(id uint64) {
			select {
			case n.unreachable <- id:
			default:
			}
		},
		OnSnapshot: func(id uint64, ok bool) {
			select {
			case n.snaps <- snapReport{id, ok}:
			default:
			}
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	n.tr = New(cfg)
	n.srv = grpc.NewServer(grpc.MaxRecvMsgSize(n.tr.cfg.MaxMessageBytes + 1024))
	n.tr.Register(n.srv)
	go n.srv.Serve(lis)
	t.Cleanup(func() {
		n.tr.Close()
		n.srv.Stop()
	})
	return n
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within %v", what, guard)
		panic("unreachable")
	}
}

// hb is a heartbeat; seq (in Commit) tells messages apart.
func hb(from, to, seq uint64) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgHeartbeat, From: from, To: to, Term: 1, Commit: seq}
}

// sendUntilDelivered sends heartbeats from a to b until b gets one,
// resending whenever a reports b unreachable: a message queued while an
// attempt that was bound to fail was under way is dropped with it, which is
// the transport's contract and what Raft's own retransmission covers.
func sendUntilDelivered(t *testing.T, a, b *node) raftpb.Message {
	t.Helper()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	for seq := uint64(1); ; seq++ {
		a.tr.Send([]raftpb.Message{hb(a.id, b.id, seq)})
		select {
		case m := <-b.got:
			return m
		case <-a.unreachable:
		case <-timer.C:
			t.Fatalf("replica %d got nothing from %d within %v", b.id, a.id, guard)
		}
	}
}

func TestExchange(t *testing.T) {
	nodes := []*node{newNode(t, 1, nil), newNode(t, 2, nil), newNode(t, 3, nil)}
	for _, a := range nodes {
		for _, b := range nodes {
			a.tr.SetPeer(b.id, b.addr) // Self is ignored
		}
	}
	for _, a := range nodes {
		var msgs []raftpb.Message
		for _, b := range nodes {
			msgs = append(msgs, hb(a.id, b.id, 10*a.id+b.id)) // the one to Self is dropped
		}
		a.tr.Send(msgs)
	}
	for _, b := range nodes {
		from := map[uint64]bool{}
		for range 2 {
			m := recv(t, b.got, "message")
			if m.To != b.id || m.Type != raftpb.MsgHeartbeat || m.Commit != 10*m.From+b.id || m.Term != 1 {
				t.Fatalf("replica %d got %+v", b.id, m)
			}
			from[m.From] = true
		}
		if len(from) != 2 || from[b.id] {
			t.Fatalf("replica %d got messages from %v", b.id, from)
		}
		s := b.tr.Stats()
		if s.DroppedUnknown != 1 || s.ReceivedUnknown != 0 || s.Refused != 0 || len(s.Peers) != 2 {
			t.Fatalf("replica %d stats %+v", b.id, s)
		}
		for id, p := range s.Peers {
			if p.Received != 1 || p.Addr != nodes[id-1].addr {
				t.Fatalf("replica %d: peer %d stats %+v", b.id, id, p)
			}
		}
	}

	// Order is kept on each stream.
	a, b := nodes[0], nodes[1]
	var msgs []raftpb.Message
	for seq := range uint64(100) {
		msgs = append(msgs, hb(1, 2, seq))
	}
	a.tr.Send(msgs[:50])
	a.tr.Send(msgs[50:])
	for seq := range uint64(100) {
		if m := recv(t, b.got, "message"); m.Commit != seq {
			t.Fatalf("got message %d, want %d", m.Commit, seq)
		}
	}
}

func TestReconnect(t *testing.T) {
	a := newNode(t, 1, nil)
	addr := deadAddr(t)
	a.tr.SetPeer(2, addr)
	a.tr.Send([]raftpb.Message{hb(1, 2, 0)})
	if id := recv(t, a.unreachable, "unreachable report"); id != 2 {
		t.Fatalf("unreachable %d, want 2", id)
	}

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	b := serveNode(t, 2, lis, nil)
	b.tr.SetPeer(1, a.addr)
	if m := sendUntilDelivered(t, a, b); m.From != 1 || m.To != 2 {
		t.Fatalf("got %+v", m)
	}
	// Both ways, and later messages arrive with no further retries.
	b.tr.Send([]raftpb.Message{hb(2, 1, 7)})
	if m := recv(t, a.got, "message"); m.From != 2 || m.Commit != 7 {
		t.Fatalf("got %+v", m)
	}
	a.tr.Send([]raftpb.Message{hb(1, 2, 1000)})
	for {
		if m := recv(t, b.got, "message"); m.Commit == 1000 {
			break
		}
	}
	if s := a.tr.Stats().Peers[2]; !s.Connected || s.Sent == 0 {
		t.Fatalf("peer stats %+v", s)
	}
}

func TestUnreachableAndFailedSnapshot(t *testing.T) {
	a := newNode(t, 1, nil)
	a.tr.SetPeer(2, deadAddr(t))
	if id := recv(t, a.unreachable, "unreachable report"); id != 2 {
		t.Fatalf("unreachable %d, want 2", id)
	}
	// A snapshot queued for a dead peer fails with the next attempt.
	a.tr.Send([]raftpb.Message{snap(1, 2, 100)})
	if r := recv(t, a.snaps, "snapshot report"); r != (snapReport{2, false}) {
		t.Fatalf("snapshot report %+v", r)
	}
	if s := a.tr.Stats().Peers[2]; s.Dropped != 1 || s.Sent != 0 || s.Connected {
		t.Fatalf("peer stats %+v", s)
	}
}

func snap(from, to uint64, size int) raftpb.Message {
	data := bytes.Repeat([]byte("snapshot"), size/8+1)[:size]
	return raftpb.Message{Type: raftpb.MsgSnap, From: from, To: to, Term: 3, Snapshot: &raftpb.Snapshot{
		Data:     data,
		Metadata: raftpb.SnapshotMetadata{Index: 42, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2}}},
	}}
}

func TestSnapshot(t *testing.T) {
	limit := func(c *Config) { c.MaxMessageBytes = 1 << 20 }
	a, b := newNode(t, 1, limit), newNode(t, 2, limit)
	a.tr.SetPeer(2, b.addr)

	want := snap(1, 2, 1<<19)
	a.tr.Send([]raftpb.Message{want})
	if r := recv(t, a.snaps, "snapshot report"); r != (snapReport{2, true}) {
		t.Fatalf("snapshot report %+v", r)
	}
	got := recv(t, b.got, "snapshot")
	if got.Type != raftpb.MsgSnap || got.Snapshot == nil || !bytes.Equal(got.Snapshot.Data, want.Snapshot.Data) ||
		got.Snapshot.Metadata.Index != 42 || len(got.Snapshot.Metadata.ConfState.Voters) != 2 {
		t.Fatalf("got %v", got.Type)
	}
	if s := a.tr.Stats().Peers[2]; s.Sent != 1 || s.Dropped != 0 {
		t.Fatalf("peer stats %+v", s)
	}

	// Too large: dropped and reported, and the stream carries on.
	a.tr.Send([]raftpb.Message{snap(1, 2, 1<<20), hb(1, 2, 5), snap(1, 2, 10)})
	if r := recv(t, a.snaps, "snapshot report"); r != (snapReport{2, false}) {
		t.Fatalf("snapshot report %+v", r)
	}
	if m := recv(t, b.got, "heartbeat"); m.Type != raftpb.MsgHeartbeat || m.Commit != 5 {
		t.Fatalf("got %+v", m)
	}
	if m := recv(t, b.got, "snapshot"); m.Type != raftpb.MsgSnap || len(m.Snapshot.Data) != 10 {
		t.Fatalf("got %v", m.Type)
	}
	// The report follows the count of what was sent before it.
	if r := recv(t, a.snaps, "snapshot report"); r != (snapReport{2, true}) {
		t.Fatalf("snapshot report %+v", r)
	}
	if s := a.tr.Stats().Peers[2]; s.Sent != 3 || s.Dropped != 1 {
		t.Fatalf("peer stats %+v", s)
	}
}

func TestQueueOverflow(t *testing.T) {
	// A listener that never accepts: the TCP handshake completes, gRPC's never
	// does, so nothing leaves the queue.
	silent := listen(t)
	defer silent.Close()
	a := newNode(t, 1, func(c *Config) { c.QueueLen = 4 })
	a.tr.SetPeer(2, silent.Addr().String())

	var msgs []raftpb.Message
	for seq := range uint64(10) {
		msgs = append(msgs, hb(1, 2, seq))
	}
	a.tr.Send(msgs) // returns at once: 4 queued, 6 dropped
	if s := a.tr.Stats().Peers[2]; s.Dropped != 6 || s.Sent != 0 || s.Connected {
		t.Fatalf("peer stats %+v", s)
	}
	a.tr.Send([]raftpb.Message{snap(1, 2, 64)})
	if s := a.tr.Stats().Peers[2]; s.Dropped != 7 {
		t.Fatalf("peer stats %+v", s)
	}
	if r := recv(t, a.snaps, "snapshot report"); r != (snapReport{2, false}) {
		t.Fatalf("snapshot report %+v", r)
	}
}

func TestRefused(t *testing.T) {
	b := newNode(t, 2, nil)
	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRaftClient(conn)
	stream := func(payloads ...[]byte) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		st, err := client.Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range payloads {
			if st.Send(&pb.RaftMessage{Message: p}) != nil {
				break // ended by the server: CloseAndRecv says why
			}
		}
		_, err = st.CloseAndRecv()
		return err
	}
	marshal := func(m raftpb.Message) []byte {
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	valid := marshal(hb(1, 2, 1))
	badEntry := hb(1, 2, 0)
	badEntry.Type = raftpb.MsgApp
	badEntry.Entries = []raftpb.Entry{{Term: 1, Index: 1, Type: raftpb.EntryType(7)}}
	fromSelf := hb(2, 2, 0)
	for _, c := range []struct {
		name, want string
		payload    []byte
	}{
		{"garbage", "undecodable", []byte{0xff, 0xff, 0xff}},
		{"truncated", "undecodable", valid[:len(valid)-1]},
		{"wrong To", "to replica 3 arrived at replica 2", marshal(hb(1, 3, 0))},
		{"local type", "never leaves a replica", marshal(raftpb.Message{Type: raftpb.MsgHup, From: 1, To: 2})},
		{"negative type", "unknown type -1", negativeType},
		{"no sender", "come from replica 0", marshal(hb(0, 2, 0))},
		{"from self", "come from replica 2", marshal(fromSelf)},
		{"entry type", "entry of unknown type 7", marshal(badEntry)},
	} {
		err := stream(c.payload, valid) // the valid one must not be read
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want InvalidArgument naming %q", c.name, err, c.want)
		}
	}
	if err := stream(valid, valid); err != nil {
		t.Fatalf("valid stream: %v", err)
	}
	for range 2 {
		if m := recv(t, b.got, "message"); m.Commit != 1 || m.From != 1 {
			t.Fatalf("delivered %+v", m) // something refused got through
		}
	}
	if s := b.tr.Stats(); s.Refused != 8 || s.ReceivedUnknown != 2 {
		t.Fatalf("stats %+v", s)
	}
	select {
	case m := <-b.got:
		t.Fatalf("delivered %+v", m)
	default:
	}
}

// negativeType is a raftpb.Message whose type decodes as -1: raft's own
// IsLocalMsg would index an array with it.
var negativeType = []byte{
	0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // type = -1
	0x10, 0x02, // to = 2
	0x18, 0x01, // from = 1
}

func TestMisroutedThenMoved(t *testing.T) {
	a, b, c := newNode(t, 1, nil), newNode(t, 2, nil), newNode(t, 3, nil)
	a.tr.SetPeer(2, c.addr) // wrong: replica 3 is there
	a.tr.Send([]raftpb.Message{hb(1, 2, 0)})
	if id := recv(t, a.unreachable, "unreachable report"); id != 2 {
		t.Fatalf("unreachable %d, want 2", id)
	}
	if s := c.tr.Stats(); s.Refused == 0 {
		t.Fatalf("replica 3 refused nothing: %+v", s)
	}
	a.tr.SetPeer(2, b.addr)
	if m := sendUntilDelivered(t, a, b); m.From != 1 {
		t.Fatalf("got %+v", m)
	}
	if s := a.tr.Stats().Peers[2]; s.Addr != b.addr {
		t.Fatalf("peer stats %+v", s)
	}
	select {
	case m := <-c.got:
		t.Fatalf("replica 3 delivered %+v", m)
	default:
	}
}

func TestRemovePeer(t *testing.T) {
	a, b := newNode(t, 1, nil), newNode(t, 2, nil)
	a.tr.SetPeer(2, b.addr)
	a.tr.Send([]raftpb.Message{hb(1, 2, 1)})
	recv(t, b.got, "message")
	a.tr.RemovePeer(2)
	a.tr.Send([]raftpb.Message{hb(1, 2, 2), hb(1, 9, 3)})
	if s := a.tr.Stats(); len(s.Peers) != 0 || s.DroppedUnknown != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCloseEndsIncoming checks that Close ends the streams peers keep open to
// this replica, so the peers notice and a graceful server stop completes.
func TestCloseEndsIncoming(t *testing.T) {
	a, b := newNode(t, 1, nil), newNode(t, 2, nil)
	a.tr.SetPeer(2, b.addr)
	a.tr.Send([]raftpb.Message{hb(1, 2, 1)})
	recv(t, b.got, "message")
	b.tr.Close()
	if id := recv(t, a.unreachable, "unreachable report"); id != 2 {
		t.Fatalf("unreachable %d, want 2", id)
	}
	a.tr.Close() // else it reconnects to b forever, and GracefulStop waits
	stopped := make(chan struct{})
	go func() {
		b.srv.GracefulStop()
		close(stopped)
	}()
	recv(t, stopped, "graceful stop")
	b.tr.Send([]raftpb.Message{hb(2, 1, 1)}) // after Close: dropped, no panic
	if s := b.tr.Stats(); s.DroppedUnknown != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCloseLeavesNoGoroutines runs traffic among three replicas, one of
// whose peers is dead and one silent, then closes everything.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	silent := listen(t)
	nodes := []*node{newNode(t, 1, nil), newNode(t, 2, nil), newNode(t, 3, nil)}
	for _, a := range nodes {
		for _, b := range nodes {
			a.tr.SetPeer(b.id, b.addr)
		}
		a.tr.SetPeer(4, deadAddr(t))
		a.tr.SetPeer(5, silent.Addr().String())
	}
	for _, a := range nodes {
		for _, b := range nodes {
			a.tr.Send([]raftpb.Message{hb(a.id, b.id, 1), hb(a.id, 4, 1), hb(a.id, 5, 1)})
		}
	}
	for _, b := range nodes {
		for range 2 {
			recv(t, b.got, "message")
		}
	}
	for _, n := range nodes {
		n.tr.Close()
		n.tr.Close() // twice is fine
		n.srv.Stop()
	}
	silent.Close()
	goleak.VerifyNone(t)
}

// TestSnapshotInParts: a message larger than PartBytes travels in parts
// through a server that accepts no message larger than a part, and arrives
// whole; parts that add up to more than MaxMessageBytes are refused.
func TestSnapshotInParts(t *testing.T) {
	limit := func(c *Config) { c.MaxMessageBytes = 4 * PartBytes }
	partOnly := func(t *testing.T, id uint64) *node {
		n := &node{id: id, got: make(chan raftpb.Message, 16), unreachable: make(chan uint64, 16), snaps: make(chan snapReport, 16)}
		lis := listen(t)
		n.addr = lis.Addr().String()
		cfg := Config{Self: id, Deliver: func(m raftpb.Message) { n.got <- m },
			OnSnapshot: func(id uint64, ok bool) { n.snaps <- snapReport{id, ok} }}
		limit(&cfg)
		n.tr = New(cfg)
		n.srv = grpc.NewServer(grpc.MaxRecvMsgSize(PartBytes + PartFraming))
		n.tr.Register(n.srv)
		go n.srv.Serve(lis)
		t.Cleanup(func() { n.tr.Close(); n.srv.Stop() })
		return n
	}
	a, b := newNode(t, 1, limit), partOnly(t, 2)
	a.tr.SetPeer(2, b.addr)
	want := snap(1, 2, 3*PartBytes+5)
	a.tr.Send([]raftpb.Message{want})
	if r := recv(t, a.snaps, "snapshot report"); r != (snapReport{2, true}) {
		t.Fatalf("snapshot report %+v", r)
	}
	got := recv(t, b.got, "snapshot")
	if got.Type != raftpb.MsgSnap || got.Snapshot == nil || !bytes.Equal(got.Snapshot.Data, want.Snapshot.Data) {
		t.Fatalf("got %v, not the snapshot sent", got.Type)
	}

	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := pb.NewRaftClient(conn).Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, PartBytes)
	for range 6 {
		if st.Send(&pb.RaftMessage{Message: part, More: true}) != nil {
			break
		}
	}
	if _, err := st.CloseAndRecv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Fatalf("parts past MaxMessageBytes: %v, want InvalidArgument naming the limit", err)
	}
}
