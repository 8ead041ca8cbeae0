package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestReadLeaseOverTLS: lookup --read-lease and status --read-lease, with
// an operator's certificate, against a Manager that serves mutual TLS (as
// it does by default) and holds a read lease: the Holder read is admitted
// to an operator and the CLI dials it with its certificate.
func TestReadLeaseOverTLS(t *testing.T) {
	// The Manager starts before t.Parallel, so that its start-up reservation
	// runs out while the test waits for its turn, and listens before it
	// (TestMain).
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []certs.Identity{{Role: certs.Replica, Name: "1"}, {Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}},
		{Role: certs.Operator, Name: "alice"}} {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--certs-dir", dir, "--read-lease-holders", "all")
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	t.Parallel()
	o, err := owner.New(context.Background(), owner.Config{Connection: leasehold.Connection{Manager: addr, Timing: protocol.Fast(), CertsDir: dir}, ID: "kv-1", Addr: "127.0.0.1:8001"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.Close(ctx)
	})
	var last string
	waitFor(t, "lookup --read-lease to find kv-1", 20*time.Second, func() bool {
		code, stdout, stderr := cli(t, "lookup", "--manager", addr, "--certs-dir", dir, "--read-lease", "alice")
		last = stdout + stderr
		if strings.Contains(stderr, "may not call") || strings.Contains(stderr, "PermissionDenied") {
			t.Fatalf("lookup --read-lease with an operator's certificate was refused: %s", stderr)
		}
		return code == ExitOK
	})
	if !regexp.MustCompile(`^alice -> kv-1 at 127\.0\.0\.1:8001 \(lgn \d+; read lease of manager 1 at log index \d+\)\n$`).MatchString(last) {
		t.Errorf("lookup --read-lease alice printed %q", last)
	}
	code, stdout, stderr := cli(t, "status", "--manager", addr, "--certs-dir", dir, "--read-lease")
	if code != ExitOK || !strings.Contains(stdout, "kv-1") {
		t.Errorf("status --read-lease over TLS: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
