package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/agent"
	"github.com/leasehold/leasehold/owner"
)

func init() { register(newAgentCommand) }

// agentOptions are leasehold agent's flags.
type agentOptions struct {
	trustOptions
	logOptions
	manager, namespace, id, addr string
	socket, listen, tokenFile    string
	timings                      string
	capacity                     float64
	appTimeout, drainTimeout     time.Duration
}

func newAgentCommand(e *env) *cobra.Command {
	o := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent --id ID --addr ADDR [flags]",
		Short: "Hold leases for an application in any language beside it (docs/agent.md)",
		Long: `Run beside one application, on the same host, and be its Owner: the agent
joins the Manager under --id with the Owner certificate of that ID, and serves
the application the local API of proto/leasehold/v1/agent.proto on a Unix
socket (0600, in a directory only this user may write), as gRPC and as an
HTTP/JSON mirror. The application opens a session, is sent its held ranges
with a deadline on the host's CLOCK_MONOTONIC each, and serves a key only
while its own monotonic clock is before the key's deadline.

When the application's session ends (it died, or stopped answering for
--app-timeout), the agent stops renewing at once: its ranges lapse at the
Manager and are reported lost. A new session is a new start. On SIGINT or
SIGTERM the agent drains first: the application hands every range over.

--listen 127.0.0.1:PORT serves loopback TCP instead, for an application that
cannot reach a Unix socket; it needs a token, written to --token-file (0600),
that the application sends as "Authorization: Bearer TOKEN".

Output: leasehold agent listening on SOCKET (owner ID)`,
		Example: `  leasehold agent --id kv-1 --addr 10.0.0.7:8080 --certs-dir /etc/leasehold/certs
  leasehold agent --id kv-1 --addr 127.0.0.1:8001 --insecure --timings fast --socket /tmp/kv-1/agent.sock`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error { return o.run(ctx, e) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.manager, "manager", e.defaultManager(), "the Manager's address `host:port`, or its replicas' addresses, comma-separated ($"+ManagerEnv+" sets the default)")
	f.StringVar(&o.namespace, "namespace", "", `the namespace to join (empty: "default")`)
	f.StringVar(&o.id, "id", "", "the application's Owner `ID`: unique, stable across restarts (required)")
	f.StringVar(&o.addr, "addr", "", "the `address` frontends reach the application at (required)")
	f.StringVar(&o.socket, "socket", "", "the Unix socket to serve the application on (default $XDG_RUNTIME_DIR/leasehold/agent-ID.sock, or /tmp/leasehold-UID/agent-ID.sock)")
	f.StringVar(&o.listen, "listen", "", "serve on this loopback TCP `address` instead of a Unix socket (needs --token-file)")
	f.StringVar(&o.tokenFile, "token-file", "", "with --listen: write a fresh token to this `file` (0600); the application sends it")
	f.Var(newChoice(&o.timings, "production", "production", "fast"), "timings", "the timing profile used until the Manager's timings arrive, and for the defaults below")
	f.Float64Var(&o.capacity, "capacity", 0, "this application's capacity weight, at most 100 (default 1)")
	f.DurationVar(&o.appTimeout, "app-timeout", 0, "end the session of an application silent this long (default: half the owner lease)")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 0, "how long a drain may take (default: three owner leases)")
	o.addTrustFlags(f, e)
	o.addLogFlags(f, "info")
	return cmd
}

func (o *agentOptions) run(ctx context.Context, e *env) error {
	if o.id == "" || o.addr == "" {
		return usagef("agent: --id and --addr are required")
	}
	if o.listen != "" && o.tokenFile == "" {
		return usagef("agent: --listen needs --token-file: any local user can reach a TCP port, so the application proves itself with the token")
	}
	if o.listen != "" && o.socket != "" {
		return usagef("agent: give --socket or --listen, not both")
	}
	log := o.logger(e.stderr)
	o.resolve()
	oc := owner.Config{ID: o.id, Addr: o.addr, Capacity: o.capacity, Connection: leasehold.Connection{
		Manager: o.manager, Namespace: o.namespace, Timing: profiles[o.timings](), Logger: log,
		Insecure: o.insecure, CertsDir: o.certsDir}}
	if !o.insecure && o.certsDir == "" {
		return usagef("agent: no certificates: pass --certs-dir DIR (with owner.%s.crt) or --insecure to speak plaintext", o.id)
	}
	a, err := agent.New(agent.Config{Owner: oc, AppTimeout: o.appTimeout, DrainTimeout: o.drainTimeout, Logger: log})
	if err != nil {
		return usagef("%v", err)
	}
	var lis net.Listener
	var token, where string
	if o.listen != "" {
		if lis, err = agent.ListenLoopback(o.listen); err != nil {
			return err
		}
		if token, err = agent.NewToken(o.tokenFile); err != nil {
			return err
		}
		where = lis.Addr().String()
	} else {
		where = o.socket
		if where == "" {
			where = defaultSocket(o.id)
		}
		if lis, err = agent.ListenUnix(where); err != nil {
			return err
		}
		defer os.Remove(where)
	}
	fmt.Fprintf(e.stdout, "leasehold agent listening on %s (owner %s)\n", where, o.id)
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- a.Serve(sctx, lis, token) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		// SIGINT or SIGTERM: the application hands its ranges over first.
		dctx, cancel := context.WithTimeout(context.Background(), a.DrainTimeout())
		a.Shutdown(dctx)
		cancel()
	}
	stop()
	if err == nil {
		err = <-served
	}
	return err
}

// defaultSocket is the socket path when --socket is not given.
func defaultSocket(id string) string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "leasehold", "agent-"+id+".sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("leasehold-%d", os.Getuid()), "agent-"+id+".sock")
}
