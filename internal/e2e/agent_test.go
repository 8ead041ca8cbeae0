package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/protocol"
)

// TestAgentFaults is the acceptance scenario of leasehold agent
// (docs/agent.md): a Manager, three Python kv servers
// (examples/kv-python), each with its agent, and a gateway in front, under
// a read/write load through the gateway and stale reads sent straight to
// every server. In turn: one application is SIGKILLed (its agent lives
// on), one agent is SIGKILLed (its application lives on), an application
// and then an agent are stopped (SIGSTOP) past the lease, and then every
// server is restarted in turn, its agent drained first. Throughout:
//
//   - no two applications serve one key at one instant: the servers log
//     the CLOCK_MONOTONIC readings of every request they served, and the
//     checker of agent_check_test.go finds no overlap;
//   - no acknowledged write disappears without a loss notification that
//     leasehold watch --json printed after the write;
//   - the planned moves of the rolling restart lose nothing.
func TestAgentFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	s := newAgentScenario(t, false)
	tm := protocol.Fast()
	past := tm.OwnerLease + time.Second // a stop past the lease

	s.phase("SIGKILL of an application", func() {
		s.servers[0].app.kill(t)
		time.Sleep(tm.ManagerLease + time.Second)
		s.servers[0].startApp()
	})
	s.phase("SIGKILL of an agent", func() {
		s.servers[1].agent.kill(t)
		time.Sleep(tm.ManagerLease + time.Second)
		s.servers[1].startAgent()
	})
	s.phase("SIGSTOP of an application past the lease", func() {
		s.stopFor(s.servers[2].app, past)
	})
	s.phase("SIGSTOP of an agent past the lease", func() {
		s.stopFor(s.servers[0].agent, past)
	})
	planned := time.Now()
	s.phase("rolling restart", func() {
		for _, v := range s.servers {
			v.restart()
			s.settle(v.id + " back")
		}
	})
	s.finish()
	for i, o := range s.overlaps {
		if i < 10 {
			t.Errorf("single copy: %s", o)
		}
	}
	if s.unnotified > 0 {
		t.Errorf("%d acknowledged writes disappeared without a loss notification", s.unnotified)
	}

	lostPlanned := 0
	for _, d := range s.load.gone {
		if d.last.at.After(planned) {
			lostPlanned++
			t.Errorf("%q: %q acknowledged at %s during the rolling restart was gone at %s: a planned move lost it",
				d.key, d.last.value, d.last.at.Sub(s.began), d.seen.Sub(s.began))
		}
	}
	t.Logf("planned moves: %d acknowledged writes lost", lostPlanned)
}

// appTimeout is the agents' --app-timeout: a Python application on a
// loaded test machine may go a second without a word to its agent, which
// would then end its session and lose its ranges; a stop past the lease
// (3 s) is longer still.
const appTimeout = 1500 * time.Millisecond

// agentServer is one Python kv server and its agent.
type agentServer struct {
	s                     *agentScenario
	id, listen, sock, log string
	agent, app            *proc
	ignoreDeadline        bool
}

// agentScenario is the Manager, the servers, the gateway and the load.
type agentScenario struct {
	t                *testing.T
	leasehold, py    string
	manager, gateway string
	c                *cli
	w                *watcher
	servers          []*agentServer
	load             *agentLoad
	began            time.Time

	overlaps   []overlap // found by finish
	unnotified int       // found by finish
}

func newAgentScenario(t *testing.T, ignoreDeadline bool) *agentScenario {
	py := needPython(t)
	leasehold, kvBin := build(t)
	s := &agentScenario{t: t, leasehold: leasehold, py: py, began: time.Now()}
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	s.manager, _, _ = strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	s.c = &cli{t: t, leasehold: leasehold, kv: kvBin, manager: s.manager}
	s.w = &watcher{p: start(t, "watch", leasehold, "watch", "--manager", s.manager, "--json")}
	dir, err := os.MkdirTemp("", "lh-agent") // short: a socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i := range 3 {
		id := fmt.Sprintf("py-%d", i+1)
		v := &agentServer{s: s, id: id, listen: freeAddr(t), sock: filepath.Join(dir, id, "agent.sock"),
			log: filepath.Join(dir, id+".served"), ignoreDeadline: ignoreDeadline && i == 0}
		ownerCert(t, id)
		v.startAgent()
		v.startApp()
		s.servers = append(s.servers, v)
	}
	s.settle("three Python servers")
	s.gateway = freeAddr(t)
	start(t, "gateway", leasehold, "gateway", "--manager", s.manager, "--listen", s.gateway,
		"--tls", "--client-certs", "--route", "name=kv,prefix=/kv/,key=path:1,timeout=10s").
		waitLine(t, "leasehold gateway listening on ", 10*time.Second)
	newGatewayClient(t, "https://"+s.gateway).waitReady()
	var direct []string
	for _, v := range s.servers {
		direct = append(direct, v.listen)
	}
	s.load = newAgentLoad(t, "https://"+s.gateway, direct, 120, 6)
	s.load.start()
	time.Sleep(time.Second) // traffic before the first fault
	t.Logf("%s: three Python servers behind their agents and a gateway; load: %s", since(s.began), s.load.summary())
	return s
}

// settle waits for the three servers to hold the key space between them.
func (s *agentScenario) settle(what string) {
	ids := make([]string, len(s.servers))
	for i, v := range s.servers {
		ids[i] = v.id
	}
	if len(ids) == 0 {
		ids = []string{"py-1", "py-2", "py-3"}
	}
	s.c.settle(what, func(st status) bool { return slices.Equal(st.holders(), ids) })
}

// phase runs one fault under the load and waits for the servers to hold
// everything again.
func (s *agentScenario) phase(name string, fault func()) {
	s.t.Helper()
	at := time.Now()
	fault()
	s.settle("after " + name)
	time.Sleep(500 * time.Millisecond) // traffic on the settled assignment
	s.t.Logf("%s: %s, %s later settled; load: %s", since(s.began), name, time.Since(at).Round(100*time.Millisecond), s.load.summary())
}

// stopFor stops p (SIGSTOP) for d, then lets it go on.
func (s *agentScenario) stopFor(p *proc, d time.Duration) {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
	time.Sleep(d)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatal(err)
	}
}

// finish stops the load, reads every key back, and checks single copy and
// the loss notifications.
func (s *agentScenario) finish() {
	t := s.t
	s.load.stop()
	s.load.readBack()
	var seen time.Time
	for _, d := range s.load.gone {
		if d.seen.After(seen) {
			seen = d.seen
		}
	}
	time.Sleep(time.Until(seen.Add(protocol.Fast().NotificationBound() + slack))) // bounded: every notification due is printed
	unnotified := 0
	for _, d := range s.load.gone {
		if _, ok := s.w.coveredAt(d.key, d.last.at, 0, false); !ok {
			if unnotified++; unnotified <= 10 {
				t.Logf("%q: %q, acknowledged at %s, was gone at %s, with no loss notification printed after the write",
					d.key, d.last.value, d.last.at.Sub(s.began), d.seen.Sub(s.began))
			}
		}
	}
	var logs []string
	for _, v := range s.servers {
		logs = append(logs, v.log)
	}
	recs, err := readServeLogs(logs...)
	if err != nil {
		t.Fatal(err)
	}
	v := singleCopyViolations(recs)
	t.Logf("%s: done. load: %s; %d requests served by the applications in all; %d single-copy violations; %d acknowledged writes gone, %d without a loss notification",
		since(s.began), s.load.summary(), len(recs), len(v), len(s.load.gone), unnotified)
	s.overlaps, s.unnotified = v, unnotified
}

// TestAgentFaultsCatchIgnoredDeadline: the scenario's checker can fail on
// real processes. py-1 runs kv.py --ignore-deadline, which checks its
// held set but not the deadlines, and its agent is stopped past the lease:
// py-1 goes on serving the stale reads sent straight to it while the
// Manager gives its ranges to the others, and the checker must report it.
func TestAgentFaultsCatchIgnoredDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	s := newAgentScenario(t, true)
	s.phase("SIGSTOP of the agent of an application that ignores its deadlines", func() {
		s.stopFor(s.servers[0].agent, protocol.Fast().OwnerLease+time.Second)
	})
	s.finish()
	if len(s.overlaps) == 0 {
		t.Fatal("the checker found no two applications serving one key at one instant, though py-1 ignored its deadlines while its agent was stopped")
	}
	t.Logf("the checker caught %d overlaps; the first: %s", len(s.overlaps), s.overlaps[0])
}

func (v *agentServer) startAgent() {
	s := v.s
	v.agent = start(s.t, v.id+" agent", s.leasehold, "agent", "--manager", s.manager, "--timings", "fast",
		"--id", v.id, "--addr", v.listen, "--socket", v.sock, "--app-timeout", appTimeout.String())
	v.agent.waitLine(s.t, "leasehold agent listening on ", 10*time.Second)
}

func (v *agentServer) startApp() {
	s := v.s
	args := []string{filepath.Join(pythonDir(s.t), "kv.py"), "--listen", v.listen, "--socket", v.sock, "--id", v.id,
		"--certs-dir", certsDirFor(s.t), "--serve-log", v.log}
	if v.ignoreDeadline {
		args = append(args, "--ignore-deadline")
	}
	v.app = start(s.t, v.id+" app", s.py, args...)
	v.app.waitLine(s.t, "kv serving on ", 10*time.Second)
}

// restart stops the agent gracefully (it drains: the application hands
// every range over), then the application, and starts both again.
func (v *agentServer) restart() {
	t := v.s.t
	_ = v.agent.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-v.agent.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s's agent did not exit within 30 s of SIGTERM", v.id)
	}
	v.app.stop()
	v.startApp()
	v.startAgent()
}

// agentLoad writes and reads keys through the gateway, each worker its own
// keys, and sends stale reads straight to every server.
type agentLoad struct {
	t       *testing.T
	gw      string
	direct  []string
	keys    []string
	workers int
	hc      *http.Client

	mu     sync.Mutex
	latest map[string]ack      // guarded by mu: the last acknowledged write
	maybe  map[string][]string // guarded by mu: writes of unknown outcome since
	gone   []disappearance     // guarded by mu

	ops, failed, staleReads atomic.Int64
	quit                    chan struct{}
	wg                      sync.WaitGroup
	began                   time.Time
}

func newAgentLoad(t *testing.T, gw string, direct []string, nkeys, workers int) *agentLoad {
	tr := frontendTransport(t, certs.Lookup, certs.Owner)
	tr.MaxIdleConnsPerHost = 64
	l := &agentLoad{t: t, gw: gw, direct: direct, workers: workers, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second},
		latest: map[string]ack{}, maybe: map[string][]string{}, quit: make(chan struct{})}
	for i := range nkeys {
		l.keys = append(l.keys, fmt.Sprintf("ak-%03d", i))
	}
	return l
}

func (l *agentLoad) do(method, url, body string) (int, string, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := l.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

func (l *agentLoad) start() {
	l.began = time.Now()
	for w := range l.workers {
		l.wg.Go(func() {
			var mine []string
			for i := w; i < len(l.keys); i += l.workers {
				mine = append(mine, l.keys[i])
			}
			for n := 0; ; n++ {
				select {
				case <-l.quit:
					return
				default:
				}
				k := mine[(n/2)%len(mine)] // read back, then write anew
				if n%2 == 0 {
					l.check(k)
				} else {
					l.put(k, fmt.Sprintf("v%d-%d", w, n))
				}
			}
		})
	}
	l.wg.Go(func() { // stale reads: every key at every server
		for n := 0; ; n++ {
			select {
			case <-l.quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			k := l.keys[n%len(l.keys)]
			_, _, _ = l.do("GET", "https://"+l.direct[n%len(l.direct)]+"/kv/"+k, "")
			l.staleReads.Add(1)
		}
	})
}

func (l *agentLoad) put(k, v string) {
	code, _, err := l.do("PUT", l.gw+"/kv/"+k, v)
	l.ops.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil && code == http.StatusNoContent:
		l.latest[k] = ack{value: v, by: "gateway", at: time.Now()}
		l.maybe[k] = nil
	case err == nil && code < 500 && code != http.StatusMisdirectedRequest:
		l.failed.Add(1) // refused outright: not written
	default:
		l.failed.Add(1) // a timeout or a 5xx: it may have been written
		l.maybe[k] = append(l.maybe[k], v)
	}
}

// check reads k back: its latest acknowledged value, or a write of unknown
// outcome since, or else the value has disappeared.
func (l *agentLoad) check(k string) {
	code, body, err := l.do("GET", l.gw+"/kv/"+k, "")
	l.ops.Add(1)
	if err != nil || (code != http.StatusOK && code != http.StatusNotFound) {
		l.failed.Add(1)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	last, acked := l.latest[k]
	switch {
	case code == http.StatusOK && slices.Contains(l.maybe[k], body):
		l.latest[k] = ack{value: body, by: "gateway", at: last.at}
		l.maybe[k] = nil
	case acked && (code == http.StatusNotFound || body != last.value):
		l.gone = append(l.gone, disappearance{key: k, last: last, seen: time.Now()})
		delete(l.latest, k)
		l.maybe[k] = nil
	}
}

func (l *agentLoad) stop() {
	close(l.quit)
	l.wg.Wait()
}

// readBack reads every key once more, retrying while the gateway fails.
func (l *agentLoad) readBack() {
	for _, k := range l.keys {
		for i := 0; i < 20; i++ {
			before := l.failed.Load()
			l.check(k)
			if l.failed.Load() == before {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (l *agentLoad) summary() string {
	d := time.Since(l.began)
	return fmt.Sprintf("%d requests through the gateway (%.0f/s), %d failed; %d stale direct reads",
		l.ops.Load(), float64(l.ops.Load())/d.Seconds(), l.failed.Load(), l.staleReads.Load())
}
