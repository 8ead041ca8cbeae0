package kv

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestManagerList checks --manager takes a comma-separated list, says so,
// and names a bad entry; and that a Manager nobody listens for is named
// with its dial error. Each command names its Manager and --insecure, so
// the environment's $LEASEHOLD_MANAGER and $LEASEHOLD_INSECURE change
// nothing, and it runs beside the package's other tests; TestRunExitCodes,
// which empties the environment for the cases that read it (plaintext only
// when asked for), cannot.
func TestManagerList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"get", "-h"}, exitOK, "comma-separated list"},
		{[]string{"get", "--insecure", "--manager", "127.0.0.1:1,manager-2", "k"}, exitUsage, `kv get: --manager: address "manager-2" is not host:port`},
		{[]string{"put", "--insecure", "--manager", "127.0.0.1:1,,127.0.0.1:2", "k", "v"}, exitUsage, `kv put: --manager: an empty address in "127.0.0.1:1,,127.0.0.1:2"`},
		{[]string{"serve", "--insecure", "--listen", "127.0.0.1:0", "--manager", "127.0.0.1:1,:x"}, exitUsage, `kv serve: --manager: address ":x" is not host:port`},
		// Two ports on localhost where nothing listens: the last dial error.
		{[]string{"get", "--insecure", "--manager", "127.0.0.1:1,127.0.0.1:2", "--dial-timeout", "1s", "k"}, exitFailure, `connect: connection refused`},
		// Port 1 on localhost: nothing listens. Flags follow the argument,
		// and the dial error is named within the dial timeout.
		{[]string{"get", "k", "--insecure", "--manager", "127.0.0.1:1", "--dial-timeout", "1s"}, exitFailure,
			"kv get: no copy of the lease table: manager at 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel() // the two that dial wait out their dial timeout side by side
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}
