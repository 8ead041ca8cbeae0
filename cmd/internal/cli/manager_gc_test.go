package cli

import (
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// TestGCPercent: --gc-percent sets the collector's GOGC; without it, GOGC
// from the environment is left as the runtime applied it, and without
// either the Manager's default holds.
func TestGCPercent(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name, flag, env string
		want            int
	}{
		{"flag", "40", "", 40},
		{"flag over the environment", "40", "70", 40},
		{"the environment", "", "70", 55}, // left as it was: the runtime applied GOGC itself
		{"neither", "", "", defaultGCPercent},
	} {
		debug.SetGCPercent(55)
		o := &managerOptions{}
		o.command(&env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }})
		if c.flag != "" {
			if err := o.flags.Set("gc-percent", c.flag); err != nil {
				t.Fatal(err)
			}
		}
		o.applyGC(log, func(k string) string {
			if k == "GOGC" {
				return c.env
			}
			return ""
		})
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("%s: GOGC %d, want %d", c.name, got, c.want)
		}
	}
}

// TestGCFlagsRefused: a --gc-percent or --memory-limit Go would take but no
// Manager should run with is refused before the Manager starts, with an
// error that names the flag: 0 (collect continuously), a negative other
// than -1 (off), off without a limit (the heap grows without bound), and a
// limit that is malformed or under what an empty Manager holds.
func TestGCFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gc-percent", "0"}, "--gc-percent 0 would collect continuously"},
		{[]string{"--gc-percent", "-2"}, "--gc-percent -2: want a percentage of at least 1, or -1 for off"},
		{[]string{"--gc-percent", "-1"}, "--gc-percent -1 turns the collector off, which without --memory-limit"},
		{[]string{"--memory-limit", "lots"}, `--memory-limit "lots": want a number of bytes`},
		{[]string{"--memory-limit", "-5MiB"}, `--memory-limit "-5MiB": want a number of bytes`},
		{[]string{"--memory-limit", "1MB"}, `--memory-limit "1MB": want a number of bytes`},
		{[]string{"--memory-limit", "99999999999TiB"}, `--memory-limit "99999999999TiB": too large`},
		{[]string{"--memory-limit", "32MiB"}, "--memory-limit 32MiB is under 64MiB"},
	} {
		args := append([]string{"manager", "--insecure", "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, stderr := cli(t, args...)
		if code != ExitUsage {
			t.Errorf("leasehold %s: exit %d, want %d; stderr %s", strings.Join(tc.args, " "), code, ExitUsage, stderr)
		}
		oneErrorLine(t, stderr, tc.want)
	}
}

// TestMemoryLimit: --memory-limit sets the collector's memory limit, in
// GOMEMLIMIT's units, and with it --gc-percent -1 is taken (off: only the
// limit starts a collection).
func TestMemoryLimit(t *testing.T) {
	prevLimit, prevPercent := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	defer func() { debug.SetMemoryLimit(prevLimit); debug.SetGCPercent(prevPercent) }()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		limit, percent string
		want           int64
		wantPercent    int
	}{
		{"512MiB", "", 512 << 20, defaultGCPercent},
		{"2GiB", "50", 2 << 30, 50},
		{"100000000", "-1", 100000000, -1},
		{"1TiB", "", 1 << 40, defaultGCPercent},
	} {
		o := &managerOptions{}
		o.command(&env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }})
		if err := o.flags.Set("memory-limit", c.limit); err != nil {
			t.Fatal(err)
		}
		if c.percent != "" {
			if err := o.flags.Set("gc-percent", c.percent); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.checkGC(); err != nil {
			t.Fatalf("%s, %s: %v", c.limit, c.percent, err)
		}
		o.applyGC(log, func(string) string { return "" })
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("--memory-limit %s: limit %d, want %d", c.limit, got, c.want)
		}
		if got := debug.SetGCPercent(100); got != c.wantPercent {
			t.Errorf("--memory-limit %s --gc-percent %s: GOGC %d, want %d", c.limit, c.percent, got, c.wantPercent)
		}
		debug.SetMemoryLimit(prevLimit)
	}
}
