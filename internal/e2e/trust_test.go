package e2e

import (
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/certs"
)

// Every scenario runs with mutual TLS, as a production group does. A test
// gets its own throwaway CA the first time it asks for its trust material
// (trustFor), in a directory of its own, with a certificate for each role
// its processes play:
//
//	replica.1 … replica.5   the Manager replicas (leasehold manager --id N)
//	owner.<ID>              each Owner, of namespace default, made as it starts (ownerCert)
//	lookup.e2e              the frontends: kv put/get, gateways, the Lookups and HTTP clients of this process
//	operator.e2e            the CLI: status, drain, cluster, watch; the dashboard
//
// every one for 127.0.0.1 and localhost. The processes a test starts find
// the directory in $LEASEHOLD_CERTS_DIR (envFor) and pick their own
// certificate from it (a Manager by its ID, an Owner by its ID, a client
// command the operator's, a frontend the lookup's), and the clients of this
// process dial with the same directory. Plaintext appears only where a
// test checks that it is refused (plaintextRefused) or an attacker sends
// it (the hostile soak).

// trust is one test's CA and certificates directory.
type trust struct {
	dir string
	ca  *certs.CA

	mu      sync.Mutex               // guards the files and sources
	sources map[string]*certs.Source // by file base
}

// trusts maps a top-level test's name to its trust: its subtests share it.
var trusts sync.Map

// trustFor returns t's trust material, making the CA and the certificates
// of the replicas, the lookup and the operator the first time.
func trustFor(t *testing.T) *trust {
	t.Helper()
	name, _, _ := strings.Cut(t.Name(), "/")
	if tr, ok := trusts.Load(name); ok {
		return tr.(*trust)
	}
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
		if _, err := certs.Create(dir, ca, id, localHosts, 0); err != nil {
			t.Fatal(err)
		}
	}
	tr, loaded := trusts.LoadOrStore(name, &trust{dir: dir, ca: ca, sources: map[string]*certs.Source{}})
	if !loaded {
		t.Cleanup(func() { trusts.Delete(name) })
	}
	return tr.(*trust)
}

// localHosts are the hosts every certificate of a test names.
var localHosts = []string{"127.0.0.1", "localhost"}

// certsDirFor returns t's certificates directory.
func certsDirFor(t *testing.T) string { return trustFor(t).dir }

// envFor is the environment of the processes t starts: this process's,
// with t's certificates directory and without $LEASEHOLD_INSECURE.
func envFor(t *testing.T) []string {
	return append(os.Environ(), certs.DirEnv+"="+certsDirFor(t), certs.InsecureEnv+"=")
}

// command is exec.Command for a short-lived process of t (a CLI call),
// with envFor's environment.
func command(t *testing.T, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Env = envFor(t)
	return cmd
}

// ownerCert creates the certificate of Owner id, of namespace default,
// unless it exists.
func ownerCert(t *testing.T, id string) {
	t.Helper()
	trustFor(t).create(t, certs.Identity{Role: certs.Owner, Name: id, Namespaces: []string{"default"}}, false)
}

// startOwner starts a server that is Owner id, with its certificate.
func startOwner(t *testing.T, id, path string, args ...string) *proc {
	t.Helper()
	ownerCert(t, id)
	return start(t, id, path, args...)
}

// create issues id's certificate into the directory; an existing one is
// kept unless replace.
func (tr *trust) create(t *testing.T, id certs.Identity, replace bool) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, err := os.Stat(filepath.Join(tr.dir, certs.FileBase(id)+".crt")); err == nil && !replace {
		return
	}
	if _, err := certs.Create(tr.dir, tr.ca, id, localHosts, 0); err != nil {
		t.Fatal(err)
	}
}

// source opens (once) the certificate of role and name in t's directory,
// for a client or server of this process.
func sourceFor(t *testing.T, role certs.Role, name string) *certs.Source {
	t.Helper()
	tr := trustFor(t)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	base := certs.FileBase(certs.Identity{Role: role, Name: name})
	if src, ok := tr.sources[base]; ok {
		return src
	}
	src, err := certs.Open(tr.dir, role, name)
	if err != nil {
		t.Fatal(err)
	}
	tr.sources[base] = src
	return src
}

// frontendTransport is an HTTP transport of this process's frontend: it
// presents the lookup certificate and accepts servers of the roles in want
// whose certificate names the host dialled. t.Cleanup closes its idle
// connections.
func frontendTransport(t *testing.T, want ...certs.Role) *http.Transport {
	tr := sourceFor(t, certs.Lookup, "e2e").HTTPTransport(want...)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
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
	tr := trustFor(t)
	files, _ := filepath.Glob(filepath.Join(tr.dir, "*.crt"))
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
		tr.create(t, id, true)
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
