package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestManagerList checks --manager takes a comma-separated list, says so,
// and names a bad entry.
func TestManagerList(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"get", "-h"}, exitOK, "comma-separated list"},
		{[]string{"get", "--insecure", "--manager", "127.0.0.1:1,manager-2", "k"}, exitUsage, `kv get: --manager: address "manager-2" is not host:port`},
		{[]string{"put", "--insecure", "--manager", "127.0.0.1:1,,127.0.0.1:2", "k", "v"}, exitUsage, `kv put: --manager: an empty address in "127.0.0.1:1,,127.0.0.1:2"`},
		{[]string{"serve", "--insecure", "--listen", "127.0.0.1:0", "--manager", "127.0.0.1:1,:x"}, exitUsage, `kv serve: --manager: address ":x" is not host:port`},
		// Plaintext only when asked for, even to this machine.
		{[]string{"get", "--manager", "127.0.0.1:1", "k"}, exitUsage, "or --insecure to speak plaintext"},
		// Two ports on localhost where nothing listens: the last dial error.
		{[]string{"get", "--insecure", "--manager", "127.0.0.1:1,127.0.0.1:2", "--dial-timeout", "1s", "k"}, exitFailure, `connect: connection refused`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("kv %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
