package peers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"go.etcd.io/raft/v3/raftpb"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestRefusesUnknownProtocol checks that a replica refuses a Raft stream
// whose sender names a peer protocol version it cannot speak, before
// delivering any message, with FailedPrecondition naming both versions;
// and that a stream naming none (a replica built before the key) or a
// version it speaks is served.
func TestRefusesUnknownProtocol(t *testing.T) {
	b := newNode(t, 2, nil)
	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := hb(1, 2, 1)
	valid, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	stream := func(version string) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if version != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, ProtocolKey, version)
		}
		st, err := pb.NewRaftClient(conn).Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&pb.RaftMessage{Message: valid}) // an error: CloseAndRecv says why
		_, err = st.CloseAndRecv()
		return err
	}
	for _, c := range []struct {
		version string
		code    codes.Code
		want    string
	}{
		{"", codes.OK, ""},
		{"1", codes.OK, ""},
		{"2", codes.FailedPrecondition, "the sending replica speaks peer protocol 2, this one speaks 1"},
		{"0", codes.InvalidArgument, "is not a protocol version"},
		{"x", codes.InvalidArgument, "is not a protocol version"},
	} {
		err := stream(c.version)
		if status.Code(err) != c.code || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("version %q: %v; want %s naming %q", c.version, err, c.code, c.want)
		}
		if c.code == codes.OK {
			if m := recv(t, b.got, "message"); m.From != 1 {
				t.Errorf("delivered %+v", m)
			}
		}
	}
	select {
	case m := <-b.got:
		t.Fatalf("a refused stream's message was delivered: %+v", m)
	default:
	}
	if s := b.tr.Stats(); s.Refused != 3 {
		t.Errorf("Refused = %d; want 3", s.Refused)
	}
}

// TestMixedProtocols runs a replica that speaks peer protocol 1 only and
// one that speaks 1 and 2 and names 2: the older refuses the newer's
// streams, so nothing the newer sends reaches it, while the newer takes
// the older's. A rolling upgrade must not mix such replicas: a release
// that raises Protocol names it only once every replica speaks it.
func TestMixedProtocols(t *testing.T) {
	old := newNode(t, 1, func(c *Config) { c.Protocol, c.MinProtocol = 1, 1 })
	newer := newNode(t, 2, func(c *Config) { c.Protocol, c.MinProtocol = 2, 1 })
	old.tr.SetPeer(2, newer.addr)
	newer.tr.SetPeer(1, old.addr)
	if m := sendUntilDelivered(t, old, newer); m.From != 1 {
		t.Fatalf("newer got %+v", m)
	}
	deadline := time.Now().Add(guard)
	for old.tr.Stats().Refused == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the older replica refused no stream of the newer within %s", guard)
		}
		newer.tr.Send([]raftpb.Message{hb(2, 1, 1)})
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case m := <-old.got:
		t.Fatalf("the older replica was delivered %+v from a protocol it cannot speak", m)
	default:
	}
}
