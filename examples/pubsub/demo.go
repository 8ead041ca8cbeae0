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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := startManager(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "1. A Manager listens on %s (fast timings); three pubsub servers start as processes:\n", addr)
	servers := map[string]*exec.Cmd{}
	defer func() { // kill what is left (ctx), and wait
		cancel()
		for _, cmd := range servers {
			if cmd != nil {
				cmd.Wait()
			}
		}
	}()
	for _, id := range []string{"ps-1", "ps-2", "ps-3"} {
		if servers[id], err = spawn(ctx, out, "--manager", addr, "--listen", "127.0.0.1:0", "--id", id); err != nil {
			return err
		}
	}
	c, err := pubsub.NewClient(ctx, pubsub.ClientConfig{Manager: addr, Timing: protocol.Fast()})
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
