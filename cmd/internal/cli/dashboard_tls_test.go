package cli

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/cmd/internal/dashboard"
)

// TestDashboardTLS runs leasehold dashboard with certificates, over real
// TCP: it serves HTTPS with its own (operator) certificate; a viewer
// without a certificate, or with one of another CA, is refused with a
// message that says what is wrong; a lookup's certificate may watch but
// not drain (403 naming its identity and role); an operator's drains,
// the dashboard acting with its own certificate.
func TestDashboardTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() // the Manager's and the dashboard's
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	local := []string{"127.0.0.1"}
	for _, id := range []certs.Identity{{Role: certs.Replica, Name: "1"}, {Role: certs.Operator, Name: "dash"}} {
		if _, err := certs.Create(dir, ca, id, local, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The viewers: each certificate in a directory of its own, with the CA.
	viewer := func(ca *certs.CA, caDir string, id certs.Identity) *certs.Source {
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
	alice := viewer(ca, dir, certs.Identity{Role: certs.Operator, Name: "alice"})
	frontend := viewer(ca, dir, certs.Identity{Role: certs.Lookup, Name: "frontend"})
	otherDir := t.TempDir()
	other, err := certs.CreateCA(otherDir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	mallory := viewer(other, otherDir, certs.Identity{Role: certs.Operator, Name: "mallory"})

	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--certs-dir", dir)
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	d := startCLI(t, "dashboard", "--manager", addr, "--listen", "127.0.0.1:0", "--refresh", "200ms", "--certs-dir", dir)
	waitFor(t, "the dashboard to listen", 10*time.Second, func() bool {
		return strings.Contains(d.stdout.String(), "leasehold dashboard on https://")
	})
	url := strings.Fields(strings.TrimPrefix(d.stdout.String(), "leasehold dashboard on "))[0]

	client := func(src *certs.Source) *http.Client {
		return &http.Client{Transport: src.HTTPTransport(certs.Operator), Timeout: 5 * time.Second}
	}
	// foreign presents mallory's certificate, and trusts any server: the
	// refusal must come from the dashboard, not from the viewer.
	foreign := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return mallory.ClientTLS().GetClientCertificate(nil)
		}}}}
	none := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	call := func(c *http.Client, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set(dashboard.ActionHeader, "drain")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	drain := `{"namespace":"default","owner":"o-9"}`
	// The first view comes once the dashboard has heard from the Manager.
	waitFor(t, "the dashboard's first view", 10*time.Second, func() bool {
		code, _ := call(client(alice), "GET", "api/view", "")
		return code == http.StatusOK
	})

	for _, tc := range []struct {
		name   string
		c      *http.Client
		method string
		path   string
		code   int
		want   string
	}{
		{"no certificate", none, "GET", "api/view", http.StatusUnauthorized, "no certificate was presented"},
		{"another CA's operator", foreign, "GET", "api/view", http.StatusUnauthorized, "unknown authority"},
		{"another CA's operator", foreign, "POST", "api/drain", http.StatusUnauthorized, "unknown authority"},
		{"a lookup", client(frontend), "GET", "api/view", http.StatusOK, `"namespaces"`},
		{"a lookup", client(frontend), "POST", "api/drain", http.StatusForbidden, `lookup "frontend" may not drain: draining needs the operator role`},
		// The drain reaches the Manager, with the dashboard's certificate:
		// the answer is the Manager's (no such Owner), not a refusal of
		// the caller.
		{"an operator", client(alice), "POST", "api/drain", http.StatusOK, `cannot drain o-9: no live owner \"o-9\"`},
	} {
		body := ""
		if tc.method == "POST" {
			body = drain
		}
		code, got := call(tc.c, tc.method, tc.path, body)
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s /%s: %d %q; want %d and %q", tc.name, tc.method, tc.path, code, got, tc.code, tc.want)
		}
	}
	// A browser without a certificate gets a page that says how to import
	// the operator's (a PKCS#12 file of leasehold cert export-p12).
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	resp, err := none.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(page), "leasehold cert export-p12 operator.alice") ||
		!strings.Contains(string(page), "no certificate was presented") || !strings.Contains(string(page), "Your certificates → Import") {
		t.Errorf("a browser without a certificate: %d\n%s\nwant 401 and the page on importing a PKCS#12 file", resp.StatusCode, page)
	}
	// Plain HTTP gets no page.
	plain := strings.Replace(url, "https://", "http://", 1)
	if resp, err := http.Get(plain + "api/view"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP: %d %q, want a refusal", resp.StatusCode, b)
		}
	}
	if code := d.stop(t); code != ExitOK {
		t.Errorf("dashboard exited %d on interrupt, want 0; stderr:\n%s", code, d.stderr.String())
	}
}
