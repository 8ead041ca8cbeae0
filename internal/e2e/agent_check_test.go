package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// The single-copy checker of the agent's scenario (agent_test.go). Every
// Python kv server appends, for each request it served, the two readings
// of the host's CLOCK_MONOTONIC between which it believed it held the key
// (its check before the operation and its check after). All the servers
// run on one host, so the readings of different processes compare
// directly: two applications whose intervals for one key overlap both
// believed they held it at one instant, which single copy forbids.

// serveRecord is one request a Python kv server served (kv.py's served).
type serveRecord struct {
	Op  string  `json:"op"`
	Key string  `json:"k"`
	ID  string  `json:"s"`
	PID int     `json:"p"`
	T0  int64   `json:"t0"`
	T1  int64   `json:"t1"`
	E   uint64  `json:"e"`
	L   uint64  `json:"l"`
	V   *string `json:"v"`
}

// app names the application that served: a server ID and its process.
func (r serveRecord) app() string { return fmt.Sprintf("%s (pid %d)", r.ID, r.PID) }

// overlap is two applications serving one key at one instant.
type overlap struct{ a, b serveRecord }

func (o overlap) String() string {
	return fmt.Sprintf("%q: %s served it under LGN %d from %d to %d ns (CLOCK_MONOTONIC) and %s under LGN %d from %d to %d ns",
		o.a.Key, o.a.app(), o.a.L, o.a.T0, o.a.T1, o.b.app(), o.b.L, o.b.T0, o.b.T1)
}

// readServeLogs reads the records of every file; a line cut short by a
// SIGKILL is skipped.
func readServeLogs(paths ...string) ([]serveRecord, error) {
	var out []serveRecord
	for _, p := range paths {
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var r serveRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Key != "" {
				out = append(out, r)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// singleCopyViolations returns the pairs of applications that served one
// key at overlapping instants. An application that served a key under one
// lease (epoch and LGN) believed it held the key from its first check to
// its last under that lease, without a gap (a lease is never taken up
// again once given up, C§2.3), so its records under the lease are merged
// into that one interval: a violator is caught even when its requests and
// the next holder's never run at the same moment.
func singleCopyViolations(recs []serveRecord) []overlap {
	type belief struct {
		app, key string
		e, l     uint64
	}
	spans := map[belief]serveRecord{} // T0 the first check, T1 the last
	for _, r := range recs {
		b := belief{r.app(), r.Key, r.E, r.L}
		if s, ok := spans[b]; ok {
			s.T0, s.T1 = min(s.T0, r.T0), max(s.T1, r.T1)
			spans[b] = s
		} else {
			spans[b] = r
		}
	}
	byKey := map[string][]serveRecord{}
	for _, s := range spans {
		byKey[s.Key] = append(byKey[s.Key], s)
	}
	var out []overlap
	for _, rs := range byKey {
		slices.SortFunc(rs, func(a, b serveRecord) int { return cmpInt(a.T0, b.T0) })
		var active []serveRecord // beliefs still held at the current T0
		for _, r := range rs {
			active = slices.DeleteFunc(active, func(a serveRecord) bool { return a.T1 < r.T0 })
			for _, a := range active {
				if a.app() != r.app() {
					out = append(out, overlap{a, r})
				}
			}
			active = append(active, r)
		}
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pythonDir is examples/kv-python, from this package's directory.
func pythonDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "..", "examples", "kv-python"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// needPython skips t without python3 (CI installs it), and returns the
// interpreter to run.
func needPython(t *testing.T) string {
	t.Helper()
	p, err := python()
	if err != nil {
		t.Skip("python3 not found: the agent's example is in Python (CI installs it)")
	}
	return p
}

// python finds python3 once and asks it for the interpreter it runs: a
// version manager's python3 may be a shim (pyenv's is a shell script that
// runs a dozen more) costing 0.8 s of CPU at each start where the
// interpreter costs 0.1.
var python = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if exe := strings.TrimSpace(string(out)); err == nil && filepath.IsAbs(exe) {
		return exe, nil
	}
	return p, nil
})

// TestSingleCopyCheckerCatchesIgnoredDeadline: the checker can fail. Two
// applications share one range as a stalled agent would leave them: A was
// told the range until a deadline 40 ms ahead and hears nothing more; B is
// granted it 60 ms ahead, after A's deadline, as the Manager would (past
// its reservation). Both try to serve a key every 2 ms for 150 ms with the
// Python client's own check (leasehold_agent.LeaseTable), recording what
// they served as kv.py does. An A that keeps to its deadline gives no
// overlap; an A that ignores it (kv.py --ignore-deadline) serves on after
// B took over, and the checker reports it.
func TestSingleCopyCheckerCatchesIgnoredDeadline(t *testing.T) {
	t.Parallel()
	py := needPython(t)
	const script = `
import json, sys, time
from leasehold_agent import Lease, LeaseTable
ignore = sys.argv[1] == "1"
start = time.monotonic_ns()
rng = {"range": {"start": "0", "end": "0"}, "epoch": "1"}
a, b = LeaseTable(ignore_deadline=ignore), LeaseTable()
a.replace([Lease(dict(rng, lgn="5", deadline_ns=str(start + 40_000_000)))], 1)
granted = False
while time.monotonic_ns() < start + 150_000_000:
    if not granted and time.monotonic_ns() >= start + 60_000_000:
        b.replace([Lease(dict(rng, lgn="6", deadline_ns=str(time.monotonic_ns() + 2_000_000_000)))], 1)
        granted = True
    for name, pid, table in (("A", 1, a), ("B", 2, b)):
        t0 = time.monotonic_ns()
        l = table.check(12345)
        if l is not None and table.continuous(12345, l):
            print(json.dumps({"op": "get", "k": "k", "s": name, "p": pid, "t0": t0, "t1": time.monotonic_ns(), "e": 1, "l": l.lgn}))
    time.sleep(0.002)
`
	for _, ignore := range []bool{false, true} {
		cmd := exec.Command(py, "-c", script, map[bool]string{false: "0", true: "1"}[ignore])
		cmd.Dir = pythonDir(t)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python: %v", err)
		}
		f := filepath.Join(t.TempDir(), "served")
		if err := os.WriteFile(f, out, 0o600); err != nil {
			t.Fatal(err)
		}
		recs, err := readServeLogs(f)
		if err != nil || len(recs) == 0 {
			t.Fatalf("no records (%v)", err)
		}
		v := singleCopyViolations(recs)
		switch {
		case !ignore && len(v) > 0:
			t.Errorf("an application that keeps its deadline: %d overlaps, the first %s", len(v), v[0])
		case ignore && len(v) == 0:
			t.Errorf("an application that ignores its deadline served on after the next holder took over, and the checker saw nothing (%d records)", len(recs))
		}
		t.Logf("ignore deadline %v: %d requests served, %d overlaps", ignore, len(recs), len(v))
	}
}

// TestPythonKeyOf: the Python client maps names to keys as keyspace.KeyOf
// does (xxhash64, seed 0), for short names and for names of 32 bytes and
// more, which take the hash's other path.
func TestPythonKeyOf(t *testing.T) {
	t.Parallel()
	py := needPython(t)
	names := []string{"", "a", "alice", "key-001", "gk-199", "0123456789abcdef0123456789abcdef", "ünïcode and a name of more than thirty-two bytes"}
	arg, _ := json.Marshal(names)
	cmd := exec.Command(py, "-c", "import json,sys\nfrom leasehold_agent import key_of\nprint(json.dumps([str(key_of(n)) for n in json.loads(sys.argv[1])]))", string(arg))
	cmd.Dir = pythonDir(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if want := strconv.FormatUint(uint64(keyspace.KeyOf(n)), 10); got[i] != want {
			t.Errorf("key_of(%q) = %s, keyspace.KeyOf = %s", n, got[i], want)
		}
	}
	if t.Failed() {
		t.Log(strings.TrimSpace(string(out)))
	}
}
