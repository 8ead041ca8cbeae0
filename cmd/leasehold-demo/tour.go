package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/cmd/internal/cli"
	"github.com/leasehold/leasehold/examples/kv/kv"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// newRoot is the leasehold-demo command: the main tour, with the example
// services' tours (tours.go) and the hidden subcommands that run the tours'
// servers as its subcommands.
func newRoot(e *env) *cobra.Command {
	var dashboardAddr string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "leasehold-demo",
		Short: "A one-minute tour: a Manager, KV owners, a crash, a loss notification, a new owner",
		Long: `leasehold-demo runs, on 127.0.0.1 with fast timings (2 s leases), a Manager in this process and
three KV servers (examples/kv) as separate processes, and a frontend that writes keys
through them. It crashes one server with SIGKILL, shows the loss notification and the
frontend republishing what was lost, then adds a fourth server and shows ranges moving.
With --dashboard it also serves the live dashboard (leasehold dashboard) of its Manager,
and keeps everything running after the tour until interrupted.

Everything speaks mutual TLS: the demo makes a throwaway CA and a certificate for each
process in a temporary directory, removed when it ends (--insecure: plaintext).`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error {
			d := &demo{out: e.stdout, timing: protocol.Fast(), dashboard: dashboardAddr, insecure: insecure}
			return d.run(ctx)
		}),
	}
	cmd.AddCommand(newTourCommands(e)...) // pubsub, presence, mail (tours.go)
	cmd.AddCommand(newDemoOwnerCommand(e), newDemoAppCommand(e))
	cmd.Flags().StringVar(&dashboardAddr, "dashboard", "", "also serve the live dashboard on `ADDR` (host:port; "+cli.DefaultDashboard+" when given without a value)")
	cmd.Flags().Lookup("dashboard").NoOptDefVal = cli.DefaultDashboard
	cmd.Flags().BoolVar(&insecure, "insecure", false, "run in plaintext, without certificates")
	return cmd
}

// newDemoOwnerCommand is the hidden subcommand demo starts its KV servers
// with, so that crashing one is a real SIGKILL of a real process.
func newDemoOwnerCommand(e *env) *cobra.Command {
	var managerAddr, id, certsDir string
	cmd := &cobra.Command{
		Use:    "demo-owner",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error {
			s, err := kv.NewServer(ctx, kv.ServerConfig{
				Manager: managerAddr, ID: id, Listen: "127.0.0.1:0", Timing: protocol.Fast(), CertsDir: certsDir, Insecure: certsDir == "",
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "ready %s\n", s.Addr())
			<-ctx.Done()
			stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.Close(stop)
		}),
	}
	cmd.Flags().StringVar(&managerAddr, "manager", "", "the Manager's address, host:port, or a comma-separated list of its replicas' addresses")
	cmd.Flags().StringVar(&id, "id", "", "the owner ID")
	cmd.Flags().StringVar(&certsDir, "certs-dir", "", "the certificates directory (none: plaintext)")
	return cmd
}

type demo struct {
	out       io.Writer
	timing    protocol.Timing
	dashboard string // where to serve the dashboard; "" for none
	insecure  bool   // plaintext, no certificates
	certsDir  string // the throwaway certificates; "" with insecure
	srv       *manager.Server
	addr      string
	owners    map[string]*exec.Cmd

	mu     sync.Mutex
	values map[string]string // what the frontend wrote, to republish
	lost   []keyspace.Range  // loss notifications not yet handled
	losses chan struct{}
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.owners = map[string]*exec.Cmd{}
	defer d.stopOwners()
	t := d.timing
	d.say("leasehold demo: a Manager, KV servers that keep state in memory, and a frontend,")
	d.say("on 127.0.0.1 with fast timings (owner leases of %s, renewed every %s).", t.OwnerLease, t.Renew)
	d.say("")

	// 0. The certificates.
	var src *certs.Source
	if !d.insecure {
		dir, err := os.MkdirTemp("", "leasehold-demo-certs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if src, err = makeDemoCerts(dir, []string{"kv-1", "kv-2", "kv-3", "kv-4"}); err != nil {
			return err
		}
		d.certsDir = dir
		d.say("0. A throwaway CA in %s signed a certificate for each process: the Manager", dir)
		d.say("   (replica 1), each KV server (an Owner of namespace default), the frontend (a")
		d.say("   Lookup) and an operator. Every connection below is mutual TLS, and the Manager")
		d.say("   admits each call by the identity in its caller's certificate.")
		d.say("")
	}

	// 1. The Manager.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.addr = lis.Addr().String()
	if d.srv, err = manager.NewServer(manager.Config{Timing: t, Certs: src, Insecure: d.insecure}); err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- d.srv.Serve(ctx, lis) }()
	defer func() { cancel(); <-served }()
	d.say("1. A Manager is listening on %s. A new Manager grants nothing for one manager", d.addr)
	d.say("   lease (%s): it cannot know what an earlier run of it granted.", t.ManagerLease)

	// 2. Three KV servers, each its own process.
	d.say("")
	d.say("2. Three KV servers start, each a process linking the Owner library:")
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		addr, err := d.startOwner(ctx, id)
		if err != nil {
			return err
		}
		d.say("   %s serves %s on %s", id, map[bool]string{true: "HTTP", false: "HTTPS"}[d.insecure], addr)
	}
	if err := d.waitAssigned(ctx, 3); err != nil {
		return err
	}
	d.say("   The Manager split the key space among them (consistent hashing, 64 ranges each):")
	d.showOwners()
	if d.dashboard != "" {
		wait, err := d.startDashboard(ctx)
		if err != nil {
			return err
		}
		defer func() { cancel(); _ = wait() }()
	}

	// 3. A frontend writes keys.
	d.say("")
	d.say("3. A frontend links the Lookup library: a full copy of the lease table, so finding")
	d.say("   a key's server is a local read. It writes 30 keys through the KV client:")
	d.values = map[string]string{}
	d.losses = make(chan struct{}, 1)
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Manager: d.addr, Timing: t, CertsDir: d.certsDir, Insecure: d.insecure}, OnLoss: d.onLoss})
	if err != nil {
		return err
	}
	defer l.Close()
	client, err := kv.NewClient(ctx, kv.ClientConfig{Manager: d.addr, Timing: t, Timeout: 20 * time.Second, CertsDir: d.certsDir, Insecure: d.insecure})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := l.WaitSynced(ctx); err != nil {
		return err
	}
	names := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"}
	var keys []string
	for _, n := range names {
		for _, kind := range []string{"user", "session", "queue"} {
			keys = append(keys, kind+":"+n)
		}
	}
	for i, k := range keys {
		v := fmt.Sprintf("v1-%d", i)
		if err := client.Put(ctx, k, []byte(v)); err != nil {
			return err
		}
		d.mu.Lock()
		d.values[k] = v
		d.mu.Unlock()
		if i < 5 {
			r, _ := l.Lookup(keyspace.KeyOf(k))
			d.say("   put %-14s -> %s (lease %d)", k, r.Owner, r.LGN)
		}
	}
	d.say("   ... and %d more.", len(keys)-5)
	byOwner := d.countByOwner(l, keys)

	// 4. A crash.
	d.say("")
	d.say("4. kv-2 crashes (SIGKILL): the %d keys it held are gone with its memory.", byOwner["kv-2"])
	d.say("   Its leases run out; the Manager notices when its own, longer reservation ends,")
	d.say("   and every Lookup raises a loss notification for kv-2's ranges.")
	start := time.Now()
	d.crash("kv-2")
	n, told, err := d.republish(ctx, client)
	if err != nil {
		return err
	}
	d.say("   The frontend was told %s after the crash, and republished the %d keys that lay", told.Sub(start).Round(100*time.Millisecond), n)
	d.say("   in those ranges.")
	if err := d.waitAssigned(ctx, 2); err != nil {
		return err
	}
	d.say("   The survivors now hold everything:")
	d.showOwners()
	if err := d.readAll(ctx, client, keys); err != nil {
		return err
	}

	// 5. A new owner.
	d.say("")
	d.say("5. kv-4 joins: the Manager moves ranges to it. These are planned moves: each old")
	d.say("   holder hands the range's values to kv-4 before giving it up, and kv-4's grant is")
	d.say("   marked migrated, so no Lookup raises a loss notification (C§2.1.2).")
	d.mu.Lock()
	lostBefore := len(d.lost)
	d.mu.Unlock()
	if _, err := d.startOwner(ctx, "kv-4"); err != nil {
		return err
	}
	if err := d.waitAssigned(ctx, 3); err != nil {
		return err
	}
	d.showOwners()
	d.mu.Lock()
	newLosses := len(d.lost) - lostBefore
	d.mu.Unlock()
	if newLosses != 0 {
		return fmt.Errorf("demo: %d ranges were reported lost while kv-4 joined; a planned move loses nothing", newLosses)
	}
	d.say("   No loss notification; nothing to republish.")
	if err := d.readAll(ctx, client, keys); err != nil {
		return err
	}
	d.say("")
	d.say("Done. At no point did two servers hold the same key, every lost range was reported,")
	d.say("and the ranges that moved on purpose took their values with them.")
	d.say("Next: README.md's five-minute walkthrough does the same by hand: a CA of your own, 'leasehold manager', 'kv serve', 'leasehold status'.")
	if d.dashboard != "" {
		d.say("")
		d.say("The dashboard stays up with the Manager and its servers; interrupt (Ctrl-C) to stop.")
		<-ctx.Done()
	}
	return nil
}

func (d *demo) onLoss(loss lookup.Loss) {
	d.mu.Lock()
	d.lost = append(d.lost, loss.Ranges...)
	d.mu.Unlock()
	select {
	case d.losses <- struct{}{}:
	default:
	}
}

// republish waits for a loss notification, then for things to settle, and
// writes again every key that lay in a lost range. It returns how many keys
// it wrote and when the first notification arrived.
func (d *demo) republish(ctx context.Context, client *kv.Client) (int, time.Time, error) {
	wait, cancel := context.WithTimeout(ctx, 10*d.timing.ManagerLease)
	defer cancel()
	select {
	case <-d.losses:
	case <-wait.Done():
		return 0, time.Time{}, errors.New("demo: no loss notification arrived")
	}
	told := time.Now()
	// More notifications may follow at once: collect them for a moment.
	quiet := time.NewTimer(2 * d.timing.Renew)
	defer quiet.Stop()
	select {
	case <-quiet.C:
	case <-ctx.Done():
		return 0, told, ctx.Err()
	}
	d.mu.Lock()
	lost := keyspace.NewRangeSet(d.lost...)
	d.lost = nil
	var again []string
	for k := range d.values {
		if lost.Contains(keyspace.KeyOf(k)) {
			again = append(again, k)
		}
	}
	d.mu.Unlock()
	slices.Sort(again)
	for _, k := range again {
		d.mu.Lock()
		v := d.values[k]
		d.mu.Unlock()
		if err := client.Put(ctx, k, []byte(v)); err != nil {
			return 0, told, err
		}
	}
	return len(again), told, nil
}

func (d *demo) readAll(ctx context.Context, client *kv.Client, keys []string) error {
	for _, k := range keys {
		got, err := client.Get(ctx, k)
		if err != nil {
			return fmt.Errorf("demo: reading %s: %w", k, err)
		}
		d.mu.Lock()
		want := d.values[k]
		d.mu.Unlock()
		if string(got) != want {
			return fmt.Errorf("demo: %s reads %q, want %q", k, got, want)
		}
	}
	d.say("   Every key reads back its value: %d/%d.", len(keys), len(keys))
	return nil
}

func (d *demo) countByOwner(l *lookup.Lookup, keys []string) map[string]int {
	out := map[string]int{}
	for _, k := range keys {
		if r, ok := l.Lookup(keyspace.KeyOf(k)); ok {
			out[r.Owner]++
		}
	}
	return out
}

// startOwner starts a KV server process and returns its address.
func (d *demo) startOwner(ctx context.Context, id string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	args := []string{"demo-owner", "--manager", d.addr, "--id", id}
	if d.certsDir != "" {
		args = append(args, "--certs-dir", d.certsDir)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	d.owners[id] = cmd
	line, err := bufio.NewReader(out).ReadString('\n')
	if addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ready "); ok {
		return addr, nil
	}
	return "", fmt.Errorf("demo: %s did not start: %q %v", id, line, err)
}

func (d *demo) crash(id string) {
	if cmd := d.owners[id]; cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		delete(d.owners, id)
	}
}

func (d *demo) stopOwners() {
	for id, cmd := range d.owners {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		delete(d.owners, id)
	}
}

// waitAssigned waits until n members hold the whole key space.
func (d *demo) waitAssigned(ctx context.Context, n int) error {
	deadline := time.Now().Add(20 * d.timing.ManagerLease)
	for time.Now().Before(deadline) {
		if ns := d.defaultNamespace(); ns != nil && ns.FreeSegments == 0 {
			holders := 0
			for _, o := range ns.Owners {
				if o.Member && o.Ranges > 0 {
					holders++
				}
			}
			if holders == n && len(d.members(ns)) == n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("demo: the key space was not assigned to %d owners in time", n)
}

func (d *demo) defaultNamespace() *manager.NamespaceSnapshot {
	for _, ns := range d.srv.Snapshot().Namespaces {
		if ns.Name == protocol.DefaultNamespace {
			return &ns
		}
	}
	return nil
}

func (d *demo) members(ns *manager.NamespaceSnapshot) []string {
	var out []string
	for _, o := range ns.Owners {
		if o.Member {
			out = append(out, o.ID)
		}
	}
	return out
}

func (d *demo) showOwners() {
	ns := d.defaultNamespace()
	for _, o := range ns.Owners {
		if o.Ranges > 0 {
			d.say("     %-5s %3d ranges  %5.1f%% of the key space", o.ID, o.Ranges, 100*o.Share)
		}
	}
}

// makeDemoCerts makes the demo's CA and certificates in dir (replica 1, a
// lookup, an operator and the owners, of namespace default), and returns
// the Manager's.
func makeDemoCerts(dir string, owners []string) (*certs.Source, error) {
	ca, err := certs.CreateCA(dir, "", time.Hour, false)
	if err != nil {
		return nil, err
	}
	local := []string{"127.0.0.1", "localhost"}
	ids := []certs.Identity{
		{Role: certs.Replica, Name: "1"},
		{Role: certs.Lookup, Name: "demo-frontend"},
		{Role: certs.Operator, Name: "demo"},
	}
	for _, id := range owners {
		ids = append(ids, certs.Identity{Role: certs.Owner, Name: id, Namespaces: []string{protocol.DefaultNamespace}})
	}
	for _, id := range ids {
		if _, err := certs.Create(dir, ca, id, local, time.Hour); err != nil {
			return nil, err
		}
	}
	return certs.Open(dir, certs.Replica, "1")
}

// startDashboard serves the demo Manager's dashboard on d.dashboard.
func (d *demo) startDashboard(ctx context.Context) (wait func() error, err error) {
	url, wait, err := cli.StartDashboard(ctx, d.addr, d.certsDir, d.dashboard)
	if err != nil {
		return nil, err
	}
	d.say("")
	d.say("   The dashboard is live at %s: open it to watch what follows.", url)
	return wait, nil
}
