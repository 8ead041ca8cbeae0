package certs_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/certs"
)

// serveGroup serves, with ServeHTTP and src, "/open" to any certificate of
// the group and "/internal" to the Owners of namespace "default" only
// (OwnersOnly), and returns the base URL.
func serveGroup(t *testing.T, src *certs.Source) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := certs.FromHTTP(r)
		io.WriteString(w, "hello "+id.Name)
	})
	mux.Handle("/open", hello)
	mux.Handle("/internal", certs.OwnersOnly(src, "", hello))
	srv := &http.Server{Handler: mux}
	done := make(chan error, 1)
	go func() { done <- certs.ServeHTTP(srv, lis, src) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
	_, scheme := certs.DialHTTP(src)
	return scheme + "://" + lis.Addr().String()
}

// get is the status and body of url through t.
func get(t *testing.T, rt http.RoundTripper, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: rt}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeHTTPAndOwnersOnly(t *testing.T) {
	dir, _ := group(t,
		certs.Identity{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}},
		certs.Identity{Role: certs.Owner, Name: "kv-2", Namespaces: []string{"default"}},
		certs.Identity{Role: certs.Owner, Name: "mail-1", Namespaces: []string{"mail"}},
		certs.Identity{Role: certs.Lookup, Name: "frontend", Namespaces: []string{"default"}})
	open := func(role certs.Role, name string) *certs.Source {
		src, err := certs.OpenIfSet(dir, role, name)
		if err != nil || src == nil {
			t.Fatalf("OpenIfSet %s %s: %v, %v", role, name, src, err)
		}
		return src
	}
	base := serveGroup(t, open(certs.Owner, "kv-1"))
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("with certificates, DialHTTP's scheme is not https: %s", base)
	}
	// No certificate at all: 401, on every path.
	bare := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	for _, p := range []string{"/open", "/internal"} {
		if code, body := get(t, bare, base+p); code != http.StatusUnauthorized {
			t.Errorf("no certificate, %s: %d %q, want 401", p, code, body)
		}
	}
	for _, c := range []struct {
		name           string
		src            *certs.Source
		open, internal int
	}{
		{"another Owner of the namespace", open(certs.Owner, "kv-2"), 200, 200},
		{"a frontend", open(certs.Lookup, "frontend"), 200, 403},
		{"an Owner of another namespace", open(certs.Owner, "mail-1"), 200, 403},
	} {
		rt, scheme := certs.DialHTTP(c.src, certs.Owner)
		if scheme != "https" {
			t.Errorf("%s: DialHTTP's scheme %q", c.name, scheme)
		}
		if code, body := get(t, rt, base+"/open"); code != c.open {
			t.Errorf("%s, /open: %d %q, want %d", c.name, code, body, c.open)
		}
		code, body := get(t, rt, base+"/internal")
		if code != c.internal {
			t.Errorf("%s, /internal: %d %q, want %d", c.name, code, body, c.internal)
		}
		if code == http.StatusForbidden && !strings.Contains(body, `only the Owners of namespace "default"`) {
			t.Errorf("%s: the 403 does not say who may: %q", c.name, body)
		}
		if code == http.StatusOK && body != "hello kv-2" {
			t.Errorf("%s: the handler did not see the identity: %q", c.name, body)
		}
	}
}

// A nil Source (plaintext) serves plain HTTP to anyone, OwnersOnly
// included, and DialHTTP dials it with "http".
func TestServeHTTPPlaintext(t *testing.T) {
	src, err := certs.OpenIfSet("", certs.Owner, "kv-1")
	if src != nil || err != nil {
		t.Fatalf("OpenIfSet with no directory: %v, %v; want nil, nil", src, err)
	}
	base := serveGroup(t, nil)
	rt, scheme := certs.DialHTTP(nil, certs.Owner)
	if scheme != "http" || rt.TLSClientConfig != nil && len(rt.TLSClientConfig.Certificates) != 0 {
		t.Fatalf("DialHTTP(nil): scheme %q", scheme)
	}
	if rt == http.DefaultTransport {
		t.Error("DialHTTP(nil) is the shared default transport, which its callers would tune")
	}
	for _, p := range []string{"/open", "/internal"} {
		if code, body := get(t, rt, base+p); code != http.StatusOK || body != "hello " {
			t.Errorf("plaintext %s: %d %q", p, code, body)
		}
	}
}

// OpenIfSet with a directory is Open: a missing certificate is an error.
func TestOpenIfSetOpens(t *testing.T) {
	dir, _ := group(t, certs.Identity{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}})
	if _, err := certs.OpenIfSet(dir, certs.Owner, "nobody"); err == nil {
		t.Error("OpenIfSet of a certificate that is not there: no error")
	}
}
