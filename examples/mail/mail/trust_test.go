package mail_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/mail/mail"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TestTrust runs a Manager, two mail nodes and a client with certificates
// over real TCP: mail is delivered and read over mutual TLS, the nodes
// storing fragments on each other; the storage endpoints refuse a
// frontend's certificate and an Owner that is not a node (403 naming the
// identity), and a peer without a certificate or with another CA's (401
// saying what is wrong).
func TestTrust(t *testing.T) {
	testwait.Side(t)
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	local := []string{"127.0.0.1"}
	ids := []certs.Identity{{Role: certs.Replica, Name: "1"}, {Role: certs.Lookup, Name: "frontend"}}
	for _, n := range []string{"mail-1", "mail-2", "intruder"} {
		ids = append(ids, certs.Identity{Role: certs.Owner, Name: n, Namespaces: []string{"default"}})
	}
	for _, id := range ids {
		if _, err := certs.Create(dir, ca, id, local, 0); err != nil {
			t.Fatal(err)
		}
	}
	otherDir := t.TempDir()
	other, err := certs.CreateCA(otherDir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(otherDir, other, certs.Identity{Role: certs.Owner, Name: "mail-1", Namespaces: []string{"default"}}, local, 0); err != nil {
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

	nodes := map[string]string{}
	for _, id := range []string{"mail-1", "mail-2"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = l.Addr().String()
		l.Close()
	}
	for id := range nodes {
		s, err := mail.NewServer(context.Background(), mail.ServerConfig{Manager: mgr, ID: id, Listen: nodes[id],
			DataDir: t.TempDir(), Nodes: nodes, Timing: protocol.Fast(), CertsDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
	}
	cl, err := mail.NewClient(context.Background(), mail.ClientConfig{Manager: mgr, Timing: protocol.Fast(), CertsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	for u := range 6 { // some users' fragments land on the other node
		if _, err := cl.Deliver(wctx, fmt.Sprint("user-", u), "hello"); err != nil {
			t.Fatal(err)
		}
	}
	if mb, err := cl.Read(wctx, "user-0"); err != nil || len(mb.Messages) != 1 {
		t.Fatalf("Read over TLS: %+v %v", mb, err)
	}

	pair := func(dir, base string) []tls.Certificate {
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{kp}
	}
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		code  int
		want  string
	}{
		{"no certificate", nil, http.StatusUnauthorized, "no certificate was presented"},
		{"another CA's mail-1", pair(otherDir, "owner.mail-1"), http.StatusUnauthorized, "unknown authority"},
		{"a frontend", pair(dir, "lookup.frontend"), http.StatusForbidden, `lookup "frontend" may not use the storage endpoints`},
		{"an Owner that is not a node", pair(dir, "owner.intruder"), http.StatusForbidden, `owner "intruder" (namespaces default) may not use the storage endpoints`},
	} {
		// A client that trusts any server, so that the refusal is the node's.
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: tc.certs}}}
		for _, r := range []struct{ method, path, body string }{
			{http.MethodPost, "/internal/store/user-0", `{"id":"forged","body":"x"}`},
			{http.MethodGet, "/internal/fetch/user-0", ""},
		} {
			req, _ := http.NewRequest(r.method, "https://"+nodes["mail-1"]+r.path, strings.NewReader(r.body))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
				t.Errorf("%s: %s %s: %d %q, want %d saying %q", tc.name, r.method, r.path, resp.StatusCode, body, tc.code, tc.want)
			}
		}
	}
	if mb, err := cl.Read(wctx, "user-0"); err != nil || len(mb.Messages) != 1 {
		t.Errorf("after the refused requests: %+v %v, want the one message", mb, err)
	}
}
