package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// TestGatewayManagerStopped: a Manager, three kv servers and a gateway as
// real processes; the Manager is stopped with SIGSTOP (a hung process: its
// sockets stay open and nothing answers). The gateway keeps routing from
// its copy: every key of the live servers reads back, from the server the
// copy names, each answer marked Leasehold-Stale with the copy's age once
// the copy is older than a poll; its metrics say stale and /readyz, with
// --max-copy-age, turns 503. kv-2 is killed meanwhile: the copy still names
// it, so its keys are answered 504 naming kv-2, never sent to the others.
// The Manager resumes (SIGCONT): the copy is fresh again, the stream of
// losses names kv-2's ranges, and every key can be written and read back.
func TestGatewayManagerStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	started := time.Now()

	// Owner leases of 8 s outlast the stop, so the Owners keep serving
	// while the Manager cannot answer; polls every second (--timings fast)
	// make the copy stale after 1.25 s.
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast",
		"--owner-lease", "8s", "--manager-lease", "9s", "--renew", "1s")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	t.Cleanup(func() { _ = mgr.cmd.Process.Signal(syscall.SIGCONT) }) // before the stop that start registered
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	servers := map[string]*proc{}
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		servers[id] = c.serve(id)
	}
	st := c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	gwProc := start(t, "gateway", leasehold, "gateway", "--manager", addr, "--listen", "127.0.0.1:0", "--tls", "--client-certs",
		"--route", "name=kv,prefix=/kv/,key=path:1,timeout=2s", "--max-copy-age", "2s")
	line = gwProc.waitLine(t, "leasehold gateway listening on ", 10*time.Second)
	gwAddr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold gateway listening on "), " ")
	gw := newGatewayClient(t, "https://"+gwAddr)
	gw.waitReady()
	sse := gw.subscribe()

	ks := make([]string, 60)
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%03d", i)
		if code, body := gw.do("PUT", "/kv/"+ks[i], "v1-"+ks[i]); code != http.StatusNoContent {
			t.Fatalf("PUT %s = %d %q", ks[i], code, body)
		}
	}
	before := newRouter(t, addr).owners(t, st.LSN, ks)
	if code, _, h := gw.get("/kv/" + ks[0]); code != 200 || h.Get("Leasehold-Stale") != "" {
		t.Fatalf("in touch: %d, Leasehold-Stale %q", code, h.Get("Leasehold-Stale"))
	}

	// Stop the Manager.
	if err := mgr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("%s: the Manager is stopped (SIGSTOP)", since(started))
	servers["kv-2"].kill(t)
	var staleSeen time.Time
	var served, refusedDead int
	notReady := false
	check := func(k string) {
		code, body, h := gw.get("/kv/" + k)
		switch {
		case before[k] == "kv-2":
			// The copy names kv-2, which is gone: 504, never another Owner.
			if code != http.StatusGatewayTimeout || !strings.Contains(body, "kv-2") || h.Get("Leasehold-Owner") != "" {
				t.Fatalf("GET %s (on the killed kv-2) with the Manager stopped = %d %q (owner %q), want 504 naming kv-2",
					k, code, strings.TrimSpace(body), h.Get("Leasehold-Owner"))
			}
			refusedDead++
		case code != 200 || body != "v1-"+k || h.Get("Leasehold-Owner") != before[k]:
			t.Fatalf("GET %s with the Manager stopped %s = %d %q from %q, want its value from %s, the copy's Owner",
				k, since(stopped), code, strings.TrimSpace(body), h.Get("Leasehold-Owner"), before[k])
		default:
			served++
		}
		if s := h.Get("Leasehold-Stale"); s != "" && staleSeen.IsZero() {
			if !regexp.MustCompile(`^age=[0-9.]+m?s$`).MatchString(s) {
				t.Errorf("Leasehold-Stale %q, want age=<duration>", s)
			}
			staleSeen = time.Now()
			t.Logf("%s: answers marked Leasehold-Stale: %s, %s after the stop", since(started), s, staleSeen.Sub(stopped).Round(time.Millisecond))
		}
	}
	var deadKey string
	for _, k := range ks {
		if before[k] == "kv-2" {
			deadKey = k
			break
		}
	}
	// The live Owners' keys, over and over while their leases (8 s from
	// their last renewal before the stop) last; one key of kv-2's at the
	// start and at the end (each takes the route's 2 s deadline).
	for time.Since(stopped) < 5500*time.Millisecond {
		for _, k := range ks {
			if before[k] != "kv-2" {
				check(k)
			}
		}
		if !notReady && time.Since(stopped) > 3500*time.Millisecond {
			if code, body, _ := gw.get("/readyz"); code == 503 && strings.Contains(body, "max-copy-age") {
				notReady = true
				t.Logf("%s: /readyz %d %s", since(started), code, strings.TrimSpace(body))
			}
		}
		if refusedDead == 0 && time.Since(stopped) > 2500*time.Millisecond {
			check(deadKey)
		}
	}
	check(deadKey)
	if staleSeen.IsZero() {
		t.Error("no answer marked Leasehold-Stale while the Manager was stopped")
	}
	if !notReady {
		t.Error("/readyz did not turn 503 with the copy older than --max-copy-age 2s")
	}
	m := gw.metrics()
	if !regexp.MustCompile(`leasehold_gateway_copy_stale\{namespace="default"\} 1`).MatchString(m) {
		t.Errorf("metrics while stopped: %s", grep(m, "leasehold_gateway_copy_"))
	}
	for _, l := range strings.Split(grep(m, "leasehold_gateway_owner_attempt_duration_seconds_count"), "\n") {
		if l != "" && !regexp.MustCompile(`owner="kv-[123]"`).MatchString(l) {
			t.Errorf("an attempt at an Owner the copy never named: %s", l)
		}
	}
	t.Logf("%s: with the Manager stopped for %s: %d answers from the copy's Owners, %d keys of the killed kv-2 answered 504; %s",
		since(started), since(stopped), served, refusedDead, strings.ReplaceAll(grep(m, "leasehold_gateway_copy_"), "\n", "; "))

	// Resume the Manager: the copy is fresh again, kv-2's loss reaches the
	// stream with its ranges, and its keys go to the live Owners.
	if err := mgr.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	deadline := resumed.Add(settleTimeout)
	for {
		code, _, h := gw.get("/kv/" + ks[0])
		rc, _, _ := gw.get("/readyz")
		if code != 0 && h.Get("Leasehold-Stale") == "" && rc == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's copy was not fresh within %s of SIGCONT", settleTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: fresh and ready again %s after SIGCONT", since(started), time.Since(resumed).Round(time.Millisecond))
	c.settle("two owners", func(s status) bool { return slices.Equal(s.holders(), []string{"kv-1", "kv-3"}) })
	for _, k := range ks {
		if before[k] != "kv-2" {
			continue
		}
		events, _ := sse.snapshot()
		if !slices.ContainsFunc(events, func(e sseLoss) bool {
			return !e.all && e.at.After(stopped) && slices.ContainsFunc(e.ranges, func(r keyspace.Range) bool { return r.Contains(keyspace.KeyOf(k)) })
		}) {
			if _, ok := sse.coveredAt(k, stopped, time.Now().Add(slack)); !ok {
				t.Errorf("no loss event naming a range that covers %s (on the killed kv-2)", k)
			}
		}
	}
	for _, k := range ks {
		if code, body := gw.do("PUT", "/kv/"+k, "v2-"+k); code != http.StatusNoContent {
			t.Fatalf("PUT %s after the Manager resumed = %d %q", k, code, body)
		}
		if code, body, h := gw.get("/kv/" + k); code != 200 || body != "v2-"+k || h.Get("Leasehold-Owner") == "kv-2" {
			t.Fatalf("GET %s after the Manager resumed = %d %q from %s", k, code, body, h.Get("Leasehold-Owner"))
		}
	}
	t.Logf("%s: every key written and read back after the Manager resumed", since(started))
}

// get sends a GET and returns the status, body and headers; status 0 if
// the request failed.
func (g *gatewayClient) get(path string) (int, string, http.Header) {
	resp, err := g.hc.Get(g.base + path)
	if err != nil {
		return 0, err.Error(), http.Header{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// metrics returns the gateway's /metrics page.
func (g *gatewayClient) metrics() string {
	_, body, _ := g.get("/metrics")
	return body
}

// grep returns the lines of s that start with prefix.
func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
