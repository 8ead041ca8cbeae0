package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the tour start this test binary as its nodes.
func TestMain(m *testing.M) {
	if os.Getenv(demoChild) != "" {
		main()
	}
	os.Exit(m.Run())
}

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
		{[]string{"--id", "a", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a"}, 2, `"a" is not ID=ADDR`},
		{[]string{"--id", "a", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a=x:1,a=y:2"}, 2, "names a node twice"},
		{[]string{"--id", "c", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nodes", "a=x:1"}, 2, `does not name this node, "c"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("mail %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestDemo runs the tour (mail demo) as the README shows it: it must exit
// 0 and tell its whole story.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the tour runs real processes for about 10 s; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if code := run(ctx, []string{"demo"}, &out, &out); code != 0 {
		t.Fatalf("mail demo: exit %d\n%s", code, out.String())
	}
	for _, want := range []string{"incomplete (a node down)", "restarts from its directory", "No message was lost or read twice. Done."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the tour's output lacks %q:\n%s", want, out.String())
		}
	}
}
