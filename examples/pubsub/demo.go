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
	"maps"
	"slices"
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
// servers as child processes, a subscriber on each of six topics. Between
// publishes it kills a server (SIGKILL) and drains another (SIGTERM), and
// checks each time that every subscriber received every message published
// since its subscription was made, once.
func demo(ctx context.Context, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := startManager(ctx)
	if err != nil {
		return err
	}
	say("1. A Manager listens on %s (fast timings); three pubsub servers start as processes:", addr)
	servers := map[string]*exec.Cmd{}
	for _, id := range []string{"ps-1", "ps-2", "ps-3"} {
		if servers[id], err = spawn(ctx, out, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id); err != nil {
			return err
		}
	}
	defer func() { // kill what is left (ctx), and wait
		cancel()
		for _, cmd := range servers {
			cmd.Wait()
		}
	}()
	c, err := pubsub.NewClient(ctx, pubsub.ClientConfig{Manager: addr, Timing: protocol.Fast()})
	if err != nil {
		return err
	}
	defer c.Close()
	var mu sync.Mutex
	topics := []string{"news", "sport", "weather", "markets", "music", "travel"}
	owner, fresh, got, sent := map[string]string{}, map[string]int{}, map[string][]string{}, map[string][]string{}
	for _, topic := range topics {
		defer c.Subscribe(topic, "demo", func(e pubsub.Event) {
			mu.Lock()
			defer mu.Unlock()
			if e.Kind == "subscribed" && e.New { // messages count from here
				fresh[topic], got[topic], sent[topic] = fresh[topic]+1, nil, nil
			}
			if e.Kind == "subscribed" {
				owner[topic] = e.Owner
			} else if e.Kind == "message" {
				got[topic] = append(got[topic], e.Message.Data)
			}
		}).Close()
	}
	owners := func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(owner)
	}
	// await waits up to 15 s for cond to hold on every topic.
	await := func(cond func(topic string) bool) error {
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			ok := !slices.ContainsFunc(topics, func(t string) bool { return !cond(t) })
			mu.Unlock()
			if ok {
				return nil
			}
			if time.Since(start) > 15*time.Second {
				return errors.New("timed out")
			}
		}
	}
	round := func(name string) error {
		for _, topic := range topics {
			if _, err := c.Publish(ctx, topic, topic+" "+name); err != nil {
				return err
			}
			mu.Lock()
			sent[topic] = append(sent[topic], topic+" "+name)
			mu.Unlock()
		}
		return await(func(t string) bool { return slices.Equal(got[t], sent[t]) })
	}
	if err := await(func(t string) bool { return owner[t] != "" }); err != nil {
		return err
	}
	say("2. A subscriber on each of %d topics, held by the Owner of the topic's key: %v", len(topics), owners())
	if err := round("#1"); err != nil {
		return err
	}
	say("   Message #1 published to each topic: every subscriber received it.")

	before := owners()
	say("3. ps-2 is killed (SIGKILL): its subscriptions are gone with its memory.")
	killed := time.Now()
	servers["ps-2"].Process.Kill()
	if err := await(func(t string) bool { return before[t] != "ps-2" || fresh[t] == 2 }); err != nil {
		return err
	}
	say("   The loss notification made their subscribers resubscribe afresh within %s: %v",
		time.Since(killed).Round(100*time.Millisecond), owners())
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
	mu.Lock()
	defer mu.Unlock()
	for _, t := range topics {
		want := 1 // at the start
		if before[t] == "ps-2" {
			want = 2 // and after the kill
		}
		if fresh[t] != want {
			return fmt.Errorf("%s: subscribed afresh %d times, want %d", t, fresh[t], want)
		}
	}
	say("   Every subscriber received message #3, and none was made afresh: %v", owner)
	say("Done.")
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

// spawn starts this program with args as one of the tour's servers, kills
// it when ctx ends, and copies the first line it prints to out.
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
