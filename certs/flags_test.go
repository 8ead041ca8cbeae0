package certs_test

import (
	"flag"
	"io"
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
		chosen           bool
	}{
		{"", "", nil, "", false, false},
		{"", "0", nil, "", false, false},
		{"/env", "", nil, "/env", false, true},
		{"", "", []string{"--certs-dir", "/flag"}, "/flag", false, true},
		{"", "", []string{"--insecure"}, "", true, true},
		{"", "1", nil, "", true, true},
		{"", "true", nil, "", true, true},
		{"/env", "1", nil, "", true, true},
		{"/env", "", []string{"--insecure"}, "", true, true},
		{"", "1", []string{"--certs-dir", "/flag"}, "/flag", false, true},
		{"", "", []string{"--certs-dir", "/flag", "--insecure"}, "", true, true},
	} {
		t.Setenv(certs.DirEnv, tc.env)
		t.Setenv(certs.InsecureEnv, tc.insecureEnv)
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var dir string
		var insecure bool
		f := certs.AddFlags(fs, &dir, &insecure, "test")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if chosen := f.Chosen(); dir != tc.dir || insecure != tc.insecure || chosen != tc.chosen {
			t.Errorf("env %q, %s=%q, args %v: %q %v chosen %v, want %q %v %v", tc.env, certs.InsecureEnv, tc.insecureEnv, tc.args, dir, insecure, chosen, tc.dir, tc.insecure, tc.chosen)
		}
	}
}
