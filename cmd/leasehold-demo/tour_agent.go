package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	kvpython "github.com/leasehold/leasehold/examples/kv-python"
	"github.com/leasehold/leasehold/gateway"
	"github.com/leasehold/leasehold/internal/agent"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// tourAgent is the tour of examples/kv-python (leasehold-demo agent): a
// Manager in this process (fast timings, mutual TLS), three Python kv
// servers as processes, each beside an agent of this process on a Unix
// socket of its own, and a gateway in front. It writes keys through the
// gateway, kills one Python server (SIGKILL) and drains another
// (SIGTERM), and checks the kv promise: a key keeps its value unless a
// loss notification covers it, and the planned move loses nothing. It
// exits 0 only if that held.
func tourAgent(ctx context.Context, out io.Writer) error {
	py, err := exec.LookPath("python3")
	if err != nil {
		return errors.New("agent tour: the example servers are Python: python3 is needed on $PATH")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids := []string{"py-1", "py-2", "py-3"}
	addr, dir, err := startTourManager(ctx, ids...)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) // after the servers are reaped
	if err := writeExample(dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings, mutual TLS). Three Python kv servers\n", addr)
	fmt.Fprintln(out, "   (examples/kv-python) start as processes, each beside a leasehold agent that")
	fmt.Fprintln(out, "   holds its leases and tells it, over a Unix socket, until when on CLOCK_MONOTONIC")
	fmt.Fprintln(out, "   it may serve each range:")
	listen := map[string]string{}
	apps := tourProcs{}
	defer func() { cancel(); apps.wait() }()
	for _, id := range ids {
		if listen[id], err = freeLoopback(); err != nil {
			return err
		}
		sock := filepath.Join(dir, id, "agent.sock")
		if err := startTourAgent(ctx, addr, dir, id, listen[id], sock); err != nil {
			return err
		}
		if apps[id], err = spawnPython(ctx, out, py, dir, id, listen[id], sock); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var losses []lossAt // guarded by mu
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Manager: addr, Timing: protocol.Fast(), CertsDir: dir},
		OnLoss: func(x lookup.Loss) { mu.Lock(); losses = append(losses, lossAt{time.Now(), x}); mu.Unlock() }})
	if err != nil {
		return err
	}
	defer l.Close()
	gw, err := startTourGateway(ctx, addr, dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   A gateway serves the frontends on http://%s/kv/{key}.\n", gw.addr)
	if err := awaitOwners(ctx, l, ids); err != nil {
		return err
	}

	keys := make([]string, 30)
	want := map[string]string{}
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%02d", i)
		want[keys[i]] = fmt.Sprintf("v1-%02d", i)
		if err := gw.put(keys[i], want[keys[i]]); err != nil {
			return err
		}
	}
	if err := gw.readAll(keys, want, nil); err != nil {
		return err
	}
	fmt.Fprintf(out, "2. %d keys written through the gateway; every key reads back its value: %d/%d.\n", len(keys), len(keys), len(keys))

	onKilled := keysOf(l, keys, "py-2")
	fmt.Fprintf(out, "3. py-2 is killed (SIGKILL) while it holds %d of the keys. Its agent sees the\n", len(onKilled))
	fmt.Fprintln(out, "   session end and stops renewing at once: nothing py-2 may still have believed is")
	fmt.Fprintln(out, "   freed early; its ranges lapse at the Manager, which reports them lost.")
	killed := time.Now()
	apps["py-2"].Process.Kill()
	_ = apps["py-2"].Wait()
	lost := map[string]bool{}
	for _, k := range onKilled {
		lost[k] = true
	}
	if err := gw.readAll(keys, want, lost); err != nil {
		return err
	}
	mu.Lock()
	covered := coveredKeys(losses, killed, onKilled)
	mu.Unlock()
	if len(covered) != len(onKilled) {
		return fmt.Errorf("agent tour: of the %d keys py-2 held, %d are covered by a loss notification", len(onKilled), len(covered))
	}
	fmt.Fprintf(out, "   Within %s the %d keys read back \"not found\", each covered by a loss\n", time.Since(killed).Round(100*time.Millisecond), len(onKilled))
	fmt.Fprintf(out, "   notification; the other %d kept their values. py-2 restarts and joins again:\n", len(keys)-len(onKilled))
	if apps["py-2"], err = spawnPython(ctx, out, py, dir, "py-2", listen["py-2"], filepath.Join(dir, "py-2", "agent.sock")); err != nil {
		return err
	}
	if err := awaitOwners(ctx, l, ids); err != nil {
		return err
	}
	for _, k := range onKilled {
		want[k] = "v2-" + k
		if err := gw.put(k, want[k]); err != nil {
			return err
		}
	}

	onDrained := keysOf(l, keys, "py-3")
	fmt.Fprintf(out, "4. py-3 is drained (SIGTERM) while it holds %d keys: it asks its agent to\n", len(onDrained))
	fmt.Fprintln(out, "   drain, and hands every range over to the others with its values.")
	mu.Lock()
	before := len(losses)
	mu.Unlock()
	apps["py-3"].Process.Signal(syscall.SIGTERM)
	if err := apps["py-3"].Wait(); err != nil {
		return fmt.Errorf("py-3: %w", err)
	}
	if err := gw.readAll(keys, want, nil); err != nil {
		return err
	}
	mu.Lock()
	after := len(losses)
	mu.Unlock()
	if after != before {
		return fmt.Errorf("agent tour: %d loss notifications while py-3 drained; a planned move loses nothing", after-before)
	}
	fmt.Fprintf(out, "   Every key reads back its value: %d/%d, with no loss notification. Done.\n", len(keys), len(keys))
	return nil
}

// lossAt is a loss notification and when it arrived.
type lossAt struct {
	at   time.Time
	loss lookup.Loss
}

// coveredKeys returns the keys a loss notification after since covers.
func coveredKeys(losses []lossAt, since time.Time, keys []string) []string {
	var out []string
	for _, k := range keys {
		key := keyspace.KeyOf(k)
		if slices.ContainsFunc(losses, func(l lossAt) bool {
			return l.at.After(since) && (l.loss.All || slices.ContainsFunc(l.loss.Ranges, func(r keyspace.Range) bool { return r.Contains(key) }))
		}) {
			out = append(out, k)
		}
	}
	return out
}

// keysOf returns the keys the Lookup routes to owner.
func keysOf(l *lookup.Lookup, keys []string, id string) []string {
	var out []string
	for _, k := range keys {
		if r, ok := l.Lookup(keyspace.KeyOf(k)); ok && r.Owner == id {
			out = append(out, k)
		}
	}
	return out
}

// awaitOwners waits up to 15 s for the Lookup's copy to route the whole
// key space to the owners ids, all of them holding some.
func awaitOwners(ctx context.Context, l *lookup.Lookup, ids []string) error {
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(50 * time.Millisecond) {
		seen := map[string]bool{}
		whole := true
		for i := range 256 {
			r, ok := l.Lookup(keyspace.Key(uint64(i) << 56))
			if !ok {
				whole = false
				break
			}
			seen[r.Owner] = true
		}
		if whole && len(seen) == len(ids) && !slices.ContainsFunc(ids, func(id string) bool { return !seen[id] }) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("agent tour: %v did not hold the key space between them within 15 s", ids)
}

// writeExample writes the Python files into dir.
func writeExample(dir string) error {
	return fs.WalkDir(kvpython.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := kvpython.Files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o600)
	})
}

// startTourAgent runs an agent in this process for Owner id, on sock.
func startTourAgent(ctx context.Context, addr, dir, id, listen, sock string) error {
	a, err := agent.New(agent.Config{Owner: owner.Config{ID: id, Addr: listen,
		Connection: leasehold.Connection{Manager: addr, CertsDir: dir, Timing: protocol.Fast()}}})
	if err != nil {
		return err
	}
	lis, err := agent.ListenUnix(sock)
	if err != nil {
		return err
	}
	go a.Serve(ctx, lis, "")
	return nil
}

// spawnPython starts kv.py for id beside its agent and copies its first
// line to out.
func spawnPython(ctx context.Context, out io.Writer, py, dir, id, listen, sock string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, py, filepath.Join(dir, "kv.py"), "--listen", listen, "--socket", sock, "--id", id,
		"--certs-dir", dir, "--drain-timeout", "10")
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	fmt.Fprintf(out, "   %s: %s", id, line)
	go func() { _, _ = io.Copy(io.Discard, br) }() // the rest: the handovers
	return cmd, err
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tourGateway is the gateway in front of the Python servers.
type tourGateway struct {
	addr string
	hc   *http.Client
}

func startTourGateway(ctx context.Context, addr, dir string) (*tourGateway, error) {
	src, err := certs.Open(dir, certs.Lookup, "demo-frontend")
	if err != nil {
		return nil, err
	}
	route, err := gateway.ParseRoute("name=kv,prefix=/kv/,key=path:1,timeout=15s")
	if err != nil {
		return nil, err
	}
	g, err := gateway.New(ctx, gateway.Config{Manager: addr, Routes: []gateway.Route{route}, Certs: src, Timing: protocol.Fast()})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	go func() { <-ctx.Done(); srv.Close(); g.Close() }()
	return &tourGateway{addr: lis.Addr().String(), hc: &http.Client{Timeout: 20 * time.Second}}, nil
}

func (g *tourGateway) do(method, key, body string) (int, string, error) {
	req, _ := http.NewRequest(method, "http://"+g.addr+"/kv/"+key, strings.NewReader(body))
	resp, err := g.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func (g *tourGateway) put(key, value string) error {
	code, body, err := g.do("PUT", key, value)
	if err != nil || code != http.StatusNoContent {
		return fmt.Errorf("agent tour: PUT %s: %d %q %v", key, code, body, err)
	}
	return nil
}

// readAll reads every key back until each has its value (or, for a key in
// lost, reads "not found"), for at most 15 s.
func (g *tourGateway) readAll(keys []string, want map[string]string, lost map[string]bool) error {
	var last error
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(100 * time.Millisecond) {
		last = nil
		for _, k := range keys {
			code, body, err := g.do("GET", k, "")
			switch {
			case err != nil:
				last = err
			case lost[k] && code != http.StatusNotFound:
				last = fmt.Errorf("GET %s = %d %q; want not found: its server was killed", k, code, body)
			case !lost[k] && (code != http.StatusOK || body != want[k]):
				last = fmt.Errorf("GET %s = %d %q; want %q", k, code, body, want[k])
			}
			if last != nil {
				break
			}
		}
		if last == nil {
			return nil
		}
	}
	return fmt.Errorf("agent tour: %w", last)
}
