package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPodID: a StatefulSet pod's ordinal plus one is its replica ID, the
// same on every start; --id and --id-from-pod together are refused.
func TestPodID(t *testing.T) {
	for name, want := range map[string]uint64{"leasehold-manager-0": 1, "m-4": 5, "x-y-12": 13} {
		if got, err := podID(name); err != nil || got != want {
			t.Errorf("podID(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	for _, name := range []string{"manager", "m-", "m-x", "m-+1"} {
		if _, err := podID(name); err == nil {
			t.Errorf("podID(%q) accepted", name)
		}
	}
	code, _, stderr := cli(t, "manager", "--id", "2", "--id-from-pod", "m-0")
	if code != ExitUsage || !strings.Contains(stderr, "--id and --id-from-pod") {
		t.Errorf("--id with --id-from-pod: exit %d, %s", code, stderr)
	}
}

// TestForgetfulReplicaRefused runs a group of three as a StatefulSet runs
// it (the same arguments for every pod, the ID from the pod's name), then
// restarts a follower with an empty data directory, as a pod whose volume
// was lost: it must refuse to start, saying how to re-add it, rather than
// found the group again having forgotten what it acknowledged. With its
// data directory it starts; and a fourth pod, not in --peers, joins
// (--join-unlisted) and is added.
func TestForgetfulReplicaRefused(t *testing.T) {
	t.Parallel()
	addrs := []string{closedAddr(t), closedAddr(t), closedAddr(t), closedAddr(t)}
	var peers []string
	for i, a := range addrs[:3] {
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	args := func(ord int, dir string) []string {
		return []string{"manager", "--timings", "fast", "--id-from-pod", fmt.Sprintf("leasehold-manager-%d", ord),
			"--listen", addrs[ord], "--data-dir", dir, "--peers", strings.Join(peers, ","), "--join-unlisted"}
	}
	start := func(ord int, dir string) *background {
		m := startCLI(t, args(ord, dir)...)
		waitFor(t, fmt.Sprintf("replica %d to listen", ord+1), 10*time.Second, func() bool {
			return strings.Contains(m.stdout.String(), fmt.Sprintf("listening on %s (timings fast, replica %d)", addrs[ord], ord+1))
		})
		return m
	}
	ms := []*background{start(0, dirs[0]), start(1, dirs[1]), start(2, dirs[2])}
	list := strings.Join(addrs[:3], ",")
	// A follower the leader has heard from.
	follower := -1
	waitFor(t, "a leader that has heard from a follower", 10*time.Second, func() bool {
		c, ok := clusterStatus(t, list)
		if !ok || c.Leader == 0 {
			return false
		}
		for _, m := range c.Managers {
			if m.ID != c.Leader && m.Role == "follower" {
				follower = int(m.ID) - 1
				return true
			}
		}
		return false
	})
	// The leader's published view lists the follower's progress (at most
	// 100 ms after it heard from it).
	waitFor(t, "the leader to show the follower's log", 10*time.Second, func() bool {
		for _, a := range askReplicas(context.Background(), addrs[:3], nil) {
			for _, p := range a.resp.GetCluster().GetPeers() {
				if a.resp.GetCluster().GetRole() == "leader" && p.GetId() == uint64(follower+1) && p.GetMatch() > 0 {
					return true
				}
			}
		}
		return false
	})
	if code := ms[follower].stop(t); code != ExitOK {
		t.Fatalf("stopping replica %d: exit %d", follower+1, code)
	}

	// Its volume lost: a new, empty data directory under the same ID.
	again := startCLI(t, args(follower, t.TempDir())...)
	select {
	case code := <-again.done:
		again.done <- code
		if code != ExitUsage || !strings.Contains(again.stderr.String(), "starts with an empty data directory") ||
			!strings.Contains(again.stderr.String(), fmt.Sprintf("leasehold cluster remove %d", follower+1)) {
			t.Fatalf("an empty data directory under a known ID: exit %d, stderr:\n%s", code, again.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("replica %d started with an empty data directory under the ID its group knows; stdout %s\nstderr:\n%s",
			follower+1, again.stdout.String(), again.stderr.String())
	}
	// Rescheduled with its volume, it starts.
	ms[follower] = start(follower, dirs[follower])

	// The fourth pod of the same StatefulSet joins and is added.
	start(3, dirs[3])
	// The add is refused until the leader hears the restarted replica
	// again (a quorum of the grown group must answer): retry, as the
	// chart's Job does.
	waitFor(t, "cluster add 4", 20*time.Second, func() bool {
		code, stdout, _ := cli(t, "cluster", "add", "4", addrs[3], "--manager", list)
		return code == ExitOK && strings.Contains(stdout, addrs[3])
	})
}
