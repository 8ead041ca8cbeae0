package certs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// secretKey is what a Kubernetes Secret's data key may be
// (k8s.io/apimachinery's IsConfigMapKey).
var secretKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// TestFileNamesFitASecret: every certificate's file name is a key a
// Kubernetes Secret can hold, so a certificates directory mounts from a
// Secret as it is. An Owner named by its address (the kv example's
// default ID, "127.0.0.1:8001") was written owner.127.0.0.1:8001.crt, which
// no Secret can carry.
func TestFileNamesFitASecret(t *testing.T) {
	names := map[string]string{
		"kv-1":           "owner.kv-1",
		"127.0.0.1:8001": "owner.127.0.0.1_3a8001",
		"[::1]:8001":     "owner._5b_3a_3a1_5d_3a8001",
		"a_3a":           "owner.a_5f3a", // not the file of "a:"
		"a:":             "owner.a_3a",
		"../x":           "owner..._2fx",
		"ünï":            "owner._c3_bcn_c3_af",
	}
	seen := map[string]string{}
	for name, want := range names {
		id := certs.Identity{Role: certs.Owner, Name: name, Namespaces: []string{"default"}}
		got := certs.FileBase(id)
		if got != want {
			t.Errorf("FileBase(%q) = %q, want %q", name, got, want)
		}
		for _, ext := range []string{".crt", ".key"} {
			if !secretKey.MatchString(got+ext) || len(got+ext) > 253 {
				t.Errorf("%s%s is no Secret key", got, ext)
			}
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q share the file %s", name, other, got)
		}
		seen[got] = name
	}
}

// TestOpenReadsOldFileNames: a directory written before the names were
// kept to a Secret's (owner.127.0.0.1:8001.crt) still opens, and a new
// file wins over an old one.
func TestOpenReadsOldFileNames(t *testing.T) {
	id := certs.Identity{Role: certs.Owner, Name: "127.0.0.1:8001", Namespaces: []string{"default"}}
	dir, ca := group(t, id)
	newBase, oldBase := certs.FileBase(id), certs.OldFileBase(id)
	if oldBase != "owner.127.0.0.1:8001" {
		t.Fatalf("OldFileBase = %q", oldBase)
	}
	for _, ext := range []string{".crt", ".key"} {
		if err := os.Rename(filepath.Join(dir, newBase+ext), filepath.Join(dir, oldBase+ext)); err != nil {
			t.Fatal(err)
		}
	}
	src, err := certs.Open(dir, certs.Owner, id.Name)
	if err != nil {
		t.Fatalf("the old file name: %v", err)
	}
	if got := src.Identity(); got.Name != id.Name {
		t.Errorf("opened %s", got)
	}
	// Rotated with the new name: the new file is the one read.
	if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	src, err = certs.Open(dir, certs.Owner, id.Name)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(src.NotAfter()); left > 2*time.Hour {
		t.Errorf("after a rotation under the new name, the certificate read has %v left: the old one (a year), not the new one (an hour)", left)
	}
}

// TestOpenTheOneCertificateOfItsHolder: a directory whose one certificate
// of the role is named otherwise (cert-manager's csi-driver writes
// owner.pod.crt before it knows the pod's name) opens for the holder it
// names, and for nobody else.
func TestOpenTheOneCertificateOfItsHolder(t *testing.T) {
	id := certs.Identity{Role: certs.Owner, Name: "kv-5d8f-x2", Namespaces: []string{"default"}}
	dir, _ := group(t, id)
	for _, ext := range []string{".crt", ".key"} {
		if err := os.Rename(filepath.Join(dir, certs.FileBase(id)+ext), filepath.Join(dir, "owner.pod"+ext)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := certs.Open(dir, certs.Owner, id.Name); err != nil {
		t.Errorf("its holder: %v", err)
	}
	if _, err := certs.Open(dir, certs.Owner, "kv-other"); err == nil || !strings.Contains(err.Error(), `owner "kv-5d8f-x2"`) {
		t.Errorf("another Owner: %v, want a refusal naming whose it is", err)
	}
}
