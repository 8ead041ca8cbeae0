package kv_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TestTLSHandsValuesOver runs the Manager, two kv servers and a client
// with certificates of one CA: the keys put read back, and when one server
// closes it hands its values to the other over HTTPS, with its owner
// certificate. The handover endpoint refuses a frontend's certificate, and
// the key API a client without one.
func TestTLSHandsValuesOver(t *testing.T) {
	testwait.Side(t)
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []certs.Identity{
		{Role: certs.Replica, Name: "1"},
		{Role: certs.Owner, Name: "kv-a", Namespaces: []string{"default"}},
		{Role: certs.Owner, Name: "kv-b", Namespaces: []string{"default"}},
		{Role: certs.Lookup, Name: "frontend"},
	} {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	src, err := certs.Open(dir, certs.Replica, "1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := manager.NewServer(manager.Config{Timing: protocol.Fast(), Certs: src})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	c := &cluster{addr: lis.Addr().String(), srv: srv}
	start := func(id string) *kv.Server {
		s, err := kv.NewServer(context.Background(), kv.ServerConfig{Manager: c.addr, ID: id, Listen: "127.0.0.1:0",
			Timing: protocol.Fast(), CertsDir: dir, Logger: debugLogger(id)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := start("kv-a"), start("kv-b")
	defer closeServer(t, b)
	c.settle(t, "kv-a", "kv-b")
	cl, err := kv.NewClient(context.Background(), kv.ClientConfig{Manager: c.addr, Timing: protocol.Fast(), CertsDir: dir, Timeout: opTime})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ks := keys(100)
	for _, k := range ks {
		if err := cl.Put(context.Background(), k, []byte(v1(k))); err != nil {
			t.Fatalf("put %q over TLS: %v", k, err)
		}
	}

	// A frontend's certificate may read and write keys but not hand state
	// over; no certificate may do neither.
	lk, err := tls.LoadX509KeyPair(dir+"/lookup.frontend.crt", dir+"/lookup.frontend.key")
	if err != nil {
		t.Fatal(err)
	}
	post := func(cert *tls.Certificate, path string) int {
		cfg := &tls.Config{InsecureSkipVerify: true}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Post("https://"+a.Addr()+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("post %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(&lk, "/internal/migrate"); code != http.StatusForbidden {
		t.Errorf("a lookup's handover: %d, want 403", code)
	}
	if code := post(nil, "/internal/migrate"); code != http.StatusUnauthorized {
		t.Errorf("a handover without a certificate: %d, want 401", code)
	}

	closeServer(t, a)
	if st := a.Stats(); st.HandedOver == 0 || st.HandoverFailures != 0 {
		t.Errorf("kv-a closed having handed over %d ranges, %d failed", st.HandedOver, st.HandoverFailures)
	}
	for _, k := range ks {
		v, err := cl.Get(context.Background(), k)
		if err != nil || string(v) != v1(k) {
			t.Errorf("get %q after kv-a handed over over TLS: %q, %v", k, v, err)
		}
	}
}
