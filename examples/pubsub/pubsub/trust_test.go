package pubsub_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// TestTrust runs a Manager, two pubsub servers and a client with
// certificates over real TCP: subscriptions, publishes and the handover of
// a drained server's subscriptions go over mutual TLS. A peer without a
// certificate, or with another CA's, is refused (401 saying what is
// wrong); a frontend's certificate, or an Owner's of another namespace, is
// refused on the handover endpoint (403 naming it). None of them changes
// anything: no subscriber sees a forged message, and no subscription is
// planted.
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
		{Role: certs.Owner, Name: "ps-1", Namespaces: []string{"default"}},
		{Role: certs.Owner, Name: "ps-2", Namespaces: []string{"default"}},
		{Role: certs.Lookup, Name: "frontend"},
	} {
		if _, err := certs.Create(dir, ca, id, local, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Peers' certificates kept apart from the group's directory.
	peerDir, otherDir := t.TempDir(), t.TempDir()
	if _, err := certs.Create(peerDir, ca, certs.Identity{Role: certs.Owner, Name: "elsewhere-1", Namespaces: []string{"elsewhere"}}, local, 0); err != nil {
		t.Fatal(err)
	}
	other, err := certs.CreateCA(otherDir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(otherDir, other, certs.Identity{Role: certs.Owner, Name: "ps-1", Namespaces: []string{"default"}}, local, 0); err != nil {
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
	mctx, mcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(mctx, lis) }()
	defer func() { mcancel(); <-done }()
	mgr := lis.Addr().String()

	if _, err := pubsub.NewServer(context.Background(), pubsub.ServerConfig{Manager: mgr, ID: "ps-1", Listen: "127.0.0.1:0"}); err == nil ||
		!strings.Contains(err.Error(), "CertsDir") || !strings.Contains(err.Error(), "Insecure: true") {
		t.Errorf("a server with neither CertsDir nor Insecure: %v, want an error naming both", err)
	}
	if _, err := pubsub.NewClient(context.Background(), pubsub.ClientConfig{Manager: mgr}); err == nil ||
		!strings.Contains(err.Error(), "CertsDir") || !strings.Contains(err.Error(), "Insecure: true") {
		t.Errorf("a client with neither CertsDir nor Insecure: %v, want an error naming both", err)
	}
	servers := map[string]*pubsub.Server{}
	for _, id := range []string{"ps-1", "ps-2"} {
		s, err := pubsub.NewServer(context.Background(), pubsub.ServerConfig{Manager: mgr, ID: id, Listen: "127.0.0.1:0",
			Timing: protocol.Fast(), CertsDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer closeServer(t, s)
		servers[id] = s
	}
	c, err := pubsub.NewClient(context.Background(), pubsub.ClientConfig{Manager: mgr, Timing: protocol.Fast(), CertsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}

	// Subscriptions spread over both servers; the first publish, then
	// ps-1 drains: its subscriptions are handed over to ps-2 over HTTPS,
	// so that none is made afresh.
	const ntopics = 6
	recs := map[string]*recorder{}
	for i := range ntopics {
		topic := fmt.Sprintf("topic-%d", i)
		recs[topic] = newRecorder()
		s := c.Subscribe(topic, "sub-"+topic, recs[topic].event)
		defer s.Close()
		select {
		case <-recs[topic].opened:
		case <-ctx.Done():
			t.Fatalf("no stream opened on %s over TLS", topic)
		}
	}
	publishAll := func(msg string) {
		t.Helper()
		for topic := range recs {
			if p, err := c.Publish(ctx, topic, msg); err != nil || p.Subscribers != 1 {
				t.Fatalf("publish %q to %s over TLS: %+v %v, want one subscriber", msg, topic, p, err)
			}
		}
	}
	publishAll("0")
	for _, r := range recs {
		r.waitFor(t, 1)
	}
	closeServer(t, servers["ps-1"])
	publishAll("1")
	for topic, r := range recs {
		r.waitFor(t, 2)
		if _, fresh := r.snapshot(); fresh != 1 {
			t.Errorf("%s: subscribed afresh %d times, want once: the handover over HTTPS did not carry it", topic, fresh)
		}
	}

	// The attacks, on ps-2, which now holds every topic. Peers trust any
	// server, so that every refusal is the server's.
	load := func(dir, base string) []tls.Certificate {
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{cert}
	}
	planted := `{"to":"ps-2","range":{"start":0,"end":0},"topics":{"topic-0":[{"id":"planted","queue":[{"id":"f","data":"forged"}],"last":""}]}}`
	for _, tc := range []struct {
		name, path string
		certs      []tls.Certificate
		code       int
		want       string
	}{
		{"publish, no certificate", "/pub/topic-0", nil, http.StatusUnauthorized, "no certificate was presented"},
		{"publish, another CA's", "/pub/topic-0", load(otherDir, "owner.ps-1"), http.StatusUnauthorized, "unknown authority"},
		{"handover, no certificate", "/internal/handover", nil, http.StatusUnauthorized, "no certificate was presented"},
		{"handover, another CA's owner", "/internal/handover", load(otherDir, "owner.ps-1"), http.StatusUnauthorized, "unknown authority"},
		{"handover, a frontend's", "/internal/handover", load(dir, "lookup.frontend"), http.StatusForbidden, `lookup "frontend"`},
		{"handover, an Owner of another namespace", "/internal/handover", load(peerDir, "owner.elsewhere-1"), http.StatusForbidden, `owner "elsewhere-1"`},
		// An Owner of the namespace is admitted; a copy for a topic the
		// server holds is ignored (receive), so it plants nothing either.
		{"handover, an Owner of the namespace", "/internal/handover", load(dir, "owner.ps-1"), http.StatusNoContent, ""},
	} {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: tc.certs}}}
		body := "forged"
		if tc.path == "/internal/handover" {
			body = planted
		}
		resp, err := hc.Post("https://"+servers["ps-2"].Addr()+tc.path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		if resp.StatusCode != tc.code || !strings.Contains(string(msg), tc.want) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, resp.StatusCode, msg, tc.code, tc.want)
		}
	}
	publishAll("2") // one subscriber each: nothing was planted
	for topic, r := range recs {
		if got := r.waitFor(t, 3); !slices.Equal(got, []string{"0", "1", "2"}) {
			t.Errorf("%s: received %v, want 0, 1, 2 and nothing forged", topic, got)
		}
	}
}
