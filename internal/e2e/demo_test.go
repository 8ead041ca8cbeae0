package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the README's first command, go run ./cmd/leasehold-demo,
// as a user would: it must exit 0 and tell its whole story, with mutual TLS (its own
// throwaway CA) as a newcomer gets it. It runs with LEASEHOLD_E2E=all, as
// CI runs it: the newcomer's first command is the demo itself.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	t.Parallel()
	demo := buildDemo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, demo).CombinedOutput()
	if err != nil {
		t.Fatalf("leasehold-demo: %v\n%s", err, out)
	}
	for _, want := range []string{"Every connection below is mutual TLS", "serves HTTPS on", "The frontend was told", "Every key reads back its value: 30/30", "No loss notification", "Done."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
