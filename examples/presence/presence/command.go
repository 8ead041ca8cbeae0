package presence

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/internal/lifecycle"
)

// Run is the presence command, which its main runs with os.Args[1:]. It is
// here rather than in package main so that its usage test shares this
// package's test binary (a test binary of its own was a link of the whole
// service). It serves and returns the exit code: 0, 1 after the Manager refused it
// or a second signal cut its drain short, or 2 after a usage error or a
// failure to start.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("presence", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var manager, namespace string
	lifecycle.ManagerFlags(fs, &manager, &namespace)
	id := fs.String("id", "", "the Owner ID (default: the listen address)")
	listen := fs.String("listen", "", "the HTTP listen address, host:port (required)")
	advertise := fs.String("advertise", "", "the address clients reach this server at (default: the listen address)")
	ttl := fs.Duration("ttl", DefaultTTL, "a device is online this long after its last heartbeat")
	var certsDir string
	var insecure bool
	trust := certs.AddFlags(fs, &certsDir, &insecure, "mutual TLS to the Manager, and HTTPS for clients with certificates of the same CA")
	if err := fs.Parse(args); err != nil {
		return lifecycle.ParseExit(err)
	}
	if *listen == "" || *ttl <= 0 || fs.NArg() != 0 {
		fmt.Fprint(stderr, "presence: --listen is required, --ttl must be positive, and there are no arguments\n")
		return 2
	}
	if !trust.Chosen() {
		fmt.Fprint(stderr, "presence: --certs-dir (or $LEASEHOLD_CERTS_DIR) is required, or --insecure for plaintext\n")
		return 2
	}
	srv, err := NewServer(ctx, ServerConfig{Manager: manager, Namespace: namespace, ID: *id,
		Listen: *listen, Advertise: *advertise, TTL: *ttl, CertsDir: certsDir, Insecure: insecure,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintf(stderr, "presence: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "presence serving on %s as %s\n", srv.Addr(), srv.ID())
	// SIGINT or SIGTERM hands the ranges back, for at most 10 s; a second
	// signal, or the Manager refusing this server, stops it at once.
	if _, err := lifecycle.Wait(ctx, srv, lifecycle.Options{DrainTimeout: 10 * time.Second,
		DialTimeout: 5 * time.Second, Stderr: stderr, Name: "presence"}); err != nil {
		fmt.Fprintf(stderr, "presence: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "presence stopped")
	return 0
}
