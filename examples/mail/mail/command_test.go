package mail_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/examples/mail/mail"
)

// TestRunUsage checks usage errors exit 2 with a message, and -h exits 0.
// Serving with a Manager runs in internal/e2e.
func TestRunUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--id, --listen, --data-dir and --nodes are required"},
		{[]string{"-h"}, 0, "-nodes"},
		{[]string{"--insecure", "--id", "a", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a"}, 2, `"a" is not ID=ADDR`},
		{[]string{"--insecure", "--id", "a", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a=x:1,a=y:2"}, 2, "names a node twice"},
		{[]string{"--insecure", "--id", "c", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a=x:1"}, 2, `does not name this node, "c"`},
		{[]string{"--id", "a", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a=x:1"}, 2, "--certs-dir"},
	} {
		var stdout, stderr bytes.Buffer
		if code := mail.Run(context.Background(), tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("mail %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
