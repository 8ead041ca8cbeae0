package e2e

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// TestKVSaysWhy runs the kv command as an operator would when something is
// wrong, with real processes and TLS: kv put with no Manager listening
// exits 1 within its dial timeout naming the dial error; against a Manager
// whose CA is not the client's, it names the CA; kv serve holding nothing
// (no Manager) exits 0 within 5 s of SIGTERM, though its --drain-timeout
// is a minute. About 7 s: LEASEHOLD_E2E=all.
func TestKVSaysWhy(t *testing.T) {
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := lis.Addr().String()
	lis.Close()

	kv := func(env []string, args ...string) (code int, stderr string, took time.Duration) {
		t.Helper()
		cmd := exec.Command(kvBin, args...)
		cmd.SysProcAttr = sysProcAttr()
		cmd.Env = env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out), time.Since(start)
	}
	code, out, took := kv(envFor(t), "put", "alice", "hi", "--manager", nobody, "--dial-timeout", "2s")
	t.Logf("kv put, no manager: exit %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	if code != 1 || !strings.Contains(out, "connection refused") || took > 8*time.Second {
		t.Errorf("kv put with no manager: exit %d after %s, %q; want 1 within a few seconds naming the dial error", code, took, out)
	}

	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	other := t.TempDir()
	ca, err := certs.CreateCA(other, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(other, ca, certs.Identity{Role: certs.Lookup, Name: "stranger"}, localHosts, 0); err != nil {
		t.Fatal(err)
	}
	strangerEnv := append(envFor(t), certs.DirEnv+"="+other)
	code, out, took = kv(strangerEnv, "put", "alice", "hi", "--manager", addr, "--dial-timeout", "2s")
	t.Logf("kv put, another CA: exit %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	if code != 1 || !strings.Contains(out, "unknown authority (not this group's CA)") || took > 8*time.Second {
		t.Errorf("kv put with another CA: exit %d after %s, %q; want 1 naming the CA", code, took, out)
	}

	ownerCert(t, "kv-idle")
	srv := start(t, "kv-idle", kvBin, "serve", "--manager", nobody, "--listen", "127.0.0.1:0", "--id", "kv-idle", "--drain-timeout", "1m")
	srv.waitLine(t, "kv serving on ", 10*time.Second)
	sent := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("kv serve holding nothing still runs %s after SIGTERM", time.Since(sent))
	}
	t.Logf("kv serve holding nothing exited %v after SIGTERM (%v)", time.Since(sent).Round(time.Millisecond), srv.cmd.ProcessState)
	if !srv.cmd.ProcessState.Success() {
		t.Errorf("kv serve exited %v after SIGTERM; want 0", srv.cmd.ProcessState)
	}
}
