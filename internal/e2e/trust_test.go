package e2e

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/certs"
)

// The scenarios that matter most (the walkthrough, failover, the rolling
// restart) run with mutual TLS, as a production group does: useTLS makes a
// CA and the certificates of their processes, and every process a test
// starts, and every client it makes in-process, uses them. The other
// scenarios run in plaintext on 127.0.0.1 ($LEASEHOLD_INSECURE, set by
// TestMain).

// tlsDirs maps a test that runs with TLS to its certificates directory.
var tlsDirs sync.Map

// certsMu serialises the creation of owner certificates.
var certsMu sync.Mutex

// useTLS makes a CA and certificates for t: Manager replicas 1 to 5 at
// 127.0.0.1, an operator and a lookup; kv servers get theirs as they start
// (ownerCert). It returns the directory.
func useTLS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	ids := []certs.Identity{{Role: certs.Operator, Name: "e2e"}, {Role: certs.Lookup, Name: "e2e"}}
	for _, n := range []string{"1", "2", "3", "4", "5"} {
		ids = append(ids, certs.Identity{Role: certs.Replica, Name: n})
	}
	for _, id := range ids {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1", "localhost"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	tlsDirs.Store(t, dir)
	t.Cleanup(func() { tlsDirs.Delete(t) })
	return dir
}

// certsDirFor returns t's certificates directory, or "" in plaintext.
func certsDirFor(t *testing.T) string {
	if d, ok := tlsDirs.Load(t); ok {
		return d.(string)
	}
	return ""
}

// envFor is the environment of the processes t starts: with TLS, the
// certificates directory and no $LEASEHOLD_INSECURE; nil (this process's)
// otherwise.
func envFor(t *testing.T) []string {
	dir := certsDirFor(t)
	if dir == "" {
		return nil
	}
	return append(os.Environ(), certs.DirEnv+"="+dir, "LEASEHOLD_INSECURE=")
}

// ownerCert creates the certificate of kv server id, of namespace
// default, unless t runs in plaintext or it exists.
func ownerCert(t *testing.T, id string) {
	t.Helper()
	dir := certsDirFor(t)
	if dir == "" {
		return
	}
	certsMu.Lock()
	defer certsMu.Unlock()
	oid := certs.Identity{Role: certs.Owner, Name: id, Namespaces: []string{"default"}}
	if _, err := os.Stat(filepath.Join(dir, certs.FileBase(oid)+".crt")); err == nil {
		return
	}
	ca, err := certs.LoadCA(filepath.Join(dir, certs.CAFile), filepath.Join(dir, certs.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(dir, ca, oid, []string{"127.0.0.1", "localhost"}, 0); err != nil {
		t.Fatal(err)
	}
}

// plaintextRefused checks that the Manager at addr serves TLS only: a
// plaintext status fails.
func plaintextRefused(t *testing.T, leasehold, addr string) {
	t.Helper()
	cmd := exec.Command(leasehold, "status", "--manager", addr, "--insecure", "--timeout", "2s")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("a plaintext status of the manager at %s succeeded: %s", addr, out)
	}
}

// rotateAll issues every certificate in t's directory again, with a new
// key, as an operator rotating them would: the running processes pick the
// new files up at their next handshake (or reload), without a restart.
func rotateAll(t *testing.T) {
	t.Helper()
	dir := certsDirFor(t)
	if dir == "" {
		return
	}
	certsMu.Lock()
	defer certsMu.Unlock()
	ca, err := certs.LoadCA(filepath.Join(dir, certs.CAFile), filepath.Join(dir, certs.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.crt"))
	n := 0
	for _, f := range files {
		if filepath.Base(f) == certs.CAFile {
			continue
		}
		cs, err := certs.ReadCertificates(f)
		if err != nil {
			t.Fatal(err)
		}
		id, err := certs.IdentityOf(cs[0])
		if err != nil {
			t.Fatal(err)
		}
		hosts := slices.Clone(cs[0].DNSNames)
		for _, ip := range cs[0].IPAddresses {
			hosts = append(hosts, ip.String())
		}
		if _, err := certs.Create(dir, ca, id, hosts, 0); err != nil {
			t.Fatal(err)
		}
		n++
	}
	t.Logf("replaced %d certificates", n)
}

// servesCurrent checks that the server at addr presents the certificate
// now in file, of t's directory: it reloaded it.
func servesCurrent(t *testing.T, addr, file string) {
	t.Helper()
	cs, err := certs.ReadCertificates(filepath.Join(certsDirFor(t), file))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates[0]; !got.Equal(cs[0]) {
		t.Errorf("%s presents the certificate with serial %x, not the current %s (serial %x)", addr, got.SerialNumber, file, cs[0].SerialNumber)
	}
}
