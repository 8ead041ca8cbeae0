package docs

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRaceCrashes: CI's race run reruns a package only when its test binary
// died of the race runtime's own assertion and reported nothing else
// (.ci/race-crashes.awk); a failed test or a data race before the
// assertion, or any other failure, fails CI.
func TestRaceCrashes(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Skip("no awk: CI's script needs one")
	}
	script := filepath.Join(root(t), ".ci", "race-crashes.awk")
	const (
		ok    = "ok  \tgithub.com/x/a\t1.2s\n"
		crash = "ThreadSanitizer: CHECK failed: tsan_rtl.cpp:346 \"((exiting))\" (0x0, 0x0) (tid=1)\n"
		kv    = "FAIL\tgithub.com/x/kv\t8.6s\n"
	)
	for _, tc := range []struct {
		name, log string
		rerun     string // the packages printed
		fails     bool   // exit 1: a failure of another kind
	}{
		{"the assertion alone", ok + crash + kv, "github.com/x/kv", false},
		{"two packages with it", crash + kv + ok + crash + "FAIL\tgithub.com/x/b\t2s\n", "github.com/x/kv github.com/x/b", false},
		{"a data race before it", "WARNING: DATA RACE\nRead at 0x00c0 by goroutine 7:\n" + crash + kv, "", true},
		{"a failed subtest before it", "    --- FAIL: TestX/y (0.10s)\n" + crash + "FAIL\n" + kv, "", true},
		{"a failure without it", "--- FAIL: TestX (0.10s)\nFAIL\n" + kv, "", true},
		{"a build failure", "FAIL\tgithub.com/x/kv [build failed]\n", "", true},
		{"a crash in one, a failure in the next", crash + kv + "--- FAIL: TestY (0.1s)\nFAIL\nFAIL\tgithub.com/x/b\t1s\n", "github.com/x/kv", true},
		{"the assertion in a package that passed", crash + ok + "--- FAIL: TestY (0.1s)\nFAIL\nFAIL\tgithub.com/x/b\t1s\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(awk, "-f", script)
			cmd.Stdin = strings.NewReader(tc.log)
			out, err := cmd.Output()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			if got := strings.Join(strings.Fields(string(out)), " "); got != tc.rerun || (err != nil) != tc.fails {
				t.Errorf("rerun %q, failed otherwise %v; want %q, %v", got, err != nil, tc.rerun, tc.fails)
			}
		})
	}
}
