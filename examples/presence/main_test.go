package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the tour start this test binary as its servers.
func TestMain(m *testing.M) {
	if os.Getenv(demoChild) != "" {
		main()
	}
	os.Exit(m.Run())
}

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
		{[]string{"--listen", "127.0.0.1:0", "--manager", "127.0.0.1:1,:x"}, 2, `address ":x" is not host:port`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("presence %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestDemo runs the tour (presence demo) as the README shows it: it must
// exit 0 and tell its whole story.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the tour runs real processes for about 10 s; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if code := run(ctx, []string{"demo"}, &out, &out); code != 0 {
		t.Fatalf("presence demo: exit %d\n%s", code, out.String())
	}
	for _, want := range []string{"Republished and answered within", "hands nothing over", "older than the last acknowledged heartbeat. Done."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the tour's output lacks %q:\n%s", want, out.String())
		}
	}
}
