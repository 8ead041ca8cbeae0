// Command pubsub is PRS's publish-subscribe service (P§3) as a program:
// topics are keys, each topic's subscriptions live in the memory of the
// Owner of its key, and subscribers receive messages over server-sent
// events. See package github.com/leasehold/leasehold/examples/pubsub/pubsub.
//
//	pubsub serve --manager ADDR --listen ADDR [--namespace NS] [--id ID] [--advertise ADDR] [--drain-timeout D]
//	pubsub pub   --manager ADDR [--namespace NS] [--timeout D] TOPIC MESSAGE
//	pubsub sub   --manager ADDR [--namespace NS] [--id SUBID] [--count N] [--timeout D] TOPIC
//
// serve runs a server until SIGINT or SIGTERM, then drains: every range
// moves to the other servers with its subscriptions. pub publishes one
// message and prints how many subscriptions it reached. sub prints each
// message received as a line ("subscribed" and "lost" lines tell of
// resubscriptions), until --count messages or --timeout (0: until
// interrupted). Usage errors and failures exit 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
)

const usage = `usage:
  pubsub serve --manager ADDR --listen ADDR [--namespace NS] [--id ID] [--advertise ADDR] [--drain-timeout 1m]
  pubsub pub   --manager ADDR [--namespace NS] [--timeout 10s] TOPIC MESSAGE
  pubsub sub   --manager ADDR [--namespace NS] [--id SUBID] [--count N] [--timeout 0] TOPIC
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("pubsub "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("LEASEHOLD_MANAGER")
	if def == "" {
		def = "127.0.0.1:7400"
	}
	manager := fs.String("manager", def, "the Manager's address, host:port, or its replicas' addresses, comma-separated ($LEASEHOLD_MANAGER sets the default)")
	namespace := fs.String("namespace", "", `the namespace (empty: "default")`)
	var want int
	var f func() int
	switch cmd {
	case "serve":
		listen := fs.String("listen", "", "the HTTP listen address, host:port (required)")
		id := fs.String("id", "", "the Owner ID (default: the listen address)")
		advertise := fs.String("advertise", "", "the address clients reach this server at (default: the listen address)")
		drain := fs.Duration("drain-timeout", time.Minute, "on SIGINT or SIGTERM, how long to hand ranges over")
		f = func() int { return serve(ctx, *manager, *namespace, *listen, *id, *advertise, *drain, stdout, stderr) }
	case "pub":
		timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
		want = 2
		f = func() int { return pub(ctx, *manager, *namespace, *timeout, fs.Arg(0), fs.Arg(1), stdout, stderr) }
	case "sub":
		id := fs.String("id", "", "the subscription's ID (default: a random one)")
		count := fs.Int("count", 0, "exit after this many messages (0: never)")
		timeout := fs.Duration("timeout", 0, "exit after this long (0: never)")
		want = 1
		f = func() int { return sub(ctx, *manager, *namespace, *id, *count, *timeout, fs.Arg(0), stdout, stderr) }
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "pubsub: unknown command %q\n%s", cmd, usage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != want {
		fmt.Fprintf(stderr, "pubsub %s: want %d arguments, got %d\n%s", cmd, want, fs.NArg(), usage)
		return 2
	}
	return f()
}

func serve(ctx context.Context, manager, namespace, listen, id, advertise string, drain time.Duration, stdout, stderr io.Writer) int {
	if listen == "" || drain <= 0 {
		fmt.Fprint(stderr, "pubsub serve: --listen is required, and --drain-timeout must be positive\n")
		return 2
	}
	srv, err := pubsub.NewServer(ctx, pubsub.ServerConfig{Manager: manager, Namespace: namespace, ID: id,
		Listen: listen, Advertise: advertise,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintf(stderr, "pubsub serve: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "pubsub serving on %s as %s\n", srv.Addr(), srv.ID())
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err = srv.Close(cctx)
	st := srv.Stats()
	fmt.Fprintf(stdout, "pubsub stopped: %d ranges handed over with %d subscriptions, %d without\n",
		st.HandedOver, st.SubsHandedOver, st.HandoverFailures)
	if err != nil {
		fmt.Fprintf(stderr, "pubsub serve: %v\n", err)
		return 2
	}
	return 0
}

func pub(ctx context.Context, manager, namespace string, timeout time.Duration, topic, msg string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := pubsub.NewClient(ctx, pubsub.ClientConfig{Manager: manager, Namespace: namespace})
	if err != nil {
		fmt.Fprintf(stderr, "pubsub pub: %v\n", err)
		return 2
	}
	defer c.Close()
	p, err := c.Publish(ctx, topic, msg)
	if err != nil {
		fmt.Fprintf(stderr, "pubsub pub: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "published %s to %d subscriptions (%d streaming)\n", p.ID, p.Subscribers, p.Attached)
	return 0
}

func sub(ctx context.Context, manager, namespace, id string, count int, timeout time.Duration, topic string, stdout, stderr io.Writer) int {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c, err := pubsub.NewClient(ctx, pubsub.ClientConfig{Manager: manager, Namespace: namespace})
	if err != nil {
		fmt.Fprintf(stderr, "pubsub sub: %v\n", err)
		return 2
	}
	defer c.Close()
	if id == "" {
		id = fmt.Sprintf("sub-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	done := make(chan struct{})
	n := 0
	s := c.Subscribe(topic, id, func(e pubsub.Event) {
		switch e.Kind {
		case "subscribed":
			fmt.Fprintf(stdout, "subscribed at %s (new %v)\n", e.Owner, e.New)
		case "loss":
			fmt.Fprintln(stdout, "lost: resubscribing")
		case "message":
			fmt.Fprintln(stdout, e.Message.Data)
			if n++; n == count {
				close(done)
			}
		}
	})
	select {
	case <-ctx.Done():
	case <-done:
	}
	s.Close()
	return 0
}
