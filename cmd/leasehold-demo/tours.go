package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/examples/mail/mail"
	"github.com/leasehold/leasehold/examples/presence/presence"
	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// The tours of the example services (examples/pubsub, examples/presence,
// examples/mail): leasehold-demo pubsub, presence and mail. Each runs a
// Manager in this process with fast timings and the service's servers as
// processes of this program (the hidden demo-app), kills one with SIGKILL,
// and checks the service's promise; each exits 0 only if it held. Like
// the demo, each speaks mutual TLS, with a throwaway CA and certificates
// in a temporary directory removed when it ends.

// newTourCommands are leasehold-demo's subcommands, one per example service.
func newTourCommands(e *env) []*cobra.Command {
	var cmds []*cobra.Command
	for _, t := range []struct {
		name, short string
		tour        func(context.Context, io.Writer) error
	}{
		{"pubsub", "The pub-sub example's tour: a server killed and one drained, every subscriber still receiving", tourPubSub},
		{"presence", "The presence example's tour: a server killed and one drained, the devices republishing", tourPresence},
		{"mail", "The mail example's tour: a node killed and restarted from its disk, no message lost", tourMail},
		{"agent", "The Python kv example's tour: servers beside leasehold agent, one killed and one drained (tour_agent.go)", tourAgent},
	} {
		cmds = append(cmds, &cobra.Command{Use: t.name, Short: t.short, Args: cobra.NoArgs,
			RunE: run(func(ctx context.Context, _ []string) error { return t.tour(ctx, e.stdout) })})
	}
	return cmds
}

// newDemoAppCommand is the hidden subcommand the tours start their
// servers with, so that killing one is a real SIGKILL of a real process.
func newDemoAppCommand(e *env) *cobra.Command {
	var managerAddr, id, listen, dataDir, nodes, certsDir string
	cmd := &cobra.Command{
		Use:    "demo-app pubsub|presence|mail",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, args []string) error {
			var addr string
			var closer func(context.Context) error
			switch args[0] {
			case "pubsub":
				s, err := pubsub.NewServer(ctx, pubsub.ServerConfig{CertsDir: certsDir, Insecure: certsDir == "", Manager: managerAddr, ID: id, Listen: listen, Timing: protocol.Fast()})
				if err != nil {
					return err
				}
				addr, closer = s.Addr(), s.Close
			case "presence":
				s, err := presence.NewServer(ctx, presence.ServerConfig{CertsDir: certsDir, Insecure: certsDir == "", Manager: managerAddr, ID: id, Listen: listen, Timing: protocol.Fast()})
				if err != nil {
					return err
				}
				addr, closer = s.Addr(), s.Close
			case "mail":
				all := map[string]string{}
				for _, n := range strings.Split(nodes, ",") {
					k, v, _ := strings.Cut(n, "=")
					all[k] = v
				}
				s, err := mail.NewServer(ctx, mail.ServerConfig{CertsDir: certsDir, Insecure: certsDir == "", Manager: managerAddr, ID: id, Listen: listen,
					DataDir: dataDir, Nodes: all, Timing: protocol.Fast()})
				if err != nil {
					return err
				}
				addr, closer = s.Addr(), s.Close
			default:
				return usagef("demo-app: no example %q", args[0])
			}
			fmt.Fprintf(e.stdout, "%s serving on %s as %s\n", args[0], addr, id)
			<-ctx.Done()
			stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return closer(stop)
		}),
	}
	cmd.Flags().StringVar(&managerAddr, "manager", "", "the Manager's address")
	cmd.Flags().StringVar(&id, "id", "", "the server's Owner ID")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "the listen address")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "mail: the node's data directory")
	cmd.Flags().StringVar(&nodes, "nodes", "", "mail: every node, ID=ADDR, comma-separated")
	cmd.Flags().StringVar(&certsDir, "certs-dir", "", "the certificates directory (none: plaintext)")
	return cmd
}

// tourPubSub is the tour of examples/pubsub: a Manager in this process (fast timings), three
// servers as child processes, a subscriber on each of six topics. Between
// publishes it kills a server (SIGKILL) and drains another (SIGTERM), and
// checks each time that every subscriber received every message published
// since its subscription was made, once.
func tourPubSub(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, dir, err := startTourManager(ctx, "ps-1", "ps-2", "ps-3")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) // after the servers are reaped
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings, mutual TLS); three pubsub servers start as processes:\n", addr)
	servers := tourProcs{}
	defer func() { cancel(); servers.wait() }() // kill what is left (ctx), and reap it
	for _, id := range []string{"ps-1", "ps-2", "ps-3"} {
		if servers[id], err = spawnApp(ctx, out, "pubsub", "--certs-dir", dir, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id); err != nil {
			return err
		}
	}
	c, err := pubsub.NewClient(ctx, pubsub.ClientConfig{CertsDir: dir, Manager: addr, Timing: protocol.Fast()})
	if err != nil {
		return err
	}
	defer c.Close()
	var mu sync.Mutex                                         // guards the four maps, per topic:
	owner, fresh := map[string]string{}, map[string]int{}     // of the last stream; streams opened afresh
	got, sent := map[string][]string{}, map[string][]string{} // since the last made afresh
	topics := []string{"markets", "music", "news", "sport", "travel", "weather"}
	for _, topic := range topics {
		c.Subscribe(topic, "demo", func(e pubsub.Event) {
			mu.Lock()
			defer mu.Unlock()
			if e.Kind == "subscribed" && e.New {
				fresh[topic], got[topic], sent[topic] = fresh[topic]+1, nil, nil
			}
			if e.Kind == "subscribed" {
				owner[topic] = e.Owner
			} else if e.Kind == "message" {
				got[topic] = append(got[topic], e.Message.Data)
			}
		})
	}
	// await waits up to 15 s for cond to hold for every topic, and prints
	// the topics' owners then.
	await := func(cond func(topic string) bool) error {
		for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			ok := !slices.ContainsFunc(topics, func(t string) bool { return !cond(t) })
			if ok {
				fmt.Fprintf(out, "   Topics at: %v\n", owner)
			}
			mu.Unlock()
			if ok {
				return nil
			}
		}
		return errors.New("timed out")
	}
	round := func(name string) error {
		for _, topic := range topics {
			mu.Lock()
			sent[topic] = append(sent[topic], name)
			mu.Unlock()
			if _, err := c.Publish(ctx, topic, name); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "   Message %s published to each topic; awaiting every subscriber's copy...\n", name)
		return await(func(t string) bool { return slices.Equal(got[t], sent[t]) })
	}
	fmt.Fprintf(out, "2. A subscriber on each of %d topics, held by the Owner of the topic's key.\n", len(topics))
	if err := await(func(t string) bool { return owner[t] != "" }); err != nil {
		return err
	}
	if err := round("#1"); err != nil {
		return err
	}
	fmt.Fprintln(out, "3. ps-2 is killed (SIGKILL): its subscriptions are gone with its memory; the")
	fmt.Fprintln(out, "   loss notification makes their subscribers resubscribe afresh elsewhere.")
	mu.Lock()
	onDead := slices.DeleteFunc(slices.Clone(topics), func(t string) bool { return owner[t] != "ps-2" })
	mu.Unlock()
	killed := time.Now()
	servers["ps-2"].Process.Kill()
	if err := await(func(t string) bool { return !slices.Contains(onDead, t) || fresh[t] == 2 }); err != nil {
		return err
	}
	fmt.Fprintf(out, "   %v resubscribed within %s.\n", onDead, time.Since(killed).Round(100*time.Millisecond))
	if err := round("#2"); err != nil {
		return err
	}
	fmt.Fprintln(out, "4. ps-3 is drained (SIGTERM): its ranges move with their subscriptions.")
	servers["ps-3"].Process.Signal(syscall.SIGTERM)
	if err := servers["ps-3"].Wait(); err != nil {
		return fmt.Errorf("ps-3: %w", err)
	}
	if err := round("#3"); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, t := range topics {
		want := 1 // at the start
		if slices.Contains(onDead, t) {
			want = 2 // and after the kill
		}
		if fresh[t] != want {
			return fmt.Errorf("%s: subscribed afresh %d times, want %d", t, fresh[t], want)
		}
	}
	fmt.Fprintln(out, "   No subscriber noticed the move: none was made afresh. Done.")
	return nil
}

// tourPresence is the tour of examples/presence: a Manager in this process (fast timings), three
// servers as child processes, two devices for each of six users. It kills
// a server (SIGKILL) and drains another (SIGTERM); each time the devices
// republish their last heartbeats on the loss notification, and every
// answer is checked: never a status older than the last acknowledged.
func tourPresence(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, dir, err := startTourManager(ctx, "pr-1", "pr-2", "pr-3")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) // after the servers are reaped
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings, mutual TLS); three presence servers start as processes:\n", addr)
	servers := tourProcs{}
	defer func() { cancel(); servers.wait() }() // kill what is left (ctx), and reap it
	for _, id := range []string{"pr-1", "pr-2", "pr-3"} {
		if servers[id], err = spawnApp(ctx, out, "presence", "--certs-dir", dir, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id); err != nil {
			return err
		}
	}
	c, err := presence.NewClient(ctx, presence.ClientConfig{CertsDir: dir, Manager: addr, Timing: protocol.Fast()})
	if err != nil {
		return err
	}
	defer c.Close()
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	devices := map[string]*presence.DeviceHandle{}
	acked := map[string]uint64{} // user/device → the last heartbeat acknowledged
	beat := func(status string) error {
		for _, u := range users {
			for _, name := range []string{"phone", "laptop"} {
				if devices[u+"/"+name] == nil {
					devices[u+"/"+name] = c.Device(u, name)
				}
				seq, err := devices[u+"/"+name].Beat(ctx, status)
				if err != nil {
					return err
				}
				acked[u+"/"+name] = seq
			}
		}
		fmt.Fprintf(out, "   Every device sent a heartbeat, %q, acknowledged by its user's Owner.\n", status)
		return nil
	}
	// check queries every user until both devices answer at their last
	// acknowledged heartbeat (a device may be missing for a moment, until
	// it republishes), fails at once on an older one, and returns the
	// users' Owners.
	check := func() (map[string]string, error) {
		owners := map[string]string{}
		for _, u := range users {
			for start := time.Now(); owners[u] == ""; time.Sleep(20 * time.Millisecond) {
				a, err := c.Query(ctx, u)
				if err != nil {
					return nil, err
				}
				for _, d := range a.Devices {
					if d.Seq < acked[u+"/"+d.Device] {
						return nil, fmt.Errorf("%s's %s answered at heartbeat %d, older than %d", u, d.Device, d.Seq, acked[u+"/"+d.Device])
					}
				}
				if len(a.Devices) == 2 {
					owners[u] = a.Owner
				} else if time.Since(start) > 15*time.Second {
					return nil, fmt.Errorf("%s: %d devices online after 15 s, want 2", u, len(a.Devices))
				}
			}
		}
		fmt.Fprintf(out, "   Every query answers both devices at their last heartbeat; users at: %v\n", owners)
		return owners, nil
	}
	fmt.Fprintln(out, "2. Each user's devices heartbeat to the Owner of the user's key; queries go there too.")
	if err := beat("online"); err != nil {
		return err
	}
	owners, err := check()
	if err != nil {
		return err
	}
	dead := owners["alice"]
	fmt.Fprintf(out, "3. %s, alice's Owner, is killed (SIGKILL): its users' statuses are gone with its memory.\n", dead)
	fmt.Fprintln(out, "   The loss notification makes the Client republish their devices' last heartbeats.")
	killed := time.Now()
	servers[dead].Process.Kill()
	if owners, err = check(); err != nil {
		return err
	}
	fmt.Fprintf(out, "   Republished and answered within %s, with no new heartbeat.\n", time.Since(killed).Round(100*time.Millisecond))
	if err := beat("away"); err != nil {
		return err
	}
	drained := owners["alice"]
	fmt.Fprintf(out, "4. %s is drained (SIGTERM): presence hands nothing over; the devices republish again.\n", drained)
	servers[drained].Process.Signal(syscall.SIGTERM)
	if err := servers[drained].Wait(); err != nil {
		return fmt.Errorf("%s: %w", drained, err)
	}
	if _, err := check(); err != nil {
		return err
	}
	fmt.Fprintln(out, "   No answer was ever older than the last acknowledged heartbeat. Done.")
	return nil
}

// tourMail is the tour of examples/mail: a Manager in this process (fast timings), three mail
// nodes as child processes, each with a data directory. It delivers mail
// to six users, kills a node (SIGKILL) — its users' mail maps are rebuilt
// from the disks by their new Owners, and its fragments wait on its disk —
// restarts it from its directory, and checks every delivered message reads
// back, once.
func tourMail(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, certsDir, err := startTourManager(ctx, "mail-1", "mail-2", "mail-3")
	if err != nil {
		return err
	}
	defer os.RemoveAll(certsDir) // after the nodes are reaped
	dir, err := os.MkdirTemp("", "mail-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ids, nodes := []string{"mail-1", "mail-2", "mail-3"}, []string{}
	for _, id := range ids { // an address for each node, for --nodes
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		nodes = append(nodes, id+"="+lis.Addr().String())
		lis.Close()
	}
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings, mutual TLS); three mail nodes start as processes, each with its disk:\n", addr)
	procs := tourProcs{}
	defer func() { cancel(); procs.wait() }() // kill what is left (ctx), and reap it
	start := func(i int) (err error) {
		_, listen, _ := strings.Cut(nodes[i], "=")
		procs[ids[i]], err = spawnApp(ctx, out, "mail", "--certs-dir", certsDir, "--manager", addr, "--id", ids[i], "--listen", listen,
			"--data-dir", filepath.Join(dir, ids[i]), "--nodes", strings.Join(nodes, ","))
		return err
	}
	for i := range ids {
		if err := start(i); err != nil {
			return err
		}
	}
	c, err := mail.NewClient(ctx, mail.ClientConfig{CertsDir: certsDir, Manager: addr, Timing: protocol.Fast()})
	if err != nil {
		return err
	}
	defer c.Close()
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	sent := map[string][]string{} // user → the IDs of the messages delivered
	deliver := func(n int) error {
		for range n {
			for _, u := range users {
				id, err := c.Deliver(ctx, u, "hello "+u)
				if err != nil {
					return err
				}
				sent[u] = append(sent[u], id)
			}
		}
		fragments := []string{}
		for _, id := range ids {
			files, _ := filepath.Glob(filepath.Join(dir, id, "*.mbox"))
			fragments = append(fragments, fmt.Sprintf("%s %d", id, len(files)))
		}
		fmt.Fprintf(out, "   %d messages delivered to each user, each synced on one node's disk (users' fragments: %s).\n",
			len(sent[users[0]]), strings.Join(fragments, ", "))
		return nil
	}
	// readAll reads every user's mailbox until it is complete (for up to
	// 15 s) and checks it holds every message delivered, once.
	readAll := func() error {
		for _, u := range users {
			box, err := c.Read(ctx, u)
			for start := time.Now(); err == nil && len(box.Incomplete) > 0 && time.Since(start) < 15*time.Second; {
				time.Sleep(100 * time.Millisecond)
				box, err = c.Read(ctx, u)
			}
			if err != nil {
				return err
			}
			var got []string
			for _, m := range box.Messages {
				got = append(got, m.ID)
			}
			slices.Sort(got)
			if want := slices.Sorted(slices.Values(sent[u])); !slices.Equal(got, want) || len(box.Incomplete) > 0 {
				return fmt.Errorf("%s reads %d messages (incomplete: %v), want the %d delivered, once each", u, len(got), box.Incomplete, len(want))
			}
		}
		fmt.Fprintf(out, "   Every user's mailbox reads back every message delivered, once.\n")
		return nil
	}
	fmt.Fprintln(out, "2. Each user's Owner holds the user's mail map (which nodes hold a fragment), rebuilt")
	fmt.Fprintln(out, "   from the disks whenever it gains the user's range.")
	if err := deliver(3); err != nil {
		return err
	}
	if err := readAll(); err != nil {
		return err
	}
	fmt.Fprintln(out, "3. mail-2 is killed (SIGKILL). Its users' new Owners rebuild their mail maps from the")
	fmt.Fprintln(out, "   disks; mail is still delivered, to the nodes that answer.")
	procs["mail-2"].Process.Kill()
	procs["mail-2"].Wait()
	if err := deliver(2); err != nil {
		return err
	}
	shown := users[0] // a user with a fragment on mail-2, if any
	for _, u := range users {
		if _, err := os.Stat(filepath.Join(dir, "mail-2", hex.EncodeToString([]byte(u))+".mbox")); err == nil {
			shown = u
			break
		}
	}
	box, err := c.Read(ctx, shown)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   %s's mailbox now: %d of %d messages; incomplete (a node down): %v\n", shown, len(box.Messages), len(sent[shown]), box.Incomplete)
	fmt.Fprintln(out, "4. mail-2 restarts from its directory: its fragments were durable.")
	if err := start(1); err != nil {
		return err
	}
	if err := readAll(); err != nil {
		return err
	}
	fmt.Fprintln(out, "   No message was lost or read twice. Done.")
	return nil
}

// tourProcs are a tour's server processes, by ID.
type tourProcs map[string]*exec.Cmd

// wait reaps every process; the tour's context kills them first.
func (p tourProcs) wait() {
	for _, cmd := range p {
		if cmd != nil {
			cmd.Wait()
		}
	}
}

// startTourManager makes a throwaway CA and certificates for the Manager,
// the Owners named and a frontend in a temporary directory (the caller
// removes it), serves a Manager with fast timings on 127.0.0.1 with them
// until ctx ends, and returns its address and the directory.
func startTourManager(ctx context.Context, owners ...string) (addr, dir string, err error) {
	if dir, err = os.MkdirTemp("", "leasehold-tour-certs-"); err != nil {
		return "", "", err
	}
	src, err := makeDemoCerts(dir, owners)
	if err == nil {
		var mgr *manager.Server
		if mgr, err = manager.NewServer(manager.Config{Certs: src, Timing: protocol.Fast()}); err == nil {
			var lis net.Listener
			if lis, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
				go mgr.Serve(ctx, lis)
				return lis.Addr().String(), dir, nil
			}
		}
	}
	os.RemoveAll(dir)
	return "", "", err
}

// spawnApp starts one of a tour's servers, this program's demo-app kind
// with args (killed when ctx ends), and copies the first line it prints
// to out.
func spawnApp(ctx context.Context, out io.Writer, kind string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, append([]string{"demo-app", kind}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	fmt.Fprintf(out, "   %s", line)
	return cmd, err
}
