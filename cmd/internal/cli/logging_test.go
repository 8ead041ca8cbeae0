package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestManagerJSONLogsAndHealth runs the manager command with --log-format
// json: every line it logs is one JSON object, its metrics listener
// answers /healthz and /readyz, and status shows the same readiness.
func TestManagerJSONLogsAndHealth(t *testing.T) {
	t.Parallel()
	m := startCLI(t, "manager", "--timings", "fast", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--log-format", "json")
	var addr, base string
	waitFor(t, "the listening line", 10*time.Second, func() bool {
		match := listeningLine.FindStringSubmatch(m.stdout.String())
		if match != nil {
			addr = match[1]
		}
		return match != nil
	})
	waitFor(t, "the metrics URL in the log", 10*time.Second, func() bool {
		match := regexp.MustCompile(`"url":"(http://\S+)/metrics"`).FindStringSubmatch(m.stderr.String())
		if match != nil {
			base = match[1]
		}
		return match != nil
	})
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	waitFor(t, "/readyz to answer 200", 10*time.Second, func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	if _, body := get("/readyz"); !strings.Contains(body, "leader of term") {
		t.Errorf("/readyz body %q does not say why", body)
	}
	code, stdout, stderr := cli(t, "status", "--manager", addr)
	if code != ExitOK || !strings.Contains(stdout, addr+": ready (leader of term") {
		t.Errorf("status: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
	if code := m.stop(t); code != ExitOK {
		t.Errorf("manager stopped with exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(m.stderr.String()), "\n")
	for _, line := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["msg"] == nil || v["level"] == nil {
			t.Errorf("log line is not a JSON record: %q (%v)", line, err)
		}
	}
	if len(lines) < 3 {
		t.Errorf("only %d log lines", len(lines))
	}
}
