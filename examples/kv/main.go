// Command kv is the soft-state hashtable of PRS Figure 4 (P§2.2) as a
// program: an in-memory key-value store partitioned by a leasehold Manager.
// See package github.com/leasehold/leasehold/examples/kv/kv.
//
//	kv serve --manager ADDR --listen ADDR [--namespace NS] [--id ID] [--advertise ADDR]
//	         [--capacity W] [--drain-timeout D]
//	kv put   --manager ADDR [--namespace NS] [--timeout D] KEY VALUE
//	kv get   --manager ADDR [--namespace NS] [--timeout D] KEY
//
// --manager ADDR is host:port, or for a replicated Manager its replicas'
// addresses, comma-separated: the Owner and the Lookup follow the leader.
//
// serve runs a server until SIGINT or SIGTERM, then leaves gracefully: it
// drains, handing every range over to the other servers with its values
// (for at most --drain-timeout; a second signal cuts it short), and exits.
// put and get retry while ownership moves, for at most --timeout. put exits
// 0 on success; get prints the value and exits 0, or prints "not found" and
// exits 1. Other errors exit 2.
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

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/kv/kv"
)

// Exit codes.
const (
	exitOK       = 0
	exitNotFound = 1
	exitError    = 2
)

const usage = `usage:
  kv serve --manager ADDR --listen ADDR [--namespace NS] [--id ID] [--advertise ADDR]
           [--capacity 1] [--drain-timeout 1m]
  kv put   --manager ADDR [--namespace NS] [--timeout 10s] KEY VALUE
  kv get   --manager ADDR [--namespace NS] [--timeout 10s] KEY
--manager ADDR is host:port, or a replicated Manager's replicas, comma-separated.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "put", "get":
		return putGet(ctx, cmd, args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "kv: unknown command %q\n%s", cmd, usage)
		return exitError
	}
}

func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *string, *string) {
	fs := flag.NewFlagSet("kv "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("LEASEHOLD_MANAGER")
	if def == "" {
		def = "127.0.0.1:7400"
	}
	manager := fs.String("manager", def, "the Manager's address, host:port, or a comma-separated list of its replicas' addresses, whose leader is followed ($LEASEHOLD_MANAGER sets the default)")
	namespace := fs.String("namespace", "", `the namespace (empty: "default")`)
	return fs, manager, namespace
}

// trustFlags adds --certs-dir and --insecure, as the leasehold command has
// them, with the same environment variables.
func trustFlags(fs *flag.FlagSet) (certsDir *string, insecure *bool, trust *certs.Flags) {
	certsDir, insecure = new(string), new(bool)
	return certsDir, insecure, certs.AddFlags(fs, certsDir, insecure, "mutual TLS to the Manager and between servers and clients")
}

// parseError is the exit code for a flag parsing error, already reported by
// the FlagSet: -h asked for the usage, anything else is an error.
func parseError(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitError
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, manager, namespace := newFlags("serve", stderr)
	listen := fs.String("listen", "", "the HTTP listen address, host:port (required)")
	id := fs.String("id", "", "the Owner ID, the same across restarts (default: the listen address, which must then name a host; in Kubernetes, the pod's name)")
	advertise := fs.String("advertise", "", "the address clients reach this server at (default: the listen address, which must then name a host; in Kubernetes, the pod's IP and port)")
	capacity := fs.Float64("capacity", 0, "this server's capacity weight, at most 100: one of 2 gets twice the load of one of 1 (default 1)")
	drainTimeout := fs.Duration("drain-timeout", time.Minute, "on SIGINT or SIGTERM, how long to wait for every range to move away with its values")
	certsDir, insecure, trust := trustFlags(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if *listen == "" || fs.NArg() != 0 {
		fmt.Fprint(stderr, "kv serve: --listen is required and takes no arguments\n")
		return exitError
	}
	if *drainTimeout <= 0 {
		fmt.Fprintf(stderr, "kv serve: --drain-timeout %s must be positive\n", *drainTimeout)
		return exitError
	}
	trust.Chosen() // neither chosen: NewServer says which is required
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := kv.NewServer(ctx, kv.ServerConfig{
		Manager: *manager, Namespace: *namespace, ID: *id,
		Listen: *listen, Advertise: *advertise, Capacity: *capacity, Logger: logger,
		CertsDir: *certsDir, Insecure: *insecure,
	})
	if err != nil {
		fmt.Fprintf(stderr, "kv serve: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "kv serving on %s as %s\n", srv.Addr(), srv.ID())
	<-ctx.Done()
	// Drain: every range moves to the other servers with its values. A
	// second signal gives up waiting; the ranges left move without them.
	closeCtx, cancel := context.WithTimeout(context.Background(), *drainTimeout)
	defer cancel()
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			cancel()
		case <-closeCtx.Done():
		}
	}()
	started := time.Now()
	err = srv.Close(closeCtx)
	st := srv.Stats()
	fmt.Fprintf(stdout, "kv stopped after %s: %s handed over with %s, %d without\n",
		time.Since(started).Round(time.Millisecond), plural(st.HandedOver, "range"), plural(st.ValuesSent, "value"), st.HandoverFailures)
	if err != nil {
		fmt.Fprintf(stderr, "kv serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// plural is n and noun, plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func putGet(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	fs, manager, namespace := newFlags(cmd, stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	certsDir, insecure, trust := trustFlags(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	want := map[string]int{"put": 2, "get": 1}[cmd]
	if fs.NArg() != want {
		fmt.Fprintf(stderr, "kv %s: want %d arguments, got %d\n%s", cmd, want, fs.NArg(), usage)
		return exitError
	}
	trust.Chosen() // neither chosen: NewClient says which is required
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := kv.NewClient(ctx, kv.ClientConfig{Manager: *manager, Namespace: *namespace,
		CertsDir: *certsDir, Insecure: *insecure})
	if err != nil {
		fmt.Fprintf(stderr, "kv %s: %v\n", cmd, err)
		return exitError
	}
	defer c.Close()
	key := fs.Arg(0)
	if cmd == "put" {
		err = c.Put(ctx, key, []byte(fs.Arg(1)))
	} else {
		var value []byte
		if value, err = c.Get(ctx, key); err == nil {
			fmt.Fprintf(stdout, "%s\n", value)
		}
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, kv.ErrNotFound):
		fmt.Fprintln(stderr, "not found")
		return exitNotFound
	default:
		fmt.Fprintln(stderr, err)
		return exitError
	}
}
