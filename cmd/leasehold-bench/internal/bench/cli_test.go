package bench_test

// The command line's tests (package benchcli) live in bench's test binary:
// benchcli is bench's command line and no more, and a test binary of its
// own linked the whole of bench again for a second of tests (about 2.5 s
// of CPU in go test ./...).

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/cmd/leasehold-bench/internal/benchcli"
)

// run runs leasehold-bench with args.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = benchcli.Execute(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give one SCENARIO (failover, loopback, propagation, rack, restart, scale, skew), got 0 arguments"},
		{[]string{"scale", "rack"}, "give one SCENARIO (failover, loopback, propagation, rack, restart, scale, skew), got 2 arguments"},
		{[]string{"bogus"}, `unknown scenario "bogus"`},
		{[]string{"scale", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"scale", "--seed", "x"}, `invalid argument "x" for "--seed" flag`},
		{[]string{"rack", "--beyond"}, "--beyond is for the scale and loopback scenarios only"},
		{[]string{"scale", "--owners", "10"}, "--owners and --lookups go together: give both or neither"},
		{[]string{"scale", "--owners", "-1", "--lookups", "4"}, "--owners and --lookups must not be negative"},
		{[]string{"scale", "--owners", "10", "--lookups", "40", "--churn", "sometimes"}, `--churn is on, off or both, not "sometimes"`},
		{[]string{"rack", "--owners", "10", "--lookups", "40"}, "--owners, --lookups and --churn are for the scale and loopback scenarios only"},
		{[]string{"scale", "--owners", "10", "--lookups", "40", "--beyond"}, "--beyond runs the sweep"},
		{[]string{"scale", "--measure", "1m"}, "--measure, --manager-bin, --manager-profile and --tls are for the loopback scenario only"},
		{[]string{"rack", "--tls"}, "--measure, --manager-bin, --manager-profile and --tls are for the loopback scenario only"},
		{[]string{"loopback", "--measure", "-1s"}, "--measure must not be negative"},
		{[]string{"loopback", "--lookups-per-conn", "0"}, "--lookups-per-conn must be between 1 and 5000"},
		{[]string{"loopback", "--read-replicas", "9"}, "--read-replicas must be between 0 and 8"},
		{[]string{"loopback", "--read-replicas", "-1"}, "--read-replicas must be between 0 and 8"},
		{[]string{"scale", "--read-replicas", "2"}, "--sync-streams are for the loopback scenario only"},
		{[]string{"scale", "--sync-streams"}, "--sync-streams are for the loopback scenario only"},
	} {
		code, stdout, stderr := run(t, tc.args...)
		name := "leasehold-bench " + strings.Join(tc.args, " ")
		if code != benchcli.ExitUsage {
			t.Errorf("%s: exit %d, want %d; stderr %s", name, code, benchcli.ExitUsage, stderr)
		}
		if stdout != "" {
			t.Errorf("%s printed to stdout: %q", name, stdout)
		}
		if !strings.HasPrefix(stderr, "leasehold-bench: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: stderr is not one line starting with %q: %q", name, "leasehold-bench: ", stderr)
		}
		if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "(see 'leasehold-bench --help')") {
			t.Errorf("%s: stderr = %q, want it to contain %q and the usage hint", name, stderr, tc.want)
		}
	}
}

// TestHelpListsScenarios: --help names every scenario, and is not an error.
func TestHelpListsScenarios(t *testing.T) {
	code, stdout, stderr := run(t, "--help")
	if code != benchcli.ExitOK || stderr != "" {
		t.Fatalf("--help: exit %d, stderr %q", code, stderr)
	}
	for _, s := range []string{"scale", "rack", "restart", "failover", "skew", "propagation", "loopback"} {
		if !strings.Contains(stdout, "\n  "+s+" ") {
			t.Errorf("--help does not list the %s scenario:\n%s", s, stdout)
		}
	}
}

// TestSmokeWritesFiles runs a scenario at its smoke size through the
// command line and finds its summary, CSV and PNG files in --out.
func TestSmokeWritesFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := run(t, "propagation", "--smoke", "--out", dir)
	if code != benchcli.ExitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stdout, "wrote ") || !strings.Contains(stdout, dir) {
		t.Errorf("stdout does not say where the files went:\n%s", stdout)
	}
	for _, ext := range []string{".csv", ".png"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*"+ext))
		if len(m) == 0 {
			t.Errorf("no %s file in %s", ext, dir)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("--out %s: %v, %d files", dir, err, len(entries))
	}
}

// TestCancelledRunIsAStop: a run cancelled (as by SIGINT) stops with exit
// code 0 and writes nothing.
func TestCancelledRunIsAStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := filepath.Join(t.TempDir(), "out")
	var out, errb bytes.Buffer
	if code := benchcli.Execute(ctx, []string{"scale", "--smoke", "--out", dir}, &out, &errb); code != benchcli.ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a cancelled run wrote %s (%v)", dir, err)
	}
}
