package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDrainUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"drain"}, "drain takes one OWNER_ID argument, got 0"},
		{[]string{"drain", "kv-1", "kv-2"}, "drain takes one OWNER_ID argument, got 2"},
		{[]string{"drain", ""}, "drain: OWNER_ID must not be empty"},
		{[]string{"drain", "--namespace", "", "kv-1"}, "--namespace must not be empty"},
		{[]string{"drain", "--timeout", "0s", "kv-1"}, "--timeout 0s must be positive"},
		{[]string{"drain", "--manager", "127.0.0.1:1,,127.0.0.1:2", "kv-1"}, "--manager: "},
		{[]string{"drain", "--bogus", "kv-1"}, "unknown flag: --bogus"},
		{[]string{"manager", "--drain-gate", "0"}, "--drain-gate 0 must be at least 1"},
		{[]string{"manager", "--handover", "soon"}, `invalid argument "soon" for "--handover" flag`},
	} {
		code, stdout, stderr := cli(t, tc.args...)
		if code != ExitUsage {
			t.Errorf("leasehold %s: exit %d, want %d; stderr %s", strings.Join(tc.args, " "), code, ExitUsage, stderr)
		}
		if stdout != "" {
			t.Errorf("leasehold %s printed to stdout: %q", strings.Join(tc.args, " "), stdout)
		}
		oneErrorLine(t, stderr, tc.want)
		if !strings.Contains(stderr, "--help')") {
			t.Errorf("leasehold %s: no usage hint in %q", strings.Join(tc.args, " "), stderr)
		}
	}
}

// TestDrainGate runs a Manager with --drain-gate 2 and three Owners: two
// drains are started, the third is refused because the gate is full, with
// the Manager's reason naming the Owners draining, and exit code 1. status
// shows who is draining.
func TestDrainGate(t *testing.T) {
	// The Manager starts before t.Parallel, so that its start-up reservation
	// runs out while the test waits for its turn, and listens before it
	// (TestMain).
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--drain-gate", "2", "--handover", "1s")
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	t.Parallel()
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		startOwner(t, addr, id, "127.0.0.1:1")
	}
	members := func() map[string]ownerJSON {
		code, stdout, _ := cli(t, "status", "--manager", addr, "--json")
		var st statusJSON
		if code != ExitOK || json.Unmarshal([]byte(stdout), &st) != nil {
			return nil
		}
		out := map[string]ownerJSON{}
		for _, o := range st.Owners {
			if o.Member {
				out[o.ID] = o
			}
		}
		return out
	}
	waitFor(t, "three members", 10*time.Second, func() bool { return len(members()) == 3 })

	for _, id := range []string{"kv-1", "kv-2"} {
		code, stdout, stderr := cli(t, "drain", "--manager", addr, id)
		if code != ExitOK || stdout != "draining "+id+" in namespace default: its ranges move to the other owners\n" {
			t.Fatalf("drain %s: exit %d, stdout %q, stderr %q", id, code, stdout, stderr)
		}
	}
	code, stdout, stderr := cli(t, "drain", "--manager", addr, "kv-3")
	if code != ExitFailure || stdout != "" {
		t.Fatalf("drain kv-3 with the gate full: exit %d, stdout %q, stderr %q; want exit 1", code, stdout, stderr)
	}
	oneErrorLine(t, stderr, `cannot drain kv-3: the maintenance gate is full: 2 owners of namespace "default" are draining already (kv-1, kv-2); at most 2 may drain at once: cancel a drain with 'leasehold drain --cancel kv-1', or stop the drained Owner (one that has left frees the gate), or raise the Manager's --drain-gate`)

	// Draining one that is draining already is not refused.
	if code, stdout, stderr := cli(t, "drain", "--manager", addr, "--json", "kv-1"); code != ExitOK ||
		!strings.Contains(stdout, `{"owner":"kv-1","namespace":"default","draining":true,"manager":"`+addr+`"}`) {
		t.Errorf("drain kv-1 again: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = cli(t, "drain", "--manager", addr, "kv-9")
	if code != ExitFailure {
		t.Errorf("drain of an unknown owner: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, `cannot drain kv-9: no live owner "kv-9" in namespace "default"`)
	code, _, stderr = cli(t, "drain", "--manager", addr, "--namespace", "nope", "kv-1")
	if code != ExitFailure {
		t.Errorf("drain in an unknown namespace: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, `unknown namespace "nope"`)

	// The drained owners give their ranges up; the third holds everything.
	waitFor(t, "kv-3 to hold every range", 15*time.Second, func() bool {
		ms := members()
		return ms["kv-1"].Draining && ms["kv-2"].Draining && !ms["kv-3"].Draining &&
			ms["kv-1"].Ranges == 0 && ms["kv-2"].Ranges == 0 && ms["kv-3"].Share > 0.999
	})
	code, stdout, _ = cli(t, "status", "--manager", addr)
	if code != ExitOK || !regexp.MustCompile(`(?m)^  kv-1 .* yes +\d+$`).MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^  kv-3 .* no +\d+$`).MatchString(stdout) || !strings.Contains(stdout, "DRAINING") {
		t.Errorf("status does not show who is draining:\n%s", stdout)
	}
}

// TestDrainFollowsTheLeader sends drain to a list whose first replica is
// not the leader of the group.
func TestDrainFollowsTheLeader(t *testing.T) {
	t.Parallel()
	addrs := []string{closedAddr(t), closedAddr(t), closedAddr(t)}
	peers := "1=" + addrs[0] + ",2=" + addrs[1] + ",3=" + addrs[2]
	for i, a := range addrs {
		m := startCLI(t, "manager", "--timings", "fast", "--id", fmt.Sprint(i+1), "--listen", a, "--data-dir", t.TempDir(), "--peers", peers)
		waitFor(t, "a manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	}
	list := strings.Join(addrs, ",")
	var c clusterOut
	waitFor(t, "a leader", 10*time.Second, func() bool {
		var ok bool
		c, ok = clusterStatus(t, list)
		return ok && c.Leader != 0
	})
	startOwner(t, list, "kv-1", "127.0.0.1:1")
	startOwner(t, list, "kv-2", "127.0.0.1:2")
	// Only a follower is named: it refuses, naming the leader, and drain
	// follows.
	var follower string
	for _, m := range c.Managers {
		if m.Role == "follower" {
			follower = m.Addr
		}
	}
	waitFor(t, "kv-1 to drain through a follower", 15*time.Second, func() bool {
		code, stdout, _ := cli(t, "drain", "--manager", follower, "--json", "kv-1")
		return code == ExitOK && strings.Contains(stdout, `"manager":"`+c.LeaderAddr+`"`)
	})
}
