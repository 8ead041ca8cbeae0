package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestReplicaUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"manager", "--id", "0"}, "--id must be a positive integer"},
		{[]string{"manager", "--peers", "1"}, `--peers: "1" is not ID=ADDR`},
		{[]string{"manager", "--peers", "x=127.0.0.1:1"}, `--peers: "x=127.0.0.1:1" is not ID=ADDR`},
		{[]string{"manager", "--peers", "1=nohost"}, `--peers: replica 1's address "nohost"`},
		{[]string{"manager", "--peers", "1=127.0.0.1:1,1=127.0.0.1:2"}, "--peers: replica ID 1 appears twice"},
		{[]string{"manager", "--id", "3", "--peers", "1=127.0.0.1:1,2=127.0.0.1:2"}, "--peers does not list this replica's --id 3"},
		{[]string{"manager", "--join"}, "--join needs --peers"},
		{[]string{"manager", "--join", "--id", "1", "--peers", "1=127.0.0.1:1"}, "--join: --peers lists the running group"},
		{[]string{"manager", "--role", "read-replica"}, "--join needs --peers"},
		{[]string{"manager", "--role", "observer"}, `--role "observer": want voter or read-replica`},
		{[]string{"cluster", "add", "0", "127.0.0.1:1"}, `ID "0": want a replica ID`},
		{[]string{"cluster", "add", "4", "nohost"}, "ADDR:"},
		{[]string{"cluster", "remove", "x"}, `ID "x": want a replica ID`},
		{[]string{"restore", "backup.db"}, "--data-dir is required"},
		{[]string{"manager", "--rebalance", "bogus"}, `invalid argument "bogus" for "--rebalance" flag: must be off, weighted or centrifuge`},
		{[]string{"manager", "--rebalance-every", "0s"}, "--rebalance-every 0s must be positive"},
	} {
		code, stdout, stderr := cli(t, tc.args...)
		if code != ExitUsage {
			t.Errorf("leasehold %s: exit %d, want %d; stderr %s", strings.Join(tc.args, " "), code, ExitUsage, stderr)
		}
		if stdout != "" {
			t.Errorf("leasehold %s printed to stdout: %q", strings.Join(tc.args, " "), stdout)
		}
		oneErrorLine(t, stderr, tc.want)
	}
}

type clusterOut struct {
	Leader     uint64 `json:"leader"`
	LeaderAddr string `json:"leader_addr"`
	Managers   []struct {
		ID   uint64 `json:"id"`
		Addr string `json:"addr"`
		Role string `json:"role"`
	} `json:"managers"`
}

func clusterStatus(t *testing.T, list string) (clusterOut, bool) {
	t.Helper()
	code, stdout, _ := cli(t, "cluster", "status", "--manager", list, "--json", "--timeout", "1s")
	var c clusterOut
	if code != ExitOK || json.Unmarshal([]byte(stdout), &c) != nil {
		return c, false
	}
	return c, true
}

// TestClusterCommands runs a group of three Managers through the CLI,
// shows it with status and cluster status, adds a fourth replica that
// joins, and removes it again.
func TestClusterCommands(t *testing.T) {
	t.Parallel()
	addrs := []string{closedAddr(t), closedAddr(t), closedAddr(t), closedAddr(t)}
	var peers []string
	for i, a := range addrs[:3] {
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
	}
	startReplica := func(id int, extra ...string) {
		args := append([]string{"manager", "--timings", "fast", "--id", fmt.Sprint(id), "--listen", addrs[id-1],
			"--data-dir", t.TempDir()}, extra...)
		m := startCLI(t, args...)
		waitFor(t, fmt.Sprintf("manager %d to listen", id), 10*time.Second, func() bool {
			return strings.Contains(m.stdout.String(), "listening on "+addrs[id-1])
		})
	}
	for id := 1; id <= 3; id++ {
		startReplica(id, "--peers", strings.Join(peers, ","))
	}
	list := strings.Join(addrs[:3], ",")
	// A replica may still be a (pre-)candidate for a moment after another
	// won the election, until the winner's first heartbeat reaches it.
	var c clusterOut
	waitFor(t, "one leader and two followers", 10*time.Second, func() bool {
		var ok bool
		if c, ok = clusterStatus(t, list); !ok || c.Leader == 0 {
			return false
		}
		roles := map[string]int{}
		for _, m := range c.Managers {
			roles[m.Role]++
		}
		return len(c.Managers) == 3 && roles["leader"] == 1 && roles["follower"] == 2
	})

	// leasehold status names the leader and, once it has taken over (its
	// first entry committed), shows the namespaces.
	var code int
	var stdout, stderr string
	waitFor(t, "the leader's namespaces", 10*time.Second, func() bool {
		code, stdout, stderr = cli(t, "status", "--manager", addrs[0])
		return code == ExitOK && strings.Contains(stdout, "namespace default:")
	})
	if !regexp.MustCompile(`leader: manager \d at 127\.0\.0\.1:\d+`).MatchString(stdout) || strings.Count(stdout, "127.0.0.1:") < 4 {
		t.Fatalf("status through one replica: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}

	// A fourth replica joins.
	startReplica(4, "--join", "--peers", strings.Join(peers, ","))
	code, stdout, stderr = cli(t, "cluster", "add", "4", addrs[3], "--manager", addrs[2])
	if code != ExitOK || !strings.Contains(stdout, addrs[3]) {
		t.Fatalf("cluster add: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
	waitFor(t, "replica 4 to follow", 10*time.Second, func() bool {
		c, ok := clusterStatus(t, strings.Join(addrs, ","))
		if !ok {
			return false
		}
		for _, m := range c.Managers {
			if m.ID == 4 && m.Role == "follower" {
				return true
			}
		}
		return false
	})

	code, stdout, stderr = cli(t, "cluster", "remove", "4", "--manager", list)
	if code != ExitOK || strings.Contains(stdout, addrs[3]) {
		t.Fatalf("cluster remove: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
	code, _, stderr = cli(t, "cluster", "remove", "9", "--manager", list)
	if code != ExitFailure || !strings.Contains(stderr, "no replica with ID 9") {
		t.Fatalf("removing an unknown replica: exit %d, stderr %s", code, stderr)
	}
}

// TestBackupRestore backs up a running Manager, restores the copy as a new
// group of one under a new epoch, and serves from it.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	m := startCLI(t, "manager", "--timings", "fast", "--listen", addr, "--data-dir", t.TempDir(), "--namespace", "presence")
	waitFor(t, "the manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
	epochOf := func(addr string) uint64 {
		t.Helper()
		code, stdout, stderr := cli(t, "status", "--manager", addr, "--namespace", "presence", "--json")
		var s struct {
			Epoch uint64 `json:"epoch"`
		}
		if code != ExitOK || json.Unmarshal([]byte(stdout), &s) != nil {
			t.Fatalf("status: exit %d, stderr %s, stdout %s", code, stderr, stdout)
		}
		return s.Epoch
	}
	before := epochOf(addr)
	file := filepath.Join(t.TempDir(), "backup.db")
	if code, _, stderr := cli(t, "backup", "--manager", addr, file); code != ExitOK {
		t.Fatalf("backup: exit %d, stderr %s", code, stderr)
	}
	if code, _, stderr := cli(t, "backup", "--manager", addr, file); code != ExitFailure || !strings.Contains(stderr, "exists") {
		t.Fatalf("a second backup to the same file: exit %d, stderr %s", code, stderr)
	}
	m.stop(t)

	dir := filepath.Join(t.TempDir(), "restored")
	addr2 := closedAddr(t)
	if code, _, stderr := cli(t, "restore", "--data-dir", dir, "--advertise", addr2, file); code != ExitOK {
		t.Fatalf("restore: exit %d, stderr %s", code, stderr)
	}
	if code, _, stderr := cli(t, "restore", "--data-dir", dir, "--advertise", addr2, file); code != ExitFailure || !strings.Contains(stderr, "already holds") {
		t.Fatalf("restoring over a data directory: exit %d, stderr %s", code, stderr)
	}
	m2 := startCLI(t, "manager", "--timings", "fast", "--listen", addr2, "--data-dir", dir)
	waitFor(t, "the restored manager to listen", 10*time.Second, func() bool { return strings.Contains(m2.stdout.String(), "listening on") })
	if after := epochOf(addr2); after <= before {
		t.Fatalf("restored epoch %d, want more than the backup's %d", after, before)
	}
}

// TestClusterAddUnreachable adds replica 7 at an address where nothing
// listens to a group of one and to a group of three: cluster add fails
// saying the replica never answered, and the group still has a leader that
// serves (status shows its namespaces).
func TestClusterAddUnreachable(t *testing.T) {
	t.Parallel()
	// The two groups run one after the other in this test's turn: parallel
	// subtests of a parallel test ask for their turns only when its body
	// returns, behind every test of the package still waiting, and so ran
	// last, after the rest had finished.
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			var addrs, peers []string
			for i := range size {
				addrs = append(addrs, closedAddr(t))
				peers = append(peers, fmt.Sprintf("%d=%s", i+1, addrs[i]))
			}
			for i, a := range addrs {
				m := startCLI(t, "manager", "--timings", "fast", "--id", fmt.Sprint(i+1), "--listen", a,
					"--data-dir", t.TempDir(), "--peers", strings.Join(peers, ","), "--learner-timeout", "1s")
				waitFor(t, "a manager to listen", 10*time.Second, func() bool { return strings.Contains(m.stdout.String(), "listening on") })
			}
			list := strings.Join(addrs, ",")
			serving := func(when string) {
				t.Helper()
				waitFor(t, "the leader's namespaces "+when, 10*time.Second, func() bool {
					code, stdout, _ := cli(t, "status", "--manager", list, "--timeout", "1s")
					return code == ExitOK && strings.Contains(stdout, "namespace default:")
				})
			}
			serving("before the add")
			code, stdout, stderr := cli(t, "cluster", "add", "7", closedAddr(t), "--manager", list)
			if code != ExitFailure || stdout != "" {
				t.Fatalf("cluster add of an unreachable replica: exit %d, stdout %q, stderr %s", code, stdout, stderr)
			}
			progress, last := splitProgress(stderr)
			if !strings.Contains(progress, "cluster add: asking the leader to add replica 7") {
				t.Errorf("cluster add said no progress: %q", stderr)
			}
			oneErrorLine(t, last, "replica 7 at 127.0.0.1:")
			for _, want := range []string{"did not catch up", "never answered", "The group is as it was"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("cluster add's error %q does not say %q", stderr, want)
				}
			}
			serving("after the add")
			// The followers learn of the learner's removal with the
			// leader's next append.
			waitFor(t, fmt.Sprintf("a leader and %d replicas", size), 5*time.Second, func() bool {
				c, ok := clusterStatus(t, list)
				return ok && c.Leader != 0 && len(c.Managers) == size
			})
		})
	}
}

// splitProgress separates cluster add's progress lines ("cluster add: …")
// from the rest of its stderr.
func splitProgress(stderr string) (progress, rest string) {
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if strings.HasPrefix(l, "cluster add: ") {
			progress += l
		} else {
			rest += l
		}
	}
	return progress, rest
}

// TestClusterAddUnresolvable checks cluster add refuses at once a replica
// address whose host name does not resolve, before asking the leader
// (which would say so only when its learner timeout ran out).
func TestClusterAddUnresolvable(t *testing.T) {
	t.Parallel()
	addr := startManager(t)
	start := time.Now()
	code, stdout, stderr := cli(t, "cluster", "add", "4", "no-such-host.invalid:7404", "--manager", addr)
	if code != ExitFailure || stdout != "" {
		t.Fatalf("cluster add of an unresolvable name: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	oneErrorLine(t, stderr, `host "no-such-host.invalid" does not resolve here`)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cluster add took %s to refuse an unresolvable name; want at once", took)
	}
}
