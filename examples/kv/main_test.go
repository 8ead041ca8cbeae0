package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunExitCodes checks the command line: usage errors and failures exit
// 2 with a one-line message. The scenario with a Manager runs in
// internal/e2e.
func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{nil, exitError, "usage:"},
		{[]string{"frobnicate"}, exitError, `unknown command "frobnicate"`},
		{[]string{"help"}, exitOK, ""},
		{[]string{"get", "-h"}, exitOK, "-timeout"},
		{[]string{"get"}, exitError, "want 1 arguments, got 0"},
		{[]string{"put", "k"}, exitError, "want 2 arguments, got 1"},
		{[]string{"serve"}, exitError, "--listen is required"},
		{[]string{"get", "--bogus", "k"}, exitError, "flag provided but not defined"},
		// Port 1 on localhost: nothing listens, so no route ever appears.
		{[]string{"get", "--insecure", "--manager", "127.0.0.1:1", "--timeout", "300ms", "k"}, exitError, `kv: get "k": context deadline exceeded`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("kv %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
