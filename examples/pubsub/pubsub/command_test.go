package pubsub_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
)

// TestRunUsage checks usage errors exit 2 with a message, and -h exits 0.
// Serving with a Manager runs in internal/e2e.
func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--listen and --certs-dir"},
		{[]string{"-h"}, 0, "-drain-timeout"},
		{[]string{"--listen", "127.0.0.1:0", "extra"}, 2, "no arguments"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--insecure", "--listen", "127.0.0.1:0", "--manager", "127.0.0.1:1,:x"}, 2, `address ":x" is not host:port`},
		{[]string{"--listen", "127.0.0.1:0"}, 2, "--certs-dir"},
		{[]string{"--certs-dir", "/nonexistent", "--listen", "127.0.0.1:0"}, 2, "/nonexistent"},
	} {
		var stdout, stderr bytes.Buffer
		if code := pubsub.Run(context.Background(), tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("pubsub %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
