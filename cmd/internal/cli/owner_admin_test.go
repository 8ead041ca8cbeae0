package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestForgetUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"forget"}, "forget takes one OWNER_ID argument, got 0"},
		{[]string{"forget", "kv-1", "kv-2"}, "forget takes one OWNER_ID argument, got 2"},
		{[]string{"forget", ""}, "forget: OWNER_ID must not be empty"},
		{[]string{"drain", "--cancel", ""}, "drain: OWNER_ID must not be empty"},
		{[]string{"drain", "--cancel=maybe", "kv-1"}, `invalid argument "maybe" for "--cancel" flag`},
	} {
		code, stdout, stderr := cli(t, tc.args...)
		if code != ExitUsage || stdout != "" {
			t.Errorf("leasehold %s: exit %d, stdout %q; want %d", strings.Join(tc.args, " "), code, stdout, ExitUsage)
		}
		oneErrorLine(t, stderr, tc.want)
	}
}

// TestDrainCancelAndForget: a drained Owner holds the gate, and the refusal
// names the way out; drain --cancel frees it and the Owner takes ranges
// again; forget is refused for a member, naming why, and accepted for an
// Owner that left, which status then no longer lists.
func TestDrainCancelAndForget(t *testing.T) {
	// The Manager starts before t.Parallel, so that its start-up reservation
	// runs out while the test waits for its turn, and listens before it
	// (TestMain).
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--handover", "1s")
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	t.Parallel()
	startOwner(t, addr, "kv-1", "127.0.0.1:1")
	stop2 := startOwner(t, addr, "kv-2", "127.0.0.1:2")
	owners := func() map[string]ownerJSON {
		code, stdout, _ := cli(t, "status", "--manager", addr, "--json")
		var st statusJSON
		if code != ExitOK || json.Unmarshal([]byte(stdout), &st) != nil {
			return nil
		}
		out := map[string]ownerJSON{}
		for _, o := range st.Owners {
			out[o.ID] = o
		}
		return out
	}
	waitFor(t, "both to hold ranges", 15*time.Second, func() bool {
		os := owners()
		return os["kv-1"].Ranges > 0 && os["kv-2"].Ranges > 0
	})
	if code, _, stderr := cli(t, "drain", "--manager", addr, "kv-1"); code != ExitOK {
		t.Fatalf("drain kv-1: exit %d, %s", code, stderr)
	}
	code, _, stderr := cli(t, "drain", "--manager", addr, "kv-2")
	if code != ExitFailure || !strings.Contains(stderr, "(kv-1)") || !strings.Contains(stderr, "'leasehold drain --cancel kv-1'") {
		t.Fatalf("drain kv-2 with the gate full: exit %d, %s; want the way out named", code, stderr)
	}
	waitFor(t, "kv-1 to give its ranges up", 15*time.Second, func() bool { return owners()["kv-1"].Ranges == 0 })
	code, stdout, stderr := cli(t, "drain", "--cancel", "--manager", addr, "kv-1")
	if code != ExitOK || stdout != "drain of kv-1 in namespace default cancelled: it takes ranges again\n" {
		t.Fatalf("drain --cancel kv-1: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	waitFor(t, "kv-1 to take ranges again", 15*time.Second, func() bool {
		o := owners()["kv-1"]
		return !o.Draining && o.Ranges > 0
	})
	if code, stdout, stderr := cli(t, "drain", "--cancel", "--json", "--manager", addr, "kv-1"); code != ExitOK ||
		!strings.Contains(stdout, `{"owner":"kv-1","namespace":"default","draining":false,"manager":"`+addr+`"}`) {
		t.Errorf("a second cancel: exit %d, stdout %q, stderr %q; want success", code, stdout, stderr)
	}
	if code, _, stderr := cli(t, "drain", "--manager", addr, "kv-2"); code != ExitOK {
		t.Fatalf("drain kv-2 once the gate is free: exit %d, %s", code, stderr)
	}

	code, _, stderr = cli(t, "forget", "--manager", addr, "kv-1")
	if code != ExitFailure {
		t.Fatalf("forget of a member: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, `cannot forget kv-1: the owner cannot be forgotten: "kv-1" in namespace "default": it is a member (heard from within ManagerLease 2.2s); stop it, or drain it and stop it, first`)
	code, _, stderr = cli(t, "forget", "--manager", addr, "kv-9")
	if code != ExitFailure {
		t.Fatalf("forget of an unknown owner: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, `cannot forget kv-9: no live owner "kv-9" in namespace "default": no owner of that ID is recorded`)

	stop2() // it leaves: no member, and it gives its ranges up
	waitFor(t, "kv-2 to leave", 15*time.Second, func() bool {
		o, ok := owners()["kv-2"]
		return ok && !o.Member && o.Ranges == 0
	})
	code, stdout, stderr = cli(t, "forget", "--manager", addr, "kv-2")
	if code != ExitOK || stdout != "forgot kv-2 in namespace default\n" {
		t.Fatalf("forget kv-2: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	waitFor(t, "status to no longer list kv-2", 5*time.Second, func() bool {
		os := owners()
		_, ok := os["kv-2"]
		return os != nil && !ok
	})
}
