package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
)

// grpcOwner serves the gRPC health service; refuse, if set, may refuse a call.
func grpcOwner(t *testing.T, refuse func(ctx context.Context) error) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if refuse != nil {
			if err := refuse(ctx); err != nil {
				return nil, err
			}
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestGRPC: a unary gRPC call through the gateway reaches the Owner of the
// key in its metadata, over HTTP/2 with trailers, and an Owner's refusal
// (owner.RefuseGRPC) is retried where the copy names next.
func TestGRPC(t *testing.T) {
	b := grpcOwner(t, nil)
	var fr *fakeRouter
	var refused atomic.Int32
	a := grpcOwner(t, func(ctx context.Context) error {
		refused.Add(1)
		fr.set("alice", "B", b) // the copy catches up
		return owner.RefuseGRPC(ctx, owner.RefusedNotOwner, "not the owner")
	})
	fr = &fakeRouter{routes: map[keyspace.Key]lookup.Route{}}
	fr.set("alice", "A", a)
	fr.set("bob", "B", b)
	g, err := New(t.Context(), Config{Insecure: true,
		Routes:    []Route{{Name: "health", Prefix: "/grpc.health.v1.Health/", Key: "header:x-key", Timeout: Duration(5 * time.Second)}},
		NewRouter: func(context.Context, string, func(lookup.Loss)) (Router, error) { return fr, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewUnstartedServer(g)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	for _, tc := range []struct{ key, owner, retries string }{{"bob", "B", "0"}, {"alice", "B", "1"}} {
		var hdr metadata.MD
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-key", tc.key)
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check for %s: %v %v", tc.key, resp, err)
		}
		if got := hdr.Get("leasehold-owner"); len(got) != 1 || got[0] != tc.owner || hdr.Get("leasehold-retries")[0] != tc.retries {
			t.Errorf("Check for %s answered by %v after %v retries, want %s after %s", tc.key, got, hdr.Get("leasehold-retries"), tc.owner, tc.retries)
		}
	}
	if refused.Load() != 1 {
		t.Errorf("A refused %d calls, want 1", refused.Load())
	}
	// A call with no key is refused by the gateway itself.
	if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("Check with no key: %v, want an error carrying the gateway's 400", err)
	}
}
