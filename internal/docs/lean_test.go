package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// heavy names the packages the leasehold binary must not link: the
// simulation (which swaps crypto/rand.Reader while it runs) and the
// experiments with their plotting stack, which belong to leasehold-bench,
// and the example services, whose tours belong to leasehold-demo.
var heavy = []string{
	"github.com/leasehold/leasehold/internal/sim",
	"github.com/leasehold/leasehold/cmd/leasehold-bench/",
	"github.com/leasehold/leasehold/cmd/leasehold-demo",
	"github.com/leasehold/leasehold/examples/",
	"gonum.org/",
	"codeberg.org/go-latex/",
	"codeberg.org/go-fonts/",
	"codeberg.org/go-pdf/",
}

// TestLeanBinary: the binary that runs the Manager in production carries
// neither the simulation, nor the plotting stack, nor the examples, as
// docs/design.md's package table says. It asks go list for the command's
// dependencies, as a reader would. It lives here rather than in
// cmd/leasehold, whose test binary would link the whole command only to run
// go list.
func TestLeanBinary(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-deps", "./cmd/leasehold")
	cmd.Dir = root(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !strings.Contains(string(out), "github.com/leasehold/leasehold/manager\n") {
		t.Fatalf("go list -deps printed no dependency list:\n%s", out)
	}
	for _, d := range deps {
		for _, h := range heavy {
			if d == h || strings.HasPrefix(d, strings.TrimSuffix(h, "/")+"/") {
				t.Errorf("cmd/leasehold links %s; the simulation and plotting belong to cmd/leasehold-bench, the examples' tours to cmd/leasehold-demo", d)
			}
		}
	}
}
