package presence_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/examples/presence/presence"
)

// TestRunUsage checks usage errors exit 2 with a message, and -h exits 0.
// Serving with a Manager runs in internal/e2e.
func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--listen is required"},
		{[]string{"-h"}, 0, "-ttl"},
		{[]string{"--listen", "127.0.0.1:0", "--ttl", "0s"}, 2, "--ttl must be positive"},
		{[]string{"--listen", "127.0.0.1:0", "extra"}, 2, "no arguments"},
		{[]string{"--insecure", "--listen", "127.0.0.1:0", "--manager", "127.0.0.1:1,:x"}, 2, `address ":x" is not host:port`},
		{[]string{"--listen", "127.0.0.1:0"}, 2, "--certs-dir"},
	} {
		var stdout, stderr bytes.Buffer
		if code := presence.Run(context.Background(), tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("presence %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
