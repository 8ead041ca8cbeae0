package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certsFor makes, with leasehold cert, a CA and the certificates of
// replica 1, an operator and a lookup, each lookup's alone in a directory
// of its own too. It returns the two directories.
func certsFor(t *testing.T) (all, lookupOnly string) {
	t.Helper()
	all = t.TempDir()
	for _, args := range [][]string{
		{"create-ca"},
		{"create-replica", "1", "127.0.0.1"},
		{"create-operator", "alice"},
		{"create-lookup", "frontend"},
		{"create-owner", "kv-1", "--namespace", "default", "127.0.0.1"},
	} {
		if code, _, stderr := cli(t, append(append([]string{"cert"}, args...), "--certs-dir", all)...); code != ExitOK {
			t.Fatalf("cert %v: exit %d: %s", args, code, stderr)
		}
	}
	lookupOnly = t.TempDir()
	for _, f := range []string{"ca.crt", "lookup.frontend.crt", "lookup.frontend.key"} {
		b, err := os.ReadFile(filepath.Join(all, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lookupOnly, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return all, lookupOnly
}

func TestCertCommands(t *testing.T) {
	t.Parallel()
	dir, _ := certsFor(t)
	code, stdout, stderr := cli(t, "cert", "list", "--certs-dir", dir)
	if code != ExitOK {
		t.Fatalf("cert list: exit %d: %s", code, stderr)
	}
	for _, want := range []string{`replica "1"`, `operator "alice"`, `lookup "frontend"`, `owner "kv-1" (namespaces default)`, "127.0.0.1"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("cert list does not show %s:\n%s", want, stdout)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cert", "create-owner", "kv-2", "--certs-dir", dir}, "at least one --namespace"},
		{[]string{"cert", "create-replica", "x", "127.0.0.1", "--certs-dir", dir}, "not a Raft ID"},
		{[]string{"cert", "create-operator", "bob"}, "no certificates directory"},
		{[]string{"cert", "create-ca", "--certs-dir", dir}, "exists"},
	} {
		code, _, stderr := cli(t, tc.args...)
		if code == ExitOK || !strings.Contains(stderr, tc.want) {
			t.Errorf("leasehold %s: exit %d, %q; want an error saying %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestClientsNeedCertificatesOrInsecure: with neither a certificates
// directory nor --insecure, a client refuses to dial, saying how to fix it.
func TestClientsNeedCertificatesOrInsecure(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"status", "drain", "lookup", "watch", "cluster"} {
		args := []string{cmd, "--insecure=false", "--certs-dir", "", "--manager", "127.0.0.1:1"}
		switch cmd {
		case "drain", "lookup":
			args = append(args, "kv-1")
		case "cluster":
			args = []string{"cluster", "status", "--insecure=false", "--certs-dir", "", "--manager", "127.0.0.1:1"}
		}
		code, _, stderr := cli(t, args...)
		if code != ExitUsage || !strings.Contains(stderr, "--certs-dir") || !strings.Contains(stderr, "--insecure") {
			t.Errorf("leasehold %s: exit %d, %q", strings.Join(args, " "), code, stderr)
		}
	}
	code, _, stderr := cli(t, "manager", "--insecure=false", "--listen", "127.0.0.1:0")
	if code != ExitUsage || !strings.Contains(stderr, "--certs-dir") {
		t.Errorf("manager without certificates: exit %d, %q", code, stderr)
	}
}

// TestManagerWithCertificates runs leasehold manager --certs-dir: the
// operator's status and the lookup's status work, the lookup's drain is
// refused by role, a plaintext status cannot connect.
func TestManagerWithCertificates(t *testing.T) {
	t.Parallel()
	dir, lookupOnly := certsFor(t)
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--certs-dir", dir)
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	if code, _, stderr := cli(t, "status", "--manager", addr, "--certs-dir", dir); code != ExitOK {
		t.Errorf("the operator's status: exit %d: %s", code, stderr)
	}
	if code, _, stderr := cli(t, "status", "--manager", addr, "--certs-dir", lookupOnly); code != ExitOK {
		t.Errorf("a lookup's status: exit %d: %s", code, stderr)
	}
	code, _, stderr := cli(t, "drain", "kv-1", "--manager", addr, "--certs-dir", lookupOnly)
	if code != ExitFailure || !strings.Contains(stderr, `lookup "frontend" may not call Drain`) {
		t.Errorf("a lookup's drain: exit %d, %q", code, stderr)
	}
	code, _, stderr = cli(t, "status", "--manager", addr, "--insecure", "--timeout", "2s")
	if code != ExitFailure || !strings.Contains(stderr, "TLS") {
		t.Errorf("a plaintext status: exit %d, %q", code, stderr)
	}
}
