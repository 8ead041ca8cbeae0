package mail

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/internal/lifecycle"
)

// Run is the mail command, which its main runs with os.Args[1:]. It is
// here rather than in package main so that its usage test shares this
// package's test binary (a test binary of its own was a link of the whole
// service). It serves and returns the exit code: 0, 1 after the Manager refused it
// or a second signal cut its drain short, or 2 after a usage error or a
// failure to start.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var manager, namespace string
	lifecycle.ManagerFlags(fs, &manager, &namespace)
	id := fs.String("id", "", "this node's ID, also its Owner ID (required)")
	listen := fs.String("listen", "", "the HTTP listen address, host:port (required)")
	dir := fs.String("data-dir", "", "the directory of this node's mailbox fragments (required)")
	nodesFlag := fs.String("nodes", "", "every node, ID=ADDR, comma-separated, this one included (required)")
	var certsDir string
	var insecure bool
	trust := certs.AddFlags(fs, &certsDir, &insecure, "mutual TLS to the Manager, and HTTPS for clients with certificates of the same CA")
	if err := fs.Parse(args); err != nil {
		return lifecycle.ParseExit(err)
	}
	if *id == "" || *listen == "" || *dir == "" || *nodesFlag == "" || fs.NArg() != 0 {
		fmt.Fprint(stderr, "mail: --id, --listen, --data-dir and --nodes are required, and there are no arguments\n")
		return 2
	}
	if !trust.Chosen() {
		fmt.Fprint(stderr, "mail: --certs-dir (or $LEASEHOLD_CERTS_DIR) is required, or --insecure for plaintext\n")
		return 2
	}
	nodes := map[string]string{}
	for _, kv := range strings.Split(*nodesFlag, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" || nodes[k] != "" {
			fmt.Fprintf(stderr, "mail: --nodes: %q is not ID=ADDR, or names a node twice\n", kv)
			return 2
		}
		nodes[k] = v
	}
	srv, err := NewServer(ctx, ServerConfig{Manager: manager, Namespace: namespace, ID: *id,
		Listen: *listen, DataDir: *dir, Nodes: nodes, CertsDir: certsDir, Insecure: insecure,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintf(stderr, "mail: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "mail serving on %s as %s\n", srv.Addr(), *id)
	// SIGINT or SIGTERM leaves, for at most 10 s; a second signal, or the
	// Manager refusing this node, stops it at once.
	if _, err := lifecycle.Wait(ctx, srv, lifecycle.Options{DrainTimeout: 10 * time.Second,
		DialTimeout: 5 * time.Second, Stderr: stderr, Name: "mail"}); err != nil {
		fmt.Fprintf(stderr, "mail: %v\n", err)
		return 1
	}
	held := len(srv.Rebuilds())
	fmt.Fprintf(stdout, "mail stopped; it held the mail maps of %d ranges\n", held)
	return 0
}
