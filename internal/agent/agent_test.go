package agent

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/client/clienttest"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// serve runs an agent against a fake Manager on a Unix socket in a fresh
// directory and returns the socket's path.
func serve(t *testing.T, appTimeout time.Duration) (string, *Agent) {
	t.Helper()
	g := clienttest.Start(t, 1)
	g.Lead(0)
	a, err := New(Config{Owner: owner.Config{ID: "app-1", Addr: "127.0.0.1:9001",
		Connection: leasehold.Connection{Insecure: true, Manager: g.Member(0).Addr, Timing: protocol.Fast()}}, AppTimeout: appTimeout, Heartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "agent") // short: a socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "sock")
	l, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Serve(ctx, l, "") }()
	t.Cleanup(func() { cancel(); <-done })
	return path, a
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

// TestSessionOverHTTP: an application opens a session on the Unix socket,
// is granted the key space with a deadline ahead of CLOCK_MONOTONIC and
// within the Owner's lease, Check agrees, a second session is refused,
// and a socket file other users could open is never made.
func TestSessionOverHTTP(t *testing.T) {
	path, _ := serve(t, time.Second)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	c := unixClient(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://agent/v1/session", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/session: %v %v", resp, err)
	}
	lines := bufio.NewScanner(resp.Body)
	var ev pb.AgentEvent
	var session string
	deadline := time.Now().Add(5 * time.Second)
	for len(ev.GetHeld()) == 0 && time.Now().Before(deadline) {
		if !lines.Scan() {
			t.Fatalf("the stream ended: %v", lines.Err())
		}
		ev.Reset()
		if err := jsonIn.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("event %s: %v", lines.Text(), err)
		}
		if ev.GetSession() != "" {
			session = ev.GetSession()
		}
		post(t, c, "/v1/session/"+session, `{"applied":"`+itoa(ev.GetVersion())+`"}`, 204)
	}
	if len(ev.GetHeld()) != 1 {
		t.Fatalf("no grant within 5 s: %v", &ev)
	}
	now := monoNow()
	if d := ev.GetHeld()[0].GetDeadlineNs() - now; d <= 0 || d > int64(clienttest.OwnerLease) {
		t.Fatalf("deadline %d ns from now, want within (0, OwnerLease]", d)
	}
	got := post(t, c, "/v1/check", `{"key":"`+itoa(uint64(keyspace.KeyOf("alice")))+`"}`, 200)
	if !strings.Contains(got, `"held":true`) {
		t.Fatalf("check: %s", got)
	}
	req2, _ := http.NewRequest("GET", "http://agent/v1/session", nil)
	if r2, err := c.Do(req2); err != nil || r2.StatusCode != http.StatusConflict {
		t.Fatalf("a second session: %v %v, want 409", r2, err)
	}
	post(t, c, "/v1/session/"+session, strings.Repeat(" ", MaxMessageBytes+1), http.StatusRequestEntityTooLarge)
	post(t, c, "/v1/session/"+session, `{"applied":"999999"}`, http.StatusBadRequest)
}

// TestQuietApplicationEnds: an application that stops acknowledging (a
// stopped process) has its session ended after AppTimeout, and its Owner
// stops renewing: a new session is then accepted.
func TestQuietApplicationEnds(t *testing.T) {
	path, a := serve(t, 300*time.Millisecond)
	c := unixClient(path)
	resp, err := c.Get("http://agent/v1/session")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/session: %v %v", resp, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.Copy(io.Discard, resp.Body) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the session of a silent application was not ended within 5 s")
	}
	for end := time.Now().Add(5 * time.Second); a.openSession() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the ended session's Owner did not stop within 5 s")
		}
	}
}

// TestSessionOverGRPC: the same service over gRPC on the same socket.
func TestSessionOverGRPC(t *testing.T) {
	path, _ := serve(t, time.Second)
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := pb.NewAgentClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.AppMessage{Applied: ev.GetVersion()}); err != nil {
			t.Fatal(err)
		}
		if len(ev.GetHeld()) > 0 {
			break
		}
	}
	r, err := pb.NewAgentClient(cc).Check(ctx, &pb.CheckRequest{Key: uint64(keyspace.KeyOf("bob"))})
	if err != nil || !r.GetHeld() {
		t.Fatalf("Check: %v %v", r, err)
	}
}

func post(t *testing.T, c *http.Client, path, body string, want int) string {
	t.Helper()
	resp, err := c.Post("http://agent"+path, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("POST %s: %d %s, want %d", path, resp.StatusCode, b, want)
	}
	return string(b)
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// TestListenersKeepOthersOut: a socket directory others may write to is
// refused (another user could replace the socket), a non-loopback TCP
// address is refused, and on TCP a request without the token gets 401.
func TestListenersKeepOthersOut(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := ListenUnix(filepath.Join(dir, "sock")); err == nil {
		l.Close()
		t.Fatal("ListenUnix in a world-writable directory succeeded")
	} else if !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("ListenUnix: %v, want it to say the directory is writable by others", err)
	}
	if l, err := ListenLoopback("0.0.0.0:0"); err == nil {
		l.Close()
		t.Fatal("ListenLoopback on 0.0.0.0 succeeded")
	}
	a, err := New(Config{Owner: owner.Config{ID: "app-1", Addr: "127.0.0.1:9001",
		Connection: leasehold.Connection{Insecure: true, Manager: "127.0.0.1:1", Timing: protocol.Fast()}}})
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handler("s3cret")
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer s3cret", 200}} {
		req, _ := http.NewRequest("GET", "http://agent/healthz", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, w.Code, tc.want)
		}
	}
}
