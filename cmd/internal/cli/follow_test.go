package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/client/clienttest"
)

// TestLookupFollowsTheLeader: lookup given a down address and a follower's
// gets its copy of the table from the leader the follower names.
func TestLookupFollowsTheLeader(t *testing.T) {
	t.Parallel()
	g := clienttest.Start(t, 2)
	g.Lead(1)
	g.SetRoute("kv-1", "127.0.0.1:8001")
	code, stdout, stderr := cli(t, "lookup", "--manager", closedAddr(t)+","+g.Member(0).Addr, "alice")
	if code != ExitOK || stdout != "alice -> kv-1 at 127.0.0.1:8001 (lgn 1)\n" {
		t.Errorf("lookup: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if g.Member(0).Refused() == 0 || g.Member(1).Syncs() != 1 {
		t.Errorf("the follower refused %d streams, the leader served %d; want some and 1",
			g.Member(0).Refused(), g.Member(1).Syncs())
	}
}

// TestWatchFollowsTheLeader: watch keeps printing the table's changes as
// the leadership moves between the replicas it was given.
func TestWatchFollowsTheLeader(t *testing.T) {
	t.Parallel()
	g := clienttest.Start(t, 3)
	g.Lead(1)
	w := startCLI(t, "watch", "--json", "--manager", g.List())
	waitFor(t, "the first copy", 10*time.Second, func() bool { return strings.Contains(w.stdout.String(), `"lsn":1,`) })
	g.SetRoute("kv-1", "127.0.0.1:8001")
	waitFor(t, "the copy at LSN 2", 10*time.Second, func() bool { return strings.Contains(w.stdout.String(), `"lsn":2,`) })

	g.Crash(1, 2)
	g.SetRoute("kv-2", "127.0.0.1:8002")
	waitFor(t, "the copy at LSN 3 from the new leader", 10*time.Second, func() bool {
		return strings.Contains(w.stdout.String(), `"lsn":3,`)
	})
	if g.Member(2).Syncs() == 0 {
		t.Error("the new leader served no sync stream")
	}
	if code := w.stop(t); code != ExitOK {
		t.Errorf("watch: exit %d; stderr:\n%s", code, w.stderr.String())
	}
}

// TestManagerListErrors: a malformed list is bad usage naming the entry;
// a list of which no replica answers names each.
func TestManagerListErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lookup", "--manager", "127.0.0.1:7400,manager-2", "alice"}, `--manager: address "manager-2" is not host:port`},
		{[]string{"watch", "--manager", "127.0.0.1:7400,,127.0.0.1:7401"}, `--manager: an empty address in "127.0.0.1:7400,,127.0.0.1:7401"`},
		{[]string{"lookup", "--manager", "127.0.0.1:http", "alice"}, `--manager: address "127.0.0.1:http" is not host:port: port "http" is not a number from 1 to 65535`},
	} {
		code, stdout, stderr := cli(t, tc.args...)
		if code != ExitUsage || stdout != "" {
			t.Errorf("leasehold %s: exit %d, stdout %q; want %d", strings.Join(tc.args, " "), code, stdout, ExitUsage)
		}
		oneErrorLine(t, stderr, tc.want)
	}

	a, b := closedAddr(t), closedAddr(t)
	for _, args := range [][]string{
		{"lookup", "--manager", a + "," + b, "alice"},
		{"watch", "--manager", a + "," + b},
	} {
		start := time.Now()
		code, stdout, stderr := cli(t, args...)
		if code != ExitFailure || stdout != "" {
			t.Errorf("leasehold %s: exit %d, stdout %q; want exit 1 and nothing", strings.Join(args, " "), code, stdout)
		}
		oneErrorLine(t, stderr, "cannot reach any manager at "+a+", "+b+": "+a+": ")
		if !strings.Contains(stderr, "; "+b+": ") {
			t.Errorf("leasehold %s: the error does not name %s: %s", strings.Join(args, " "), b, stderr)
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("leasehold %s took %s to give up", strings.Join(args, " "), d)
		}
	}
}

// TestManagerFlagHelp: every client command says --manager takes a list.
func TestManagerFlagHelp(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"lookup", "watch"} {
		_, stdout, _ := cli(t, sub, "--help")
		if !strings.Contains(stdout, "--manager ADDR") || !strings.Contains(stdout, "comma-separated list") {
			t.Errorf("%s --help does not say --manager takes a list:\n%s", sub, stdout)
		}
	}
	_, stdout, _ := cli(t, "--help")
	if !strings.Contains(stdout, "comma-separated") {
		t.Errorf("--help does not say --manager takes a list:\n%s", stdout)
	}
}
