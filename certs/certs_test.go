package certs_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// group makes a CA in a temporary directory and one certificate per id.
func group(t *testing.T, ids ...certs.Identity) (string, *certs.CA) {
	t.Helper()
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1", "localhost"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ca
}

func leaf(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(decode(t, pemBytes))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIdentityRoundTrip(t *testing.T) {
	_, ca := group(t)
	for _, id := range []certs.Identity{
		{Role: certs.Replica, Name: "3"},
		{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default", "mail"}},
		{Role: certs.Lookup, Name: "frontend"},
		{Role: certs.Operator, Name: "alice"},
	} {
		c, _, err := ca.Issue(id, nil, time.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := certs.IdentityOf(leaf(t, c))
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != id.String() {
			t.Errorf("identity %s came back as %s", id, got)
		}
	}
	for _, bad := range []certs.Identity{
		{Role: certs.Owner, Name: "kv-1"}, // no namespace
		{Role: certs.Replica, Name: "x"},  // not a Raft ID
		{Role: "admin", Name: "root"},     // no such role
		{Role: certs.Operator, Name: ""},  // no name
		{Role: certs.Replica, Name: "0"},  // Raft ID 0
	} {
		if _, _, err := ca.Issue(bad, nil, time.Now(), 0); err == nil {
			t.Errorf("issued a certificate for %+v", bad)
		}
	}
}

func TestMayUse(t *testing.T) {
	o := certs.Identity{Role: certs.Owner, Name: "a", Namespaces: []string{"x"}}
	if !o.MayUse("x") || o.MayUse("y") {
		t.Error("an owner may use exactly its namespaces")
	}
	if (certs.Identity{Role: certs.Owner, Name: "a"}).MayUse("x") {
		t.Error("an owner naming no namespace may use one")
	}
	if !(certs.Identity{Role: certs.Lookup, Name: "l"}).MayUse("y") {
		t.Error("a lookup naming no namespace may use every one")
	}
}

func TestVerifySaysWhatIsWrong(t *testing.T) {
	dir, ca := group(t, certs.Identity{Role: certs.Replica, Name: "1"})
	src, err := certs.Open(dir, certs.Replica, "")
	if err != nil {
		t.Fatal(err)
	}
	_, other := group(t)
	owner := certs.Identity{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}}
	good, _, _ := ca.Issue(owner, nil, time.Now(), 0)
	foreign, _, _ := other.Issue(owner, nil, time.Now(), 0)
	expired, _, _ := ca.Issue(owner, nil, time.Now().Add(-48*time.Hour), time.Hour)

	if id, err := src.Verify([]*x509.Certificate{leaf(t, good)}); err != nil || id.Name != "kv-1" {
		t.Fatalf("a good certificate: %v, %v", id, err)
	}
	for _, c := range []struct {
		chain []*x509.Certificate
		want  error
		says  string
	}{
		{nil, certs.ErrNoCertificate, "no certificate"},
		{[]*x509.Certificate{leaf(t, foreign)}, certs.ErrUnknownCA, "unknown authority"},
		{[]*x509.Certificate{leaf(t, expired)}, certs.ErrExpired, "expired"},
	} {
		_, err := src.Verify(c.chain)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("got %v, want %v saying %q", err, c.want, c.says)
		}
	}
}

func TestOpenNamesWhatIsMissing(t *testing.T) {
	dir, _ := group(t, certs.Identity{Role: certs.Lookup, Name: "a"}, certs.Identity{Role: certs.Lookup, Name: "b"})
	if _, err := certs.Open("", certs.Owner, ""); err == nil || !strings.Contains(err.Error(), certs.DirEnv) {
		t.Errorf("no dir: %v", err)
	}
	if _, err := certs.Open(dir, certs.Owner, ""); err == nil || !strings.Contains(err.Error(), "create-owner") {
		t.Errorf("no owner cert: %v", err)
	}
	if _, err := certs.Open(dir, certs.Lookup, ""); err == nil || !strings.Contains(err.Error(), "say which") {
		t.Errorf("two lookup certs: %v", err)
	}
	if s, err := certs.Open(dir, certs.Lookup, "b"); err != nil || s.Identity().Name != "b" {
		t.Errorf("named: %v", err)
	}
}

// A handshake between two Sources: the client checks the server's role
// and host name, the server learns the client's identity.
func TestHandshakeChecksRoleAndHost(t *testing.T) {
	dir, _ := group(t, certs.Identity{Role: certs.Replica, Name: "1"},
		certs.Identity{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}})
	rep, _ := certs.Open(dir, certs.Replica, "1")
	own, _ := certs.Open(dir, certs.Owner, "kv-1")
	try := func(server, client *certs.Source, name string, want ...certs.Role) error {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", server.ServerTLS())
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		cfg := client.ClientTLSFor(name, want...)
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := try(rep, own, "127.0.0.1", certs.Replica); err != nil {
		t.Fatalf("owner to replica: %v", err)
	}
	if err := try(own, own, "127.0.0.1", certs.Replica); err == nil || !strings.Contains(err.Error(), "wrong identity") {
		t.Errorf("an owner posing as a replica: %v", err)
	}
	if err := try(rep, own, "10.9.9.9", certs.Replica); err == nil || !strings.Contains(err.Error(), "not for") {
		t.Errorf("a replica at another host: %v", err)
	}
}

// Replacing the files is picked up without a new Source: rotation.
func TestReloadPicksUpANewCertificate(t *testing.T) {
	id := certs.Identity{Role: certs.Owner, Name: "kv-1", Namespaces: []string{"default"}}
	dir, ca := group(t, id)
	src, err := certs.Open(dir, certs.Owner, "kv-1")
	if err != nil {
		t.Fatal(err)
	}
	before := src.NotAfter()
	if _, err := certs.Create(dir, ca, id, nil, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if !src.NotAfter().Before(before) {
		t.Errorf("the new certificate (2h) was not loaded: expiry %v, before %v", src.NotAfter(), before)
	}
	// A certificate for someone else in the same file is refused, and the
	// old one kept.
	other := certs.Identity{Role: certs.Owner, Name: "kv-2", Namespaces: []string{"default"}}
	c, k, _ := ca.Issue(other, nil, time.Now(), 0)
	os.WriteFile(filepath.Join(dir, "owner.kv-1.key"), k, 0o600)
	os.WriteFile(filepath.Join(dir, "owner.kv-1.crt"), c, 0o600)
	if err := src.Reload(); err == nil || src.Identity().Name != "kv-1" {
		t.Errorf("a certificate for another identity was loaded: %v, %s", err, src.Identity())
	}
}

// Watch warns, in the log, of a certificate about to expire.
func TestWatchWarnsBeforeExpiry(t *testing.T) {
	id := certs.Identity{Role: certs.Lookup, Name: "l"}
	dir, ca := group(t)
	// Valid for an hour, of which two minutes are left: within the warning
	// window (a fifth of the lifetime).
	c, k, err := ca.Issue(id, nil, time.Now().Add(-58*time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "lookup.l.key"), k, 0o600)
	os.WriteFile(filepath.Join(dir, "lookup.l.crt"), c, 0o600)
	src, err := certs.Open(dir, certs.Lookup, "l")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one round, then return
	src.Watch(ctx, slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	if !strings.Contains(buf.String(), "certificate expires soon") || !strings.Contains(buf.String(), `lookup \"l\"`) {
		t.Errorf("no expiry warning in %q", buf.String())
	}

	// A fresh certificate: no warning.
	if _, err := certs.Create(dir, ca, id, nil, 0); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	src.Watch(ctx, slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	if strings.Contains(buf.String(), "expires soon") || !strings.Contains(buf.String(), "certificates reloaded") {
		t.Errorf("after replacing the certificate: %q", buf.String())
	}
}
