package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/examples/presence/presence"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/manager/config"
	"github.com/leasehold/leasehold/protocol"
)

// demoChild is set in the environment of the servers the tour starts.
const demoChild = "PRESENCE_DEMO_SERVER"

// demo is the tour: a Manager in this process (fast timings), three
// servers as child processes, two devices for each of six users. It kills
// a server (SIGKILL) and drains another (SIGTERM); each time the devices
// republish their last heartbeats on the loss notification, and every
// answer is checked: never a status older than the last acknowledged.
func demo(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := startManager(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings); three presence servers start as processes:\n", addr)
	servers := map[string]*exec.Cmd{}
	defer func() { // kill what is left (ctx), and wait
		cancel()
		for _, cmd := range servers {
			if cmd != nil {
				cmd.Wait()
			}
		}
	}()
	for _, id := range []string{"pr-1", "pr-2", "pr-3"} {
		if servers[id], err = spawn(ctx, out, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id); err != nil {
			return err
		}
	}
	c, err := presence.NewClient(ctx, presence.ClientConfig{Manager: addr, Timing: protocol.Fast()})
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

// spawn starts this program with args as one of the tour's servers (killed
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
