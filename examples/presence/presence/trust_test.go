package presence_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/presence/presence"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TestTrust runs a Manager, a presence server and a client with
// certificates over real TCP: heartbeats and queries go over mutual TLS;
// a client without a certificate, or with another CA's, is refused with
// a message that says what is wrong, and changes nothing.
func TestTrust(t *testing.T) {
	testwait.Side(t)
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	local := []string{"127.0.0.1"}
	for _, id := range []certs.Identity{
		{Role: certs.Replica, Name: "1"},
		{Role: certs.Owner, Name: "pr-1", Namespaces: []string{"default"}},
		{Role: certs.Lookup, Name: "frontend"},
	} {
		if _, err := certs.Create(dir, ca, id, local, 0); err != nil {
			t.Fatal(err)
		}
	}
	otherDir := t.TempDir()
	other, err := certs.CreateCA(otherDir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(otherDir, other, certs.Identity{Role: certs.Lookup, Name: "mallory"}, nil, 0); err != nil {
		t.Fatal(err)
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
	defer func() { cancel(); <-done }()
	mgr := lis.Addr().String()

	if _, err := presence.NewServer(context.Background(), presence.ServerConfig{Manager: mgr, ID: "pr-1", Listen: "127.0.0.1:0"}); err == nil ||
		!strings.Contains(err.Error(), "CertsDir") || !strings.Contains(err.Error(), "Insecure: true") {
		t.Errorf("a server with neither CertsDir nor Insecure: %v, want an error naming both", err)
	}
	s, err := presence.NewServer(context.Background(), presence.ServerConfig{Manager: mgr, ID: "pr-1", Listen: "127.0.0.1:0",
		Timing: protocol.Fast(), CertsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c, err := presence.NewClient(context.Background(), presence.ClientConfig{Manager: mgr, Timing: protocol.Fast(), CertsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wctx, wcancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer wcancel()
	if _, err := c.Device("alice", "phone").Beat(wctx, "online"); err != nil {
		t.Fatal(err)
	}
	if a, err := c.Query(wctx, "alice"); err != nil || len(a.Devices) != 1 || a.Owner != "pr-1" {
		t.Fatalf("Query over TLS: %+v %v", a, err)
	}

	// Peers that trust any server, so that the refusal is the server's.
	mallory, err := tls.LoadX509KeyPair(filepath.Join(otherDir, "lookup.mallory.crt"), filepath.Join(otherDir, "lookup.mallory.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		want  string
	}{
		{"no certificate", nil, "no certificate was presented"},
		{"another CA's", []tls.Certificate{mallory}, "unknown authority"},
	} {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: tc.certs}}}
		req, _ := http.NewRequest(http.MethodPut, "https://"+s.Addr()+"/presence/alice/phone?seq=99", strings.NewReader("forged"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %q, want 401 saying %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	if a, err := c.Query(wctx, "alice"); err != nil || len(a.Devices) != 1 || a.Devices[0].Status != "online" {
		t.Errorf("after the refused heartbeats: %+v %v, want alice's phone online", a, err)
	}
}
