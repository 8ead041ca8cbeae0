package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testwait"
)

// TestGatewayFinishesInFlight: stopped (as by SIGTERM), the gateway
// finishes a request in flight before it exits 0.
func TestGatewayFinishesInFlight(t *testing.T) {
	// The Manager starts before testwait.Side (t.Parallel), so that its
	// start-up reservation runs out while the test waits for its turn
	// (TestMain).
	addr := startManager(t)
	testwait.Side(t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	ownerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/kv/slow" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	defer ownerSrv.Close()
	startOwner(t, addr, "o1", strings.TrimPrefix(ownerSrv.URL, "http://"))

	b := startCLI(t, "gateway", "--manager", addr, "--listen", "127.0.0.1:0", "--route", "name=kv,prefix=/kv/,key=path:1,timeout=20s")
	re := regexp.MustCompile(`leasehold gateway listening on (\S+) `)
	var gw string
	waitFor(t, "the gateway to listen", 10*time.Second, func() bool {
		m := re.FindStringSubmatch(b.stdout.String())
		if m != nil {
			gw = "http://" + m[1]
		}
		return m != nil
	})
	get := func(path string) (int, string) {
		resp, err := http.Get(gw + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// A new Manager grants nothing for one manager lease; then o1 holds all.
	waitFor(t, "o1 to hold the keys", 15*time.Second, func() bool { code, _ := get("/kv/quick"); return code == 200 })

	type answer struct {
		code int
		body string
	}
	slow := make(chan answer, 1)
	go func() { c, body := get("/kv/slow"); slow <- answer{c, body} }()
	<-arrived
	b.cancel() // as SIGTERM does
	waitFor(t, "the gateway to refuse new connections", 10*time.Second, func() bool {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(gw + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	close(release) // the request in flight finishes only now
	if a := <-slow; a.code != 200 || a.body != "done /kv/slow" {
		t.Errorf("the request in flight at the stop = %d %q, want 200", a.code, a.body)
	}
	if code := b.stop(t); code != 0 || !strings.Contains(b.stdout.String(), "leasehold gateway stopped") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, b.stdout.String(), b.stderr.String())
	}
}

func TestGatewayUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gateway"}, "no route: give --route or --config"},
		{[]string{"gateway", "--route", "prefix=/kv/"}, "want path:N, header:NAME or query:NAME"},
		{[]string{"gateway", "--route", "key=path:1,colour=red"}, `unknown field "colour"`},
		{[]string{"gateway", "--config", "/nonexistent/routes.json"}, "--config"},
		{[]string{"gateway", "--route", "key=path:1", "--max-copy-age", "-1s"}, "must not be negative"},
	} {
		code, _, stderr := cli(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %d with %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}
