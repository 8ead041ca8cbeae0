package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// TestGatewayScenario: a Manager, three kv servers and a gateway as real
// processes. Keys are put and read back through the gateway only (with curl
// too, when it is installed); bad requests get clear answers; a server that
// hangs (SIGSTOP) is answered for with 504 on a route with a short deadline
// while the others are served; one server is killed with SIGKILL and a
// client of the gateway's /v1/losses stream (and curl -N, when installed)
// hears a loss notification naming ranges that cover each of its keys; those keys
// then read back "not found" through the gateway, never an old value, and
// the others their values. SIGTERM stops the gateway gracefully.
func TestGatewayScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	// Side by side with the other default scenarios; with LEASEHOLD_E2E=all,
	// among the scenarios that stop processes on a schedule, alone (doc.go).
	if !allEnabled() {
		t.Parallel()
	}
	leasehold := buildLeasehold(t)
	tm := protocol.Fast()
	started := time.Now()

	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: buildKV(t), manager: addr} // kv may link while the Manager starts
	// A Manager grants nothing for ManagerLease after it starts
	// (docs/design.md rule 9): the servers (side by side), the gateway and
	// its subscribers start meanwhile.
	servers := c.serveAll("kv-1", "kv-2", "kv-3")
	r := newRouter(t, addr)

	gwProc := start(t, "gateway", leasehold, "gateway", "--manager", addr, "--listen", "127.0.0.1:0", "--tls", "--client-certs",
		"--route", "name=kv,prefix=/kv/,key=path:1,timeout=5s",
		"--route", "name=kv-quick,host=quick.example,prefix=/kv/,key=path:1,timeout=500ms")
	line = gwProc.waitLine(t, "leasehold gateway listening on ", 10*time.Second)
	gwAddr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold gateway listening on "), " ")
	gw := newGatewayClient(t, "https://"+gwAddr)
	gw.waitReady()
	sse := gw.subscribe()
	// The README's subscriber: curl -N on /v1/losses.
	curl, curlErr := exec.LookPath("curl")
	var curlSSE *proc
	if curlErr == nil {
		curlSSE = start(t, "curl -N /v1/losses", curl, append(curlTLS(t), "-sN", "https://"+gwAddr+"/v1/losses")...)
		curlSSE.waitLine(t, ": leasehold loss notifications", 10*time.Second)
	}
	st := c.settleOn(r, "kv-1", "kv-2", "kv-3")
	// The subscribers started before the table settled: only a loss
	// notified after it may excuse a key not found.
	settled := time.Now()
	if st.sumRanges() != 192 {
		t.Fatalf("three owners hold %d ranges, want 192", st.sumRanges())
	}

	ks := make([]string, 100)
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%03d", i)
		if code, body := gw.do("PUT", "/kv/"+ks[i], "v1-"+ks[i]); code != http.StatusNoContent {
			t.Fatalf("PUT %s through the gateway = %d %q", ks[i], code, body)
		}
	}
	for _, k := range ks {
		if code, body := gw.do("GET", "/kv/"+k, ""); code != 200 || body != "v1-"+k {
			t.Fatalf("GET %s through the gateway = %d %q, want 200 %q", k, code, body, "v1-"+k)
		}
	}
	t.Logf("%s: %d keys put and read back through the gateway", since(started), len(ks))
	if curlErr == nil {
		out, err := exec.Command(curl, append(curlTLS(t), "-sS", "-f", "-X", "PUT", "--data", "hello", "https://"+gwAddr+"/kv/curl-key")...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl PUT: %v %s", err, out)
		}
		out, err = exec.Command(curl, append(curlTLS(t), "-sS", "-f", "https://"+gwAddr+"/kv/curl-key")...).CombinedOutput()
		if err != nil || string(out) != "hello" {
			t.Fatalf("curl GET = %q %v, want hello", out, err)
		}
	}

	// Bad input: clear answers, and the gateway keeps serving.
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"/kv/", 400, "no key"},
		{"/kv/" + strings.Repeat("k", 2000), 400, "the limit is 1024"},
		{"/elsewhere/x", 404, "no route"},
	} {
		if code, body := gw.do("GET", tc.path, ""); code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("GET %.40s = %d %q, want %d with %q", tc.path, code, body, tc.code, tc.msg)
		}
	}

	before := r.owners(t, st.LSN, ks)

	// An Owner that hangs (SIGSTOP for a second, well within its 2 s
	// lease): a request on a route with a deadline of 500 ms is answered
	// 504 saying so, and the gateway keeps serving the other Owners.
	// The keys are those the gateway itself routes to each Owner the
	// moment before the stop (its Leasehold-Owner header), so a range
	// moved since the router's copy was read cannot pick a key kv-3 no
	// longer holds.
	hung := "kv-3"
	var hungKey, liveKey string
	for _, k := range ks {
		want := before[k]
		if (want != hung || hungKey != "") && (want != "kv-1" || liveKey != "") {
			continue
		}
		if _, _, h := gw.getHost("quick.example", "/kv/"+k); h.Get("Leasehold-Owner") != want {
			continue
		}
		if want == hung {
			hungKey = k
		} else {
			liveKey = k
		}
	}
	if hungKey == "" || liveKey == "" {
		t.Fatalf("the gateway routes no key to %s or none to kv-1 (keys %q, %q)", hung, hungKey, liveKey)
	}
	if err := servers[hung].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, servers[hung].cmd.Process.Pid)
	code, body, hdr := gw.getHost("quick.example", "/kv/"+hungKey)
	code2, body2, _ := gw.getHost("quick.example", "/kv/"+liveKey)
	if err := servers[hung].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "Owner "+hung) || !strings.Contains(body, "did not answer") {
		t.Errorf("GET %s on the hung %s = %d %q (answered by %q after %q retries), want 504: Owner %s … did not answer",
			hungKey, hung, code, body, hdr.Get("Leasehold-Owner"), hdr.Get("Leasehold-Retries"), hung)
	}
	if code2 != 200 || body2 != "v1-"+liveKey {
		t.Errorf("GET %s on kv-1 while %s hung = %d %q, want its value", liveKey, hung, code2, body2)
	}
	t.Logf("%s: an Owner that hangs: %d %q; the others still served", since(started), code, strings.TrimSpace(body))

	// Kill one owner with SIGKILL; the SSE subscriber must hear of the loss
	// of each of its keys, in a notification that names the ranges.
	dead := "kv-2"
	var deadKeys []string
	for _, k := range ks {
		if before[k] == dead {
			deadKeys = append(deadKeys, k)
		}
	}
	if len(deadKeys) == 0 {
		t.Fatalf("no key is on %s", dead)
	}
	killedAt := time.Now()
	servers[dead].kill(t)
	bound := killBound(tm)
	deadline := killedAt.Add(bound + slack)
	var last time.Time
	for _, k := range deadKeys {
		at, ok := sse.coveredAt(k, killedAt, deadline)
		if !ok {
			events, _ := sse.snapshot()
			t.Fatalf("the /v1/losses stream delivered no loss naming a range that covers %q (on %s) within %s (+%s slack) of the kill; events: %+v",
				k, dead, bound, slack, events)
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("%s: the SSE subscriber heard of the loss of all %d keys of %s within %s of the kill (bound %s)",
		since(started), len(deadKeys), dead, last.Sub(killedAt).Round(time.Millisecond), bound)
	if curlSSE != nil {
		// curl printed the same events: one names a range covering a dead key.
		k := keyspace.KeyOf(deadKeys[0])
		found := ""
		for deadline := time.Now().Add(5 * time.Second); found == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			lines, _ := curlSSE.snapshot()
			for _, l := range lines {
				if ev, ok := parseLoss(l.text); ok && !ev.all && l.at.After(killedAt) &&
					slices.ContainsFunc(ev.ranges, func(r keyspace.Range) bool { return r.Contains(k) }) {
					found = l.text
				}
			}
		}
		if found == "" {
			t.Errorf("curl -N /v1/losses printed no loss event naming a range that covers %s", deadKeys[0])
		} else {
			t.Logf("curl -N /v1/losses printed: %.200s", found)
		}
	}

	// The lost keys read "not found" (never an old value); the others, unless
	// a loss covering them was notified (a stall on a loaded machine), their values.
	for _, k := range ks {
		code, body := gw.do("GET", "/kv/"+k, "")
		switch {
		case code == 200 && body == "v1-"+k:
			if before[k] == dead {
				t.Errorf("GET %s (lost with %s) = its old value", k, dead)
			}
		case code == 404:
			if before[k] != dead {
				if _, ok := sse.coveredAt(k, settled, time.Now()); !ok {
					t.Errorf("GET %s (on %s) = not found, with no loss notified", k, before[k])
				}
			}
		default:
			t.Errorf("GET %s after the kill = %d %q", k, code, body)
		}
	}

	sse.close()
	gwProc.stop()
	gwProc.waitLine(t, "leasehold gateway stopped", 5*time.Second)
	t.Logf("%s: the gateway stopped gracefully", since(started))
}

// curlTLS are curl's flags to speak mutual TLS with t's certificates: the
// CA, and the lookup certificate a frontend presents.
func curlTLS(t *testing.T) []string {
	dir := certsDirFor(t)
	return []string{"--cacert", filepath.Join(dir, certs.CAFile),
		"--cert", filepath.Join(dir, "lookup.e2e.crt"), "--key", filepath.Join(dir, "lookup.e2e.key")}
}

// gatewayClient talks HTTPS to a gateway, with the lookup certificate.
type gatewayClient struct {
	t    *testing.T
	base string
	tr   *http.Transport
	hc   *http.Client
}

func newGatewayClient(t *testing.T, base string) *gatewayClient {
	tr := frontendTransport(t, certs.Lookup) // the gateway's certificate is the lookup's
	return &gatewayClient{t: t, base: base, tr: tr, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

func (g *gatewayClient) do(method, path, body string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		g.t.Fatalf("%s %.40s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getHost sends a GET with another Host header and returns the answer's
// headers too (Leasehold-Owner names the Owner that answered).
func (g *gatewayClient) getHost(host, path string) (int, string, http.Header) {
	g.t.Helper()
	req, err := http.NewRequest("GET", g.base+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Host = host
	resp, err := g.hc.Do(req)
	if err != nil {
		g.t.Fatalf("%s GET %.40s: %v", host, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// waitReady polls /readyz until the gateway's copy has synced.
func (g *gatewayClient) waitReady() {
	g.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		resp, err := g.hc.Get(g.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the gateway was not ready within %s", settleTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sseLoss is a loss event read from /v1/losses, and when it was read.
type sseLoss struct {
	at     time.Time
	all    bool
	ranges []keyspace.Range
}

// sseLosses reads a gateway's /v1/losses stream.
type sseLosses struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []sseLoss     // guarded by mu
	more   chan struct{} // guarded by mu; closed and replaced at each event
}

// subscribe opens /v1/losses and reads it until close.
func (g *gatewayClient) subscribe() *sseLosses {
	g.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", g.base+"/v1/losses", nil)
	resp, err := (&http.Client{Transport: g.tr}).Do(req)
	if err != nil {
		cancel()
		g.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		g.t.Fatalf("/v1/losses = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseLosses{cancel: cancel, done: make(chan struct{}), more: make(chan struct{})}
	g.t.Cleanup(s.close)
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		event := ""
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "event: "):
				event = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: ") && event == "loss":
				e, ok := parseLoss(l)
				if !ok {
					continue
				}
				s.mu.Lock()
				s.events = append(s.events, e)
				close(s.more)
				s.more = make(chan struct{})
				s.mu.Unlock()
			case l == "":
				event = ""
			}
		}
	}()
	return s
}

// parseLoss reads the data line of a loss event.
func parseLoss(l string) (sseLoss, bool) {
	if !strings.HasPrefix(l, "data: ") {
		return sseLoss{}, false
	}
	var ev struct {
		All    bool `json:"all"`
		Ranges []struct {
			Start string `json:"start"`
			End   string `json:"end"`
		} `json:"ranges"`
	}
	if json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &ev) != nil {
		return sseLoss{}, false
	}
	e := sseLoss{at: time.Now(), all: ev.All}
	for _, r := range ev.Ranges {
		e.ranges = append(e.ranges, keyspace.Range{Start: hexKey(r.Start), End: hexKey(r.End)})
	}
	return e, true
}

func (s *sseLosses) snapshot() ([]sseLoss, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events), s.more
}

// coveredAt waits until deadline for an event read after from that names a
// range covering key (a loss of all ranges does not count), and returns
// when it was read.
func (s *sseLosses) coveredAt(key string, from, deadline time.Time) (time.Time, bool) {
	k := keyspace.KeyOf(key)
	timer := time.NewTimer(max(time.Until(deadline), 0))
	defer timer.Stop()
	for {
		events, more := s.snapshot()
		for _, e := range events {
			if e.at.After(from) && slices.ContainsFunc(e.ranges, func(r keyspace.Range) bool { return r.Contains(k) }) {
				return e.at, true
			}
		}
		select {
		case <-more:
		case <-s.done:
			return time.Time{}, false
		case <-timer.C:
			return time.Time{}, false
		}
	}
}

func (s *sseLosses) close() {
	s.cancel()
	<-s.done
}

// waitStopped returns once every thread of process pid is stopped: a
// SIGSTOP is delivered to each thread as it next leaves the kernel, which
// on a loaded machine may be after a request has reached it. Where /proc
// is missing it returns at once.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, task := range tasks {
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				break // the thread ended
			}
			// The state follows the command's closing parenthesis.
			if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %s of process %d not stopped 5 s after SIGSTOP: %s", task.Name(), pid, b)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
