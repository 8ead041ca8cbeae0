package pubsub

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

// Run is the pubsub command, which its main runs with os.Args[1:]. It is
// here rather than in package main so that its usage test shares this
// package's test binary (a test binary of its own was a link of the whole
// service). It serves and returns the exit code: 0, 1 after the Manager refused it
// or a second signal cut its drain short, or 2 after a usage error or a
// failure to start.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pubsub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := ServerConfig{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	lifecycle.ManagerFlags(fs, &cfg.Manager, &cfg.Namespace)
	fs.StringVar(&cfg.ID, "id", "", "the Owner ID (default: its owner certificate's, else the listen address)")
	fs.StringVar(&cfg.Listen, "listen", "", "the HTTP listen address, host:port (required)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "the address clients reach this server at (default: the listen address)")
	drain := fs.Duration("drain-timeout", time.Minute, "on SIGINT or SIGTERM, how long to hand ranges over")
	trust := certs.AddFlags(fs, &cfg.CertsDir, &cfg.Insecure, "mutual TLS to the Manager, HTTPS to clients with certificates of the same CA and between the servers")
	if err := fs.Parse(args); err != nil {
		return lifecycle.ParseExit(err)
	}
	if chosen := trust.Chosen(); cfg.Listen == "" || *drain <= 0 || fs.NArg() != 0 || !chosen {
		fmt.Fprint(stderr, "pubsub: --listen and --certs-dir ($LEASEHOLD_CERTS_DIR) or --insecure are required, --drain-timeout must be positive, and there are no arguments\n")
		return 2
	}
	srv, err := NewServer(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "pubsub: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "pubsub serving on %s as %s\n", srv.Addr(), srv.ID())
	// A second signal, or the Manager refusing this server, stops it at
	// once.
	if _, err := lifecycle.Wait(ctx, srv, lifecycle.Options{DrainTimeout: *drain,
		DialTimeout: 5 * time.Second, Stderr: stderr, Name: "pubsub"}); err != nil {
		fmt.Fprintf(stderr, "pubsub: %v\n", err)
		return 1
	}
	return 0
}
