package e2e

import (
	"path/filepath"
	"sync"
	"testing"
)

// The binaries the scenarios run, linked into binDir once for all the
// tests. In a run of the whole package TestMain links them at once, in two
// go builds one after the other: leasehold (and leasehold-demo, with
// LEASEHOLD_E2E=all: TestDemo runs only then), then kv.
// The default scenarios start their Manager as soon as leasehold is there,
// and kv links while each new Manager waits out its reservation
// (ManagerLease, docs/design.md rule 9), which it must whatever the test
// does; in one go build with the other two, kv kept the Managers from
// starting until all three had linked (2 s of the 5 s of CPU the three
// links take is kv's and the go command's). One go build at a time, so a
// fresh clone compiles the packages they share once: two at once compiled
// them twice. In a run of chosen tests each binary links on its own when a
// test first asks for it.

// prebuilding is set when TestMain links the binaries for a run of the
// whole package.
var prebuilding bool

// onceErr runs a build once and keeps its error.
type onceErr struct {
	once sync.Once
	err  error
}

func (o *onceErr) do(f func() error) error {
	o.once.Do(func() { o.err = f() })
	return o.err
}

var linked struct{ first, leasehold, kv, demo onceErr }

// linkFirst links leasehold, and with LEASEHOLD_E2E=all leasehold-demo in
// the same go build, which compiles the packages they share once and links
// the two side by side.
func linkFirst() error {
	return linked.first.do(func() error {
		pkgs := []string{"./cmd/leasehold"}
		if allScenarios() {
			pkgs = append(pkgs, "./cmd/leasehold-demo")
		}
		return goBuild(binDir+string(filepath.Separator), pkgs...)
	})
}

// linkLeasehold links cmd/leasehold: by linkFirst in a run of the whole
// package, on its own if that fails (to say which does not build) or in a
// run of chosen tests.
func linkLeasehold() error {
	return linked.leasehold.do(func() error {
		if prebuilding && linkFirst() == nil {
			return nil
		}
		return goBuild(filepath.Join(binDir, "leasehold"), "./cmd/leasehold")
	})
}

// linkDemo links cmd/leasehold-demo, as linkLeasehold links leasehold.
func linkDemo() error {
	return linked.demo.do(func() error {
		if prebuilding && allScenarios() && linkFirst() == nil {
			return nil
		}
		return goBuild(filepath.Join(binDir, "leasehold-demo"), "./cmd/leasehold-demo")
	})
}

// linkKV links examples/kv: after linkFirst in a run of the whole package.
func linkKV() error {
	return linked.kv.do(func() error {
		if prebuilding {
			_ = linkFirst()
		}
		return goBuild(filepath.Join(binDir, "kv"), "./examples/kv")
	})
}

// build returns the leasehold and kv binaries, once both are linked.
func build(t *testing.T) (leasehold, kv string) {
	t.Helper()
	kv = buildKV(t)
	return buildLeasehold(t), kv
}

// buildLeasehold returns the leasehold binary. It skips the test when
// cmd/leasehold does not build.
func buildLeasehold(t *testing.T) string {
	t.Helper()
	if err := linkLeasehold(); err != nil {
		t.Skipf("e2e needs the leasehold binary, which does not build yet: %v", err)
	}
	return filepath.Join(binDir, "leasehold")
}

// buildKV returns the kv binary.
func buildKV(t *testing.T) string {
	t.Helper()
	if err := linkKV(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(binDir, "kv")
}

// buildDemo returns the leasehold-demo binary.
func buildDemo(t *testing.T) string {
	t.Helper()
	if err := linkDemo(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(binDir, "leasehold-demo")
}
