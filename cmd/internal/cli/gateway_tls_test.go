package cli

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// certAlone writes id's certificate, signed by ca, into a directory of its
// own with the CA's certificate from caDir, and opens it.
func certAlone(t *testing.T, ca *certs.CA, caDir string, id certs.Identity) *certs.Source {
	t.Helper()
	d := t.TempDir()
	b, err := os.ReadFile(filepath.Join(caDir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, certs.CAFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Create(d, ca, id, nil, 0); err != nil {
		t.Fatal(err)
	}
	src, err := certs.Open(d, id.Role, id.Name)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestGatewayTLS runs leasehold gateway --tls --client-certs over real
// TCP: a frontend with a certificate of the group's CA is served over
// HTTPS; one without a certificate, or with another CA's, is refused
// with a message that says what is wrong; /readyz answers anyone.
func TestGatewayTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []certs.Identity{{Role: certs.Replica, Name: "1"}, {Role: certs.Lookup, Name: "gw"}} {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	frontend := certAlone(t, ca, dir, certs.Identity{Role: certs.Lookup, Name: "frontend"})
	otherDir := t.TempDir()
	other, err := certs.CreateCA(otherDir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	mallory := certAlone(t, other, otherDir, certs.Identity{Role: certs.Lookup, Name: "mallory"})

	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--certs-dir", dir)
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	if code, _, stderr := cli(t, "gateway", "--manager", addr, "--client-certs", "--route", "name=kv,prefix=/kv/,key=path:1", "--certs-dir", dir); code == ExitOK || !strings.Contains(stderr, "--client-certs needs --tls") {
		t.Errorf("--client-certs without --tls: exit %d, %q", code, stderr)
	}
	b := startCLI(t, "gateway", "--manager", addr, "--listen", "127.0.0.1:0", "--route", "name=kv,prefix=/kv/,key=path:1,timeout=200ms",
		"--certs-dir", dir, "--tls", "--client-certs")
	re := regexp.MustCompile(`leasehold gateway listening on (\S+) `)
	var gw string
	waitFor(t, "the gateway to listen", 10*time.Second, func() bool {
		m := re.FindStringSubmatch(b.stdout.String())
		if m != nil {
			gw = "https://" + m[1]
		}
		return m != nil
	})
	anyServer := func(cert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, GetClientCertificate: cert}}}
	}
	for _, tc := range []struct {
		name string
		c    *http.Client
		path string
		code int // 0: anything but 401
		want string
	}{
		{"no certificate", anyServer(nil), "/kv/alice", http.StatusUnauthorized, "no certificate was presented"},
		{"another CA's", anyServer(mallory.ClientTLS().GetClientCertificate), "/kv/alice", http.StatusUnauthorized, "unknown authority"},
		{"no certificate, probe", anyServer(nil), "/readyz", 0, ""},
		// No Owner holds alice: the gateway itself answers, after the route's deadline.
		{"the group's frontend", &http.Client{Timeout: 5 * time.Second, Transport: frontend.HTTPTransport(certs.Lookup)}, "/kv/alice", 0, ""},
	} {
		resp, err := tc.c.Get(gw + tc.path)
		if err != nil {
			t.Errorf("%s: GET %s: %v", tc.name, tc.path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tc.code != 0 && (resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want)) {
			t.Errorf("%s: GET %s: %d %q; want %d and %q", tc.name, tc.path, resp.StatusCode, body, tc.code, tc.want)
		}
		if tc.code == 0 && resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s: GET %s: refused: %q", tc.name, tc.path, body)
		}
	}
	// The gateway presented its own certificate, of the group's CA and for
	// the host dialled: the frontend's transport checked it above.
	if code := b.stop(t); code != ExitOK {
		t.Errorf("gateway exited %d on interrupt, want 0; stderr:\n%s", code, b.stderr.String())
	}
}
