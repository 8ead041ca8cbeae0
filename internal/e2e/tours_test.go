package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestExampleTours runs the example services' tours as their READMEs show
// them (go run ./cmd/leasehold-demo pubsub, presence, mail, agent): each kills a server with
// SIGKILL and checks the service's promise, and must exit 0 and tell its
// whole story. Each speaks mutual TLS with a throwaway CA of its own. They
// run one after the other, each in about 5 s, with LEASEHOLD_E2E=all (CI).
func TestExampleTours(t *testing.T) {
	onlyWithAll(t)
	t.Parallel()
	demo := buildDemo(t)
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"pubsub", []string{"(fast timings, mutual TLS)", "resubscribed within", "Message #3 published", "none was made afresh. Done."}},
		{"presence", []string{"(fast timings, mutual TLS)", "Republished and answered within", "hands nothing over", "older than the last acknowledged heartbeat. Done."}},
		{"mail", []string{"(fast timings, mutual TLS)", "incomplete (a node down)", "restarts from its directory", "No message was lost or read twice. Done."}},
		{"agent", []string{"(fast timings, mutual TLS)", "each covered by a loss", "Every key reads back its value: 30/30, with no loss notification. Done."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "agent" {
				needPython(t) // its servers are examples/kv-python
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, demo, tc.name).CombinedOutput()
			if err != nil {
				t.Fatalf("leasehold-demo %s: %v\n%s", tc.name, err, out)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("the tour's output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
