package e2e

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestManagerStopsOnSIGTERM: a real leasehold manager with a data
// directory, an Owner holding leases and connections that never finish
// their handshake exits cleanly (exit 0) within 10 s of SIGTERM.
func TestManagerStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast", "--data-dir", t.TempDir())
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	c.serve("kv-1")
	c.settle("one owner", func(s status) bool { return s.sumRanges() == 64 })
	for range 20 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	sent := time.Now()
	if err := mgr.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mgr.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the manager still runs %v after SIGTERM", time.Since(sent))
	}
	if !mgr.cmd.ProcessState.Success() {
		t.Fatalf("the manager exited with %v after SIGTERM, want 0", mgr.cmd.ProcessState)
	}
	t.Logf("exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
}
