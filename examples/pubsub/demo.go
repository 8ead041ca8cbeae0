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

	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/manager/config"
	"github.com/leasehold/leasehold/protocol"
)

// demoChild is set in the environment of the servers the tour starts.
const demoChild = "PUBSUB_DEMO_SERVER"

// demo is the tour: a Manager in this process (fast timings), three
// servers as child processes, one subscriber on each of six topics. It
// publishes, kills a server with SIGKILL (its subscriptions are made afresh
// at the new Owners after the loss notification), drains another with
// SIGTERM (its subscriptions move, unnoticed), and checks after each step
// that every subscriber received every message published since it was
// subscribed, once.
func demo(ctx context.Context, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tm := protocol.Fast()
	mgr, err := manager.NewServer(manager.ServerConfig{Replica: config.Replica{Timing: tm}})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- mgr.Serve(ctx, lis) }()
	defer func() { cancel(); <-served }()
	addr := lis.Addr().String()
	say("1. A Manager listens on %s (fast timings: %s owner leases); three pubsub servers start:", addr, tm.OwnerLease)
	servers := map[string]*exec.Cmd{}
	for _, id := range []string{"ps-1", "ps-2", "ps-3"} {
		cmd, line, err := spawn(ctx, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id)
		if err != nil {
			return err
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		servers[id] = cmd
		say("   %s", line)
	}

	c, err := pubsub.NewClient(ctx, pubsub.ClientConfig{Manager: addr, Timing: tm})
	if err != nil {
		return err
	}
	defer c.Close()
	type log struct {
		mu    sync.Mutex
		owner string   // of the last stream opened
		fresh int      // streams opened on a subscription made afresh
		got   []string // messages received since the last made afresh
	}
	topics := []string{"news", "sport", "weather", "markets", "music", "travel"}
	logs := map[string]*log{}
	for _, topic := range topics {
		l := &log{}
		logs[topic] = l
		defer c.Subscribe(topic, "demo", func(e pubsub.Event) {
			l.mu.Lock()
			defer l.mu.Unlock()
			switch {
			case e.Kind == "subscribed" && e.New:
				l.fresh, l.got = l.fresh+1, nil
				fallthrough
			case e.Kind == "subscribed":
				l.owner = e.Owner
			case e.Kind == "message":
				l.got = append(l.got, e.Message.Data)
			}
		}).Close()
	}
	// await polls cond on every topic's log for up to 15 s.
	await := func(what string, cond func(topic string, l *log) bool) error {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ok := true
			for _, topic := range topics {
				l := logs[topic]
				l.mu.Lock()
				ok = ok && cond(topic, l)
				l.mu.Unlock()
			}
			if ok {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("timed out waiting for " + what)
			}
		}
	}
	sent := map[string][]string{} // per topic, since its subscription was last made afresh
	round := func(name string) error {
		for _, topic := range topics {
			msg := topic + " " + name
			if _, err := c.Publish(ctx, topic, msg); err != nil {
				return err
			}
			sent[topic] = append(sent[topic], msg)
		}
		return await("every message", func(t string, l *log) bool { return slices.Equal(l.got, sent[t]) })
	}
	if err := await("the subscriptions", func(_ string, l *log) bool { return l.owner != "" }); err != nil {
		return err
	}
	say("2. A subscriber on each of %d topics; each topic's subscriptions live at its key's Owner:", len(topics))
	owners := map[string]string{}
	for _, topic := range topics {
		owners[topic] = logs[topic].owner
		say("   %-8s at %s", topic, owners[topic])
	}
	if err := round("#1"); err != nil {
		return err
	}
	say("   One message published to each topic: every subscriber received it.")

	say("3. ps-2 is killed (SIGKILL): its subscriptions are gone with its memory.")
	killed := time.Now()
	servers["ps-2"].Process.Kill()
	if err := await("resubscription", func(t string, l *log) bool { return owners[t] != "ps-2" || l.fresh == 2 }); err != nil {
		return err
	}
	say("   The loss notification made their subscribers resubscribe at the new Owners within %s.",
		time.Since(killed).Round(100*time.Millisecond))
	for _, topic := range topics {
		if owners[topic] == "ps-2" {
			sent[topic] = nil
			say("   %-8s now at %s (subscribed afresh)", topic, logs[topic].owner)
		}
	}
	if err := round("#2"); err != nil {
		return err
	}
	say("   Every subscriber received message #2.")

	say("4. ps-3 is drained (SIGTERM): its ranges move with their subscriptions.")
	servers["ps-3"].Process.Signal(syscall.SIGTERM)
	if err := servers["ps-3"].Wait(); err != nil {
		return fmt.Errorf("ps-3: %w", err)
	}
	if err := round("#3"); err != nil {
		return err
	}
	err = await("nothing more", func(t string, l *log) bool {
		want := 1 // made at the start
		if owners[t] == "ps-2" {
			want = 2 // and again after the kill
		}
		if l.fresh != want {
			err = fmt.Errorf("%s: subscribed afresh %d times, want %d", t, l.fresh, want)
		}
		return true
	})
	if err != nil {
		return err
	}
	say("   Every subscriber received message #3, each message once, and none was made afresh.")
	say("Done.")
	return nil
}

// spawn starts this program with args as a tour's server, and returns it
// with the first line it printed ("pubsub serving on ADDR as ID").
func spawn(ctx context.Context, args ...string) (*exec.Cmd, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, "", err
	}
	defer w.Close()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), demoChild+"=1"), w, os.Stderr
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, "", err
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	go func() { io.Copy(io.Discard, r); r.Close() }()
	if !strings.Contains(line, " serving on ") {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, "", fmt.Errorf("%s did not start: %q %v", strings.Join(args, " "), line, err)
	}
	return cmd, strings.TrimSpace(line), nil
}
