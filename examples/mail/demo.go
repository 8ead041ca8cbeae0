package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/examples/mail/mail"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/manager/config"
	"github.com/leasehold/leasehold/protocol"
)

// demoChild is set in the environment of the nodes the tour starts.
const demoChild = "MAIL_DEMO_NODE"

// demo is the tour: a Manager in this process (fast timings), three mail
// nodes as child processes, each with a data directory. It delivers mail
// to six users, kills a node (SIGKILL) — its users' mail maps are rebuilt
// from the disks by their new Owners, and its fragments wait on its disk —
// restarts it from its directory, and checks every delivered message reads
// back, once.
func demo(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := startManager(ctx)
	if err != nil {
		return err
	}
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
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings); three mail nodes start as processes, each with its disk:\n", addr)
	procs := map[string]*exec.Cmd{}
	defer func() { // kill what is left (ctx), and wait
		cancel()
		for _, cmd := range procs {
			if cmd != nil {
				cmd.Wait()
			}
		}
	}()
	start := func(i int) (err error) {
		_, listen, _ := strings.Cut(nodes[i], "=")
		procs[ids[i]], err = spawn(ctx, out, "--manager", addr, "--id", ids[i], "--listen", listen,
			"--data-dir", filepath.Join(dir, ids[i]), "--nodes", strings.Join(nodes, ","))
		return err
	}
	for i := range ids {
		if err := start(i); err != nil {
			return err
		}
	}
	c, err := mail.NewClient(ctx, mail.ClientConfig{Manager: addr, Timing: protocol.Fast()})
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

// startManager serves a Manager with fast timings on 127.0.0.1 until ctx
// ends, and returns its address.
func startManager(ctx context.Context) (string, error) {
	mgr, err := manager.NewServer(manager.ServerConfig{Replica: config.Replica{Timing: protocol.Fast()}})
	if err != nil {
		return "", err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go mgr.Serve(ctx, lis)
	return lis.Addr().String(), nil
}

// spawn starts this program with args as one of the tour's nodes (killed
// when ctx ends), and copies the first line it prints to out.
func spawn(ctx context.Context, out io.Writer, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env, cmd.Stderr = append(os.Environ(), demoChild+"=1"), os.Stderr
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
