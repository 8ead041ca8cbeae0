package kv

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunExitCodes checks the command line: usage errors exit 2 and
// runtime failures 1, with a one-line message that names flags, not Go
// fields, and says why the Manager could not be reached. The scenario with
// a Manager runs in internal/e2e.
func TestRunExitCodes(t *testing.T) {
	t.Setenv("LEASEHOLD_CERTS_DIR", "")
	t.Setenv("LEASEHOLD_INSECURE", "")
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{nil, exitUsage, "usage:"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"help"}, exitOK, ""},
		{[]string{"get", "-h"}, exitOK, "-timeout"},
		{[]string{"get", "--insecure"}, exitUsage, "want at least one KEY, got none"},
		{[]string{"put", "--insecure", "k"}, exitUsage, "want KEY VALUE pairs, got 1 arguments"},
		{[]string{"put", "--insecure", "k", "v", "k2"}, exitUsage, "want KEY VALUE pairs, got 3 arguments"},
		{[]string{"serve", "--insecure"}, exitUsage, "--listen is required"},
		{[]string{"get", "--bogus", "k"}, exitUsage, "flag provided but not defined"},
		{[]string{"get", "k"}, exitUsage, "pass --certs-dir DIR or set $LEASEHOLD_CERTS_DIR"},
		// Plaintext only when asked for, even to this machine.
		{[]string{"get", "--manager", "127.0.0.1:1", "k"}, exitUsage, "or --insecure to speak plaintext"},
		{[]string{"get", "k", "--insecure", "--dial-timeout", "0s"}, exitUsage, "--dial-timeout 0s must be positive"},
		{[]string{"put", "k", "--insecure", "v", "extra"}, exitUsage, "want KEY VALUE pairs, got 3 arguments"},
		{[]string{"put", "--insecure", "--", "-k", "--x", "-j"}, exitUsage, "want KEY VALUE pairs, got 3 arguments"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("kv %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
