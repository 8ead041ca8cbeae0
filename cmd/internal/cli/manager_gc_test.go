package cli

import (
	"io"
	"log/slog"
	"runtime/debug"
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
