package certs_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/certs"
)

// TestFlagsChoice checks that plaintext is chosen only explicitly, and that
// a flag wins over the environment.
func TestFlagsChoice(t *testing.T) {
	for _, tc := range []struct {
		env, insecureEnv string
		args             []string
		dir              string
		insecure         bool
		err              string
	}{
		{"", "", nil, "", false, "--certs-dir (or $LEASEHOLD_CERTS_DIR) is required, or --insecure"},
		{"", "0", nil, "", false, "--insecure for plaintext"},
		{"/env", "", nil, "/env", false, ""},
		{"", "", []string{"--certs-dir", "/flag"}, "/flag", false, ""},
		{"", "", []string{"--insecure"}, "", true, ""},
		{"", "1", nil, "", true, ""},
		{"", "true", nil, "", true, ""},
		{"/env", "1", nil, "", true, ""},
		{"/env", "", []string{"--insecure"}, "", true, ""},
		{"", "1", []string{"--certs-dir", "/flag"}, "/flag", false, ""},
		{"", "", []string{"--certs-dir", "/flag", "--insecure"}, "", true, ""},
	} {
		t.Setenv(certs.DirEnv, tc.env)
		t.Setenv(certs.InsecureEnv, tc.insecureEnv)
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := certs.AddFlags(fs, "test")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		dir, insecure, err := f.Choice()
		if dir != tc.dir || insecure != tc.insecure || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("env %q, %s=%q, args %v: %q %v %v, want %q %v %q", tc.env, certs.InsecureEnv, tc.insecureEnv, tc.args, dir, insecure, err, tc.dir, tc.insecure, tc.err)
		}
	}
}
