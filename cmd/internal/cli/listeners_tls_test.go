package cli

import (
	"crypto/tls"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestManagerListenersWithCertificates: with certificates, the Manager's
// gRPC listener refuses a client without a certificate at the TLS
// handshake, while its --metrics-listen still answers /healthz and
// /readyz to anyone (a load balancer's probe has no certificate) and
// /metrics with 401 saying why.
func TestManagerListenersWithCertificates(t *testing.T) {
	t.Parallel()
	dir, _ := certsFor(t)
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--metrics-listen", "127.0.0.1:0", "--certs-dir", dir)
	var base string
	waitFor(t, "the metrics URL in the log", 10*time.Second, func() bool {
		match := regexp.MustCompile(`url=(https://\S+)/metrics`).FindStringSubmatch(m.stderr.String())
		if match != nil {
			base = match[1]
		}
		return match != nil
	})
	none := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := none.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s without a certificate: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "/readyz to answer ready", 10*time.Second, func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz without a certificate: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusUnauthorized || !strings.Contains(body, "no certificate") {
		t.Errorf("/metrics without a certificate: %d %q, want 401 saying so", code, body)
	}
	// The gRPC listener: the handshake itself fails.
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("a connection to the gRPC listener without a certificate: %v, want the TLS alert \"certificate required\"", err)
	}
}
