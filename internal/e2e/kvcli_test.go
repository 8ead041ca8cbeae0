package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// The kv client commands (kv put, kv get) the scenarios run, and what
// they check of their output.

// result is the outcome of kv get.
type result struct {
	found bool
	value string
}

// batchKeys is how many keys one kv put or kv get process takes (kv put
// K1 V1 K2 V2 ..., kv get K1 K2 ...): a process per key spent most of its
// time, and most of the scenario's CPU, starting and fetching the lease
// table (114 processes for 24 keys, about 7 s of CPU of the 16 the
// scenario took; 16 processes now). The first key of each step still runs
// alone, as the walkthrough runs kv (kv put alice hello, kv get alice).
const batchKeys = 12

// batchTimeout is kv's --timeout for batch b: --timeout is the whole
// command's, so a batch gets 25 s (within run's 30) where one key gets kv's
// default 10 s, as it did when each key had its own process.
func batchTimeout(b []string) string {
	if len(b) == 1 {
		return "10s"
	}
	return "25s"
}

// batches splits ks for the kv processes: the first key alone, then
// batches of at most batchKeys.
func batches(ks []string) [][]string {
	if len(ks) == 0 {
		return nil
	}
	out := [][]string{ks[:1]}
	for rest := ks[1:]; len(rest) > 0; {
		n := min(batchKeys, len(rest))
		out, rest = append(out, rest[:n]), rest[n:]
	}
	return out
}

// putAll runs kv put KEY VALUE [KEY VALUE]... for the keys in batches,
// with workers in parallel, and returns when each key's process started
// (its put started then or a few milliseconds later, after the keys before
// it in the batch). Every put must succeed.
func (c *cli) putAll(ks []string, values map[string]string) map[string]time.Time {
	c.t.Helper()
	var mu sync.Mutex
	started := map[string]time.Time{}
	parallel(batches(ks), func(b []string) {
		args := []string{"put", "--timeout", batchTimeout(b)}
		mu.Lock()
		for _, k := range b {
			started[k] = time.Now()
			args = append(args, k, values[k])
		}
		mu.Unlock()
		if out, err := c.run(args...); err != nil {
			c.t.Errorf("kv put %s: %v: %s", strings.Join(b, " "), err, out)
		}
	})
	if c.t.Failed() {
		c.t.FailNow()
	}
	return started
}

// getAll runs kv get KEY [KEY]... for the keys in batches, with workers in
// parallel. A key is found or not found: alone, exit 0 with the value on
// stdout or exit 1 with "not found" on stderr; in a batch, a line "KEY\tVALUE"
// on stdout or "KEY: not found" on stderr, and exit 1 if any is not found.
// Anything else fails the test.
func (c *cli) getAll(ks []string) map[string]result {
	c.t.Helper()
	var mu sync.Mutex
	out := map[string]result{}
	parallel(batches(ks), func(b []string) {
		stdout, err := c.run(append([]string{"get", "--timeout", batchTimeout(b)}, b...)...)
		got, bad := parseGets(b, stdout, err)
		if bad != "" {
			c.t.Errorf("kv get %s: %s", strings.Join(b, " "), bad)
			return
		}
		mu.Lock()
		maps.Copy(out, got)
		mu.Unlock()
	})
	if c.t.Failed() {
		c.t.FailNow()
	}
	return out
}

// parseGets reads what kv get printed for keys, and says what is wrong
// with it if anything is: an exit other than 0 or 1 ("not found"), a line
// that names no key asked for, or a key it said nothing of.
func parseGets(keys []string, stdout string, err error) (map[string]result, string) {
	ee, _ := errors.AsType[*exec.ExitError](err)
	if err != nil && (ee == nil || ee.ExitCode() != 1) {
		return nil, fmt.Sprintf("%v: %s", err, stdout)
	}
	var stderr string
	if ee != nil {
		stderr = string(ee.Stderr)
	}
	got := map[string]result{}
	if len(keys) == 1 {
		switch {
		case err == nil:
			got[keys[0]] = result{found: true, value: strings.TrimSuffix(stdout, "\n")}
		case strings.Contains(stderr, "not found"):
			got[keys[0]] = result{}
		default:
			return nil, fmt.Sprintf("%v: %s", err, stderr)
		}
		return got, ""
	}
	for ln := range strings.Lines(stdout) {
		k, v, ok := strings.Cut(strings.TrimSuffix(ln, "\n"), "\t")
		if !ok || !slices.Contains(keys, k) {
			return nil, fmt.Sprintf("a line for no key asked for: %q", ln)
		}
		got[k] = result{found: true, value: v}
	}
	for ln := range strings.Lines(stderr) {
		k, ok := strings.CutSuffix(strings.TrimSuffix(ln, "\n"), ": not found")
		if !ok || !slices.Contains(keys, k) {
			return nil, fmt.Sprintf("%v: %s", err, stderr)
		}
		got[k] = result{}
	}
	if len(got) != len(keys) {
		return nil, fmt.Sprintf("%d keys asked for, %d answered (%v): %s", len(keys), len(got), err, stderr)
	}
	return got, ""
}

// parallel calls f on each item with workers in parallel.
func parallel[T any](items []T, f func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range work {
				f(it)
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}

// run runs one kv put or get and returns its stdout; an error carries the
// exit status and stderr.
func (c *cli) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = slices.Insert(args, 1, "--manager", c.manager)
	cmd := exec.CommandContext(ctx, c.kv, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Env = envFor(c.t)
	out, err := cmd.Output()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() != 1 {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return string(out), err
}

// expect checks a kv get result: the value want, or not found with a loss
// notification printed after the put started to explain it.
func (c *cli) expect(w *watcher, k string, res result, want string, putAt time.Time) {
	c.t.Helper()
	switch {
	case res.found && res.value != want:
		c.t.Errorf("get %q = %q, want %q", k, res.value, want)
	case !res.found && !w.covered(k, putAt, protocol.Fast().NotificationBound()+slack):
		c.t.Errorf("get %q: not found, and no loss notification covers it (want %q)", k, want)
	case !res.found:
		c.t.Logf("get %q: not found; its lease was lost (watch printed the loss), as a lapse under load does", k)
	}
}
