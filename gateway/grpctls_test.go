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

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
)

// tlsOwner serves the gRPC health service over mutual TLS with src's
// certificate, counting the calls and recording the caller's identity.
func tlsOwner(t *testing.T, src *certs.Source, calls *atomic.Int32, caller *atomic.Value) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(certs.ServerCredentials(src, nil)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			calls.Add(1)
			if id, err := certs.PeerIdentity(ctx); err == nil {
				caller.Store(id.String())
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestGRPCOverTLS: with Config.Certs, a gRPC route reaches the Owner over
// HTTP/2 on mutual TLS, presenting the gateway's certificate; an Owner
// whose certificate another CA signed gets no call.
func TestGRPCOverTLS(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.CreateCA(otherDir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	local := []string{"127.0.0.1"}
	for _, c := range []struct {
		ca  *certs.CA
		dir string
		id  certs.Identity
	}{
		{ca, dir, certs.Identity{Role: certs.Owner, Name: "A", Namespaces: []string{"default"}}},
		{ca, dir, certs.Identity{Role: certs.Lookup, Name: "gw"}},
		{other, otherDir, certs.Identity{Role: certs.Owner, Name: "E", Namespaces: []string{"default"}}},
	} {
		if _, err := certs.Create(c.dir, c.ca, c.id, local, 0); err != nil {
			t.Fatal(err)
		}
	}
	open := func(dir string, r certs.Role, name string) *certs.Source {
		src, err := certs.Open(dir, r, name)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	var aCalls, eCalls atomic.Int32
	var aCaller, eCaller atomic.Value
	a := tlsOwner(t, open(dir, certs.Owner, "A"), &aCalls, &aCaller)
	e := tlsOwner(t, open(otherDir, certs.Owner, "E"), &eCalls, &eCaller)
	fr := &fakeRouter{routes: map[keyspace.Key]lookup.Route{}}
	fr.set("alice", "A", a)
	fr.set("eve", "E", e)
	g, err := New(t.Context(), Config{Certs: open(dir, certs.Lookup, "gw"),
		Routes:    []Route{{Name: "health", Prefix: "/grpc.health.v1.Health/", Key: "header:x-key", Timeout: Duration(time.Second)}},
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

	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-key", "alice")
	if resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check for alice: %v %v", resp, err)
	}
	if got, _ := aCaller.Load().(string); aCalls.Load() != 1 || got != `lookup "gw"` {
		t.Errorf("A served %d calls from %q, want 1 from the gateway's certificate", aCalls.Load(), got)
	}
	ctx = metadata.AppendToOutgoingContext(t.Context(), "x-key", "eve")
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Errorf("Check for eve reached an Owner whose certificate another CA signed")
	}
	if eCalls.Load() != 0 {
		t.Errorf("E served %d calls, want 0", eCalls.Load())
	}
}
