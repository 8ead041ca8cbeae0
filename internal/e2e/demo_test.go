package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDemo runs the README's first command, go run ./cmd/leasehold-demo,
// as a user would: it must exit 0 and tell its whole story, with mutual TLS (its own
// throwaway CA) as a newcomer gets it.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
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

// builtDemo is what buildDemo compiled, once for all the tests.
var builtDemo struct {
	sync.Mutex
	done bool
	bin  string
	err  error
}

// buildDemo compiles cmd/leasehold-demo into binDir (with the others,
// buildAll), the first time it is called.
func buildDemo(t *testing.T) string {
	t.Helper()
	builtDemo.Lock()
	defer builtDemo.Unlock()
	if !builtDemo.done {
		builtDemo.done = true
		builtDemo.bin = filepath.Join(binDir, "leasehold-demo")
		if buildAll() != nil {
			builtDemo.err = goBuild(builtDemo.bin, "./cmd/leasehold-demo")
		}
	}
	if builtDemo.err != nil {
		t.Fatal(builtDemo.err)
	}
	return builtDemo.bin
}
