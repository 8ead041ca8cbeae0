package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/lookup"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// h2cServer serves g over HTTP/1.1 and cleartext HTTP/2, as leasehold
// gateway does.
func h2cServer(t *testing.T, g *Gateway) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(g)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func grpcClient(t *testing.T, srv *httptest.Server) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestLossesGRPC: leasehold.v1.Gateway/Losses streams each loss
// notification with its ranges, keeps those that cover a key when asked,
// resumes after an ID, and ends when the gateway stops; Covers answers for
// a kept notification and NOT_FOUND otherwise.
func TestLossesGRPC(t *testing.T) {
	var onLoss func(lookup.Loss)
	fr := &fakeRouter{routes: map[keyspace.Key]lookup.Route{}}
	g, err := New(t.Context(), Config{Insecure: true,
		Routes: []Route{{Name: "kv", Prefix: "/kv/", Key: "path:1"}},
		NewRouter: func(_ context.Context, _ string, f func(lookup.Loss)) (Router, error) {
			onLoss = f
			return fr, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	client := pb.NewGatewayClient(grpcClient(t, h2cServer(t, g)))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	alice := keyspace.KeyOf("alice")
	around := keyspace.Range{Start: alice - 10, End: alice + 10}
	elsewhere := keyspace.Range{Start: alice + 100, End: alice + 200}
	all, err := client.Losses(ctx, &pb.LossesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	onlyAlice, err := client.Losses(ctx, &pb.LossesRequest{Key: "alice", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	// Both are subscribed once their headers arrive.
	for _, st := range []grpc.ServerStreamingClient[pb.LossNotification]{all, onlyAlice} {
		if _, err := st.Header(); err != nil {
			t.Fatal(err)
		}
	}
	onLoss(lookup.Loss{Ranges: []keyspace.Range{elsewhere}})
	onLoss(lookup.Loss{Ranges: []keyspace.Range{around, {Start: 1 << 63, End: 0}},
		Owners: []leasetable.OwnerRanges{{Owner: "kv-2", Addr: "kv-2:1", Ranges: []keyspace.Range{around}}}})
	for i, want := range []uint64{1, 2} {
		n, err := all.Recv()
		if err != nil || n.GetId() != want || n.GetNamespace() != "default" || n.GetAll() || n.GetAtUnixNano() == 0 {
			t.Fatalf("loss %d on the stream of all: %v %v, want id %d", i, n, err, want)
		}
	}
	n, err := onlyAlice.Recv()
	if err != nil || n.GetId() != 2 || len(n.GetRanges()) != 2 {
		t.Fatalf("on alice's stream: %v %v, want loss 2 and its two ranges", n, err)
	}
	if r := n.GetRanges()[0]; r.GetStart() != uint64(around.Start) || r.GetEnd() != uint64(around.End) {
		t.Errorf("range %v, want %v", r, around)
	}
	if r := n.GetRanges()[1]; r.GetStart() != 1<<63 || r.GetEnd() != 0 {
		t.Errorf("range %v, want [2^63, end): end 0", r)
	}
	if o := n.GetOwners(); len(o) != 1 || o[0].GetOwner() != "kv-2" || o[0].GetAddr() != "kv-2:1" ||
		len(o[0].GetRanges()) != 1 || o[0].GetRanges()[0].GetStart() != uint64(around.Start) {
		t.Errorf("owners %v, want kv-2 with %v", o, around)
	}

	// Resuming after loss 1 replays loss 2.
	resumed, err := client.Losses(ctx, &pb.LossesRequest{After: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := resumed.Recv(); err != nil || n.GetId() != 2 {
		t.Errorf("resumed after 1: %v %v, want loss 2", n, err)
	}

	for _, tc := range []struct {
		id     uint64
		key    string
		covers bool
		code   codes.Code
	}{
		{2, "alice", true, codes.OK},
		{1, "alice", false, codes.OK},
		{9, "alice", false, codes.NotFound},
		{2, "", false, codes.InvalidArgument},
		{2, strings.Repeat("k", 2000), false, codes.InvalidArgument},
	} {
		resp, err := client.Covers(ctx, &pb.CoversRequest{Id: tc.id, Key: tc.key})
		if status.Code(err) != tc.code || tc.code == codes.OK && (resp.GetCovers() != tc.covers || resp.GetHash() != uint64(keyspace.KeyOf(tc.key))) {
			t.Errorf("Covers(%d, %.10q) = %v %v, want %v %v", tc.id, tc.key, resp, err, tc.covers, tc.code)
		}
	}
	if _, err := client.Losses(ctx, &pb.LossesRequest{Key: strings.Repeat("k", 2000)}); err == nil {
		st, _ := client.Losses(ctx, &pb.LossesRequest{Key: strings.Repeat("k", 2000)})
		if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Losses with a key over the limit: %v, want InvalidArgument", err)
		}
	}

	// Stopping the gateway ends the streams: clients resubscribe elsewhere.
	g.Shutdown()
	if _, err := all.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("after Shutdown: %v, want Unavailable", err)
	}
}
