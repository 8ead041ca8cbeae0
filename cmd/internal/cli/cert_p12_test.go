package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	"github.com/leasehold/leasehold/certs"
)

// TestCertExportP12: export-p12 writes an operator's certificate, its key
// and the CA's as a PKCS#12 file a browser imports, encrypted with the
// password given and readable by its owner alone; a name with no
// certificate is refused, naming 'leasehold cert list'.
func TestCertExportP12(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"cert", "create-ca"}, {"cert", "create-operator", "alice"}} {
		if code, _, stderr := cli(t, append(args, "--certs-dir", dir)...); code != ExitOK {
			t.Fatalf("%v: exit %d, %s", args, code, stderr)
		}
	}
	code, stdout, stderr := cli(t, "cert", "export-p12", "operator.alice", "--certs-dir", dir, "--password", "a phrase")
	out := filepath.Join(dir, "operator.alice.p12")
	if code != ExitOK || !strings.HasPrefix(stdout, "wrote "+out) {
		t.Fatalf("export-p12: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(out)
	if _, _, _, err := pkcs12.DecodeChain(b, "wrong"); err == nil {
		t.Errorf("decoded with the wrong password")
	}
	key, leaf, cas, err := pkcs12.DecodeChain(b, "a phrase")
	if err != nil || key == nil || len(cas) != 1 || !cas[0].IsCA {
		t.Fatalf("decode: %v (key %v, %d CA certificates)", err, key != nil, len(cas))
	}
	if id, err := certs.IdentityOf(leaf); err != nil || id.Role != certs.Operator || id.Name != "alice" {
		t.Errorf("the certificate in the file is %v (%v), want operator alice", id, err)
	}
	code, _, stderr = cli(t, "cert", "export-p12", "operator.bob", "--certs-dir", dir)
	if code != ExitFailure || !strings.Contains(stderr, "leasehold cert list") {
		t.Errorf("export-p12 of a missing certificate: exit %d, %s", code, stderr)
	}
}
