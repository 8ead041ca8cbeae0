package e2e

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/protocol"
)

// TestDrainCancelledAndDeadForgotten runs a Manager (--drain-gate 1), three
// kv servers and leasehold watch, all real processes. kv-1 is drained and
// holds the maintenance gate: a drain of kv-2 is refused, naming kv-1 and
// 'leasehold drain --cancel kv-1'; drain --cancel frees the gate and kv-1
// takes ranges again; kv-2 can be drained then. kv-3 is killed with
// SIGKILL: watch's loss event names it as the Owner whose state was lost,
// and it is gone from status within the documented bound, 2 × ManagerLease
// + Renew/4 after its last request (docs/operations.md, "Owners that are
// gone").
func TestDrainCancelledAndDeadForgotten(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	t.Parallel()
	leasehold, kvBin := build(t)
	tm := protocol.Fast()
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast", "--drain-gate", "1")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	watch := start(t, "watch", leasehold, "watch", "--manager", addr, "--json")
	servers := map[string]*proc{}
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		servers[id] = c.serve(id)
	}
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	admin := func(args ...string) (string, string, int) {
		cmd := command(t, leasehold, append(args, "--manager", addr)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		return out.String(), errb.String(), code
	}

	if _, stderr, code := admin("drain", "kv-1"); code != 0 {
		t.Fatalf("drain kv-1: exit %d: %s", code, stderr)
	}
	c.settle("kv-1 drained", func(s status) bool { return slices.Equal(s.holders(), []string{"kv-2", "kv-3"}) })
	_, stderr, code := admin("drain", "kv-2")
	if code != 1 || !strings.Contains(stderr, "(kv-1)") || !strings.Contains(stderr, "'leasehold drain --cancel kv-1'") {
		t.Fatalf("drain kv-2 with kv-1 holding the gate: exit %d, %q; want exit 1 naming kv-1 and the way out", code, stderr)
	}
	if stdout, stderr, code := admin("drain", "--cancel", "kv-1"); code != 0 || !strings.Contains(stdout, "cancelled") {
		t.Fatalf("drain --cancel kv-1: exit %d, %q %q", code, stdout, stderr)
	}
	c.settle("kv-1 back", func(s status) bool { return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) })
	if _, stderr, code := admin("drain", "kv-2"); code != 0 {
		t.Fatalf("drain kv-2 once the gate is free: exit %d: %s", code, stderr)
	}
	c.settle("kv-2 drained", func(s status) bool { return slices.Equal(s.holders(), []string{"kv-1", "kv-3"}) })
	t.Log("a drain cancelled frees the gate, and the Owner takes ranges again")

	killedAt := time.Now()
	servers["kv-3"].kill(t)
	bound := lease.ForgetAfter(tm.ManagerLease) + tm.Renew/4
	var member time.Time // when status first showed kv-3 no member
	deadline := killedAt.Add(bound + slack)
	gone := false
	for !gone && time.Now().Before(deadline) {
		s, err := c.status()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		i := slices.IndexFunc(s.Owners, func(o struct {
			ID     string  `json:"id"`
			Addr   string  `json:"addr"`
			Member bool    `json:"member"`
			Ranges int     `json:"ranges"`
			Share  float64 `json:"share"`
		}) bool {
			return o.ID == "kv-3"
		})
		switch {
		case i < 0:
			gone = true
		case !s.Owners[i].Member && member.IsZero():
			member = time.Now()
		}
		if !gone {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !gone {
		t.Fatalf("kv-3, killed, is still in status %s after the kill (bound %s + %s slack)", since(killedAt), bound, slack)
	}
	t.Logf("kv-3 killed: no member after %s, gone from status after %s (bound %s)", member.Sub(killedAt).Round(time.Millisecond), since(killedAt), bound)

	// watch named kv-3 as the Owner whose state was lost.
	found := false
	lines, _ := watch.snapshot()
	for _, l := range lines {
		var ev struct {
			Event  string `json:"event"`
			Owners []struct {
				Owner string `json:"owner"`
			} `json:"owners"`
		}
		if json.Unmarshal([]byte(l.text), &ev) == nil && ev.Event == "loss" && l.at.After(killedAt) &&
			slices.ContainsFunc(ev.Owners, func(o struct {
				Owner string `json:"owner"`
			}) bool {
				return o.Owner == "kv-3"
			}) {
			found = true
		}
	}
	if !found {
		t.Errorf("watch --json printed no loss event naming kv-3 after the kill")
	}
}
