package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// logsVar names the environment variable that keeps a failed standby
// scenario's evidence: with LEASEHOLD_E2E_LOGS=dir, a failed run writes
// under dir/<test>-<time>/ every process's whole stdout (timestamped) and
// stderr, the Manager's decisions (--log-level debug) and the pairings of
// every live server as they changed (pairings.log), so that a loss
// notification can be traced to the Owner that held the range, its standby
// and the Manager's reason.
const logsVar = "LEASEHOLD_E2E_LOGS"

// sbEvidence is what a failed run keeps: the processes and the pairings
// sampled while it ran.
type sbEvidence struct {
	mu    sync.Mutex
	procs []*proc
	lines []string // the pairings' changes and the test's own notes
	last  map[string]string
}

func (ev *sbEvidence) add(p *proc) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.procs = append(ev.procs, p)
}

// note records a line in pairings.log, timestamped.
func (ev *sbEvidence) note(format string, args ...any) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.lines = append(ev.lines, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

// sample records id's roles if they changed since the last sample.
func (ev *sbEvidence) sample(id string, r sbRoles) {
	var b strings.Builder
	for _, s := range r.Standbys { // the leases it holds, each with its standby
		fmt.Fprintf(&b, "  hold    [%s, %s) standby %q in sync %v\n", s.Start, s.End, s.Peer, s.InSync)
	}
	for _, s := range r.Holders { // the leases it stands by for, each with its holder
		fmt.Fprintf(&b, "  standby [%s, %s) for %q in sync %v\n", s.Start, s.End, s.Peer, s.InSync)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.last == nil {
		ev.last = map[string]string{}
	}
	if ev.last[id] == b.String() {
		return
	}
	ev.last[id] = b.String()
	ev.lines = append(ev.lines, time.Now().Format("15:04:05.000 ")+id+":\n"+b.String())
}

// keepEvidence starts the pairings' sampler and, at cleanup, writes the
// evidence of a failed run to LEASEHOLD_E2E_LOGS. It does nothing without
// that variable.
func (sc *sbCluster) keepEvidence() {
	dir := os.Getenv(logsVar)
	if dir == "" {
		return
	}
	ids := slices.Sorted(maps.Keys(sc.servers)) // a killed one's refuses, skipped
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, id := range ids {
				if r, err := sc.getRoles(id); err == nil {
					sc.ev.sample(id, r)
				}
			}
		}
	})
	sc.t.Cleanup(func() {
		close(stop)
		wg.Wait()
		if !sc.t.Failed() && os.Getenv(logsVar+"_ALL") == "" {
			return
		}
		out := filepath.Join(dir, sc.t.Name()+"-"+time.Now().Format("150405"))
		if err := os.MkdirAll(out, 0o755); err != nil {
			sc.t.Logf("keeping the evidence: %v", err)
			return
		}
		sc.ev.mu.Lock()
		defer sc.ev.mu.Unlock()
		for _, p := range sc.ev.procs {
			lines, _ := p.snapshot()
			var b strings.Builder
			for _, l := range lines {
				b.WriteString(l.at.Format("15:04:05.000 ") + l.text + "\n")
			}
			_ = os.WriteFile(filepath.Join(out, p.name+".out"), []byte(b.String()), 0o644)
			_ = os.WriteFile(filepath.Join(out, p.name+".err"), []byte(p.stderr.String()), 0o644)
		}
		_ = os.WriteFile(filepath.Join(out, "pairings.log"), []byte(strings.Join(sc.ev.lines, "\n")+"\n"), 0o644)
		sc.t.Logf("the evidence of this run is in %s", out)
	})
}
