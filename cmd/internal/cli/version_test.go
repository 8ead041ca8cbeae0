package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/version"
)

// TestVersion checks leasehold version and --version print this build's
// version line, and that status shows each replica's version, as the
// replica reports it, in text and in JSON.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := version.Get().String()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := cli(t, args...)
		if code != ExitOK || strings.TrimSpace(stdout) != want || !strings.HasPrefix(stdout, "leasehold ") {
			t.Errorf("leasehold %s: exit %d, %q (stderr %q); want %q", strings.Join(args, " "), code, stdout, stderr, want)
		}
	}
	code, stdout, _ := cli(t, "version", "--json")
	var v struct{ Go, Version string }
	if code != ExitOK || json.Unmarshal([]byte(stdout), &v) != nil || v.Go != version.Get().Go {
		t.Errorf("leasehold version --json: exit %d, %q", code, stdout)
	}

	addr := startManager(t)
	code, stdout, stderr := cli(t, "status", "--manager", addr)
	short := version.Get().Short()
	if code != ExitOK || !strings.Contains(stdout, "VERSION") || !strings.Contains(stdout, " "+short+"\n") {
		t.Errorf("status: exit %d, %q (stderr %q); want a VERSION column with %q", code, stdout, stderr, short)
	}
	code, stdout, _ = cli(t, "status", "--manager", addr, "--json")
	var st statusJSON
	if code != ExitOK || json.Unmarshal([]byte(stdout), &st) != nil || len(st.Managers) != 1 || st.Managers[0].Version != short {
		t.Errorf("status --json: exit %d, %q; want the replica's version %q", code, stdout, short)
	}
}
