package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// TestGatewayRefusedStops runs leasehold gateway with a lookup certificate
// that may follow only namespace "other", routing namespace "default": the
// Manager refuses its Lookup, which retrying cannot lift, so the gateway
// says so and exits 1 rather than serve nothing.
func TestGatewayRefusedStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(dir, ca, certs.Identity{Role: certs.Replica, Name: "1"}, []string{"127.0.0.1"}, 0); err != nil {
		t.Fatal(err)
	}
	gwCert := certAlone(t, ca, dir, certs.Identity{Role: certs.Lookup, Name: "gw", Namespaces: []string{"other"}})
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--certs-dir", dir)
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	g := startCLI(t, "gateway", "--manager", addr, "--listen", "127.0.0.1:0", "--route", "name=kv,prefix=/kv/,key=path:1",
		"--certs-dir", gwCert.Dir())
	select {
	case code := <-g.done:
		g.done <- code
		if code != ExitFailure || !strings.Contains(g.stderr.String(), "the manager refuses the gateway") ||
			!strings.Contains(g.stderr.String(), `may not follow namespace "default"`) {
			t.Errorf("gateway exited %d, stderr:\n%s\nwant 1 and the refusal", code, g.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the gateway still runs 10 s after the Manager refused it; stderr:\n%s", g.stderr.String())
	}
}
