package kv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/examples/internal/lifecycle"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // a runtime failure
	exitNotFound = 1 // get: the key has no value
	exitUsage    = 2 // bad flags or arguments
)

const cmdUsage = `usage:
  kv serve --listen ADDR [--manager ADDR] [--namespace NS] [--id ID] [--advertise ADDR]
           [--capacity 1] [--zone Z] [--standbys 0] [--drain-timeout 1m] [--dial-timeout 5s]
  kv put   KEY VALUE [KEY VALUE]... [--manager ADDR] [--namespace NS] [--timeout 10s] [--dial-timeout 5s]
  kv get   KEY [KEY]... [--manager ADDR] [--namespace NS] [--timeout 10s] [--dial-timeout 5s]
Every command takes --certs-dir DIR (or $LEASEHOLD_CERTS_DIR) or --insecure.
--manager ADDR is host:port, or a replicated Manager's replicas, comma-separated
(default $LEASEHOLD_MANAGER or 127.0.0.1:7400). Flags may follow the arguments.
Exit codes: 0 success, 1 failure (get: or not found), 2 bad usage.
`

// Run is the kv command, which its main runs with os.Args[1:]: it runs one
// subcommand and returns the exit code. It is here rather than in package
// main so that its command-line tests share this package's test binary (a
// test binary of its own was a link of the whole service).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, cmdUsage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "put", "get":
		return runPutGet(ctx, cmd, args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, cmdUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "kv: unknown command %q\n%s", cmd, cmdUsage)
		return exitUsage
	}
}

// cmdFlags are what every subcommand takes.
type cmdFlags struct {
	fs          *flag.FlagSet
	manager     string
	namespace   string
	dialTimeout time.Duration
	certsDir    string
	insecure    bool
	trust       *certs.Flags
}

func newCmdFlags(name string, stderr io.Writer) *cmdFlags {
	f := &cmdFlags{fs: flag.NewFlagSet("kv "+name, flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	lifecycle.ManagerFlags(f.fs, &f.manager, &f.namespace)
	f.fs.DurationVar(&f.dialTimeout, "dial-timeout", 5*time.Second,
		"how long to try to reach the Manager before failing (put, get) or warning (serve), with why it cannot be reached")
	f.trust = certs.AddFlags(f.fs, &f.certsDir, &f.insecure, "mutual TLS to the Manager and between servers and clients")
	return f
}

// parse parses args, flags and arguments in any order ("--" ends the
// flags), and checks the flags every subcommand shares. It returns the
// arguments, or the exit code when parsing failed (already reported).
func (f *cmdFlags) parse(args []string, stderr io.Writer) ([]string, int, bool) {
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := f.fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...) // after "--", all arguments
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	switch err := checkManagers(f.manager); {
	case err != nil:
		fmt.Fprintf(stderr, "%s: --manager: %v\n", f.fs.Name(), err)
		return nil, exitUsage, false
	case f.dialTimeout <= 0:
		fmt.Fprintf(stderr, "%s: --dial-timeout %s must be positive\n", f.fs.Name(), f.dialTimeout)
		return nil, exitUsage, false
	case !f.trust.Chosen():
		fmt.Fprintf(stderr, "%s: no certificates: pass --certs-dir DIR or set $%s (leasehold cert create-ca makes them), or --insecure to speak plaintext\n",
			f.fs.Name(), certs.DirEnv)
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newCmdFlags("serve", stderr)
	listen := f.fs.String("listen", "", "the HTTP listen address, host:port (required)")
	id := f.fs.String("id", "", "the Owner ID, the same across restarts (default: the listen address, which must then name a host; in Kubernetes, the pod's name)")
	advertise := f.fs.String("advertise", "", "the address clients reach this server at (default: the listen address, which must then name a host; in Kubernetes, the pod's IP and port)")
	capacity := f.fs.Float64("capacity", 0, "this server's capacity weight, at most 100: one of 2 gets twice the load of one of 1 (default 1)")
	zone := f.fs.String("zone", "", "this server's failure domain (a rack, an availability zone): a range's standby is put in another zone than its holder's")
	standbys := f.fs.Int("standbys", 0, "1: take part in standby Owners (docs/standbys.md), in a namespace whose Manager names standbys: send each write to its range's standby before acknowledging it, keep copies as standby, serve them when promoted")
	drainTimeout := f.fs.Duration("drain-timeout", time.Minute, "on SIGINT or SIGTERM, how long to wait for every range to move away with its values (a second signal stops at once)")
	pos, code, ok := f.parse(args, stderr)
	if !ok {
		return code
	}
	switch {
	case *listen == "" || len(pos) != 0:
		fmt.Fprintf(stderr, "kv serve: --listen is required and takes no arguments (got %q)\n", pos)
		return exitUsage
	case *drainTimeout <= 0:
		fmt.Fprintf(stderr, "kv serve: --drain-timeout %s must be positive\n", *drainTimeout)
		return exitUsage
	case *standbys < 0 || *standbys > MaxStandbys:
		fmt.Fprintf(stderr, "kv serve: --standbys %d: want 0 or %d\n", *standbys, MaxStandbys)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := NewServer(ctx, ServerConfig{
		Manager: f.manager, Namespace: f.namespace, ID: *id,
		Listen: *listen, Advertise: *advertise, Capacity: *capacity, Logger: logger,
		CertsDir: f.certsDir, Insecure: f.insecure, Zone: *zone, Standbys: *standbys,
	})
	if err != nil {
		fmt.Fprintf(stderr, "kv serve: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "kv serving on %s as %s\n", srv.Addr(), srv.ID())
	took, err := lifecycle.Wait(ctx, srv, lifecycle.Options{DrainTimeout: *drainTimeout,
		DialTimeout: f.dialTimeout, Stderr: stderr, Name: "kv serve"})
	st := srv.Stats()
	fmt.Fprintf(stdout, "kv stopped after %s: %s handed over with %s, %d without\n",
		took.Round(time.Millisecond), plural(st.HandedOver, "range"), plural(st.ValuesSent, "value"), st.HandoverFailures)
	if *standbys > 0 {
		sb := srv.StandbyStats()
		fmt.Fprintf(stdout, "kv standbys: %s filled as holder; as standby %s kept, %s taken up when promoted\n",
			plural(sb.Fills, "standby"), plural(sb.Copies, "value"), plural(sb.Promoted, "value"))
	}
	if err != nil {
		fmt.Fprintf(stderr, "kv serve: %v\n", err)
		return exitFailure
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

func runPutGet(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	f := newCmdFlags(cmd, stderr)
	timeout := f.fs.Duration("timeout", 10*time.Second, "give up after this long, retries included")
	pos, code, ok := f.parse(args, stderr)
	if !ok {
		return code
	}
	switch {
	case cmd == "put" && (len(pos) == 0 || len(pos)%2 != 0):
		fmt.Fprintf(stderr, "kv put: want KEY VALUE pairs, got %d arguments\n%s", len(pos), cmdUsage)
		return exitUsage
	case cmd == "get" && len(pos) == 0:
		fmt.Fprintf(stderr, "kv get: want at least one KEY, got none\n%s", cmdUsage)
		return exitUsage
	case *timeout <= 0:
		fmt.Fprintf(stderr, "kv %s: --timeout %s must be positive\n", cmd, *timeout)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := NewClient(ctx, ClientConfig{Manager: f.manager, Namespace: f.namespace,
		CertsDir: f.certsDir, Insecure: f.insecure})
	if err != nil {
		fmt.Fprintf(stderr, "kv %s: %v\n", cmd, err)
		return exitFailure
	}
	defer c.Close()
	dctx, dcancel := context.WithTimeout(ctx, f.dialTimeout)
	err = c.WaitSynced(dctx)
	dcancel()
	if err != nil && c.ManagerError() == nil && ctx.Err() == nil {
		err = nil // connected, with no copy yet (a new group): retry for --timeout
	}
	if err != nil {
		hint := ""
		if f.insecure && strings.Contains(err.Error(), "server preface") {
			hint = " (the manager may serve TLS only: pass --certs-dir instead of --insecure)"
		}
		fmt.Fprintf(stderr, "kv %s: %s%s\n", cmd, strings.TrimPrefix(err.Error(), "kv: "), hint)
		return exitFailure
	}
	if cmd == "put" {
		return putPairs(ctx, c, pos, stderr)
	}
	return getKeys(ctx, c, pos, stdout, stderr)
}

// putPairs stores each pair of kvs (KEY VALUE ...) in turn, and stops at the
// first that fails, naming its key when there are several.
func putPairs(ctx context.Context, c *Client, kvs []string, stderr io.Writer) int {
	for i := 0; i < len(kvs); i += 2 {
		if err := c.Put(ctx, kvs[i], []byte(kvs[i+1])); err != nil {
			if len(kvs) > 2 {
				fmt.Fprintf(stderr, "kv put %s: %v\n", kvs[i], err)
			} else {
				fmt.Fprintln(stderr, err)
			}
			return exitFailure
		}
	}
	return exitOK
}

// getKeys prints the value of each key in turn: the value alone for one key,
// KEY, a tab and the value for several. A key with no value is named on
// stderr and the others are still read; a failure ends the command.
func getKeys(ctx context.Context, c *Client, keys []string, stdout, stderr io.Writer) int {
	code := exitOK
	for _, key := range keys {
		value, err := c.Get(ctx, key)
		switch {
		case err == nil && len(keys) == 1:
			fmt.Fprintf(stdout, "%s\n", value)
		case err == nil:
			fmt.Fprintf(stdout, "%s\t%s\n", key, value)
		case errors.Is(err, ErrNotFound) && len(keys) == 1:
			fmt.Fprintln(stderr, "not found")
			code = exitNotFound
		case errors.Is(err, ErrNotFound):
			fmt.Fprintf(stderr, "%s: not found\n", key)
			code = exitNotFound
		case len(keys) == 1:
			fmt.Fprintln(stderr, err)
			return exitFailure
		default:
			fmt.Fprintf(stderr, "kv get %s: %v\n", key, err)
			return exitFailure
		}
	}
	return code
}

// checkManagers reports a --manager list the libraries would refuse, in
// the flag's words: an empty entry, or one that is not host:port.
func checkManagers(list string) error {
	if strings.TrimSpace(list) == "" {
		return errors.New("the Manager's address is required")
	}
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return fmt.Errorf("an empty address in %q", list)
		}
		if strings.Contains(a, "://") {
			continue // a gRPC target (dns:///host:port); the library checks it
		}
		_, port, err := net.SplitHostPort(a)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 {
			return fmt.Errorf("address %q is not host:port", a)
		}
	}
	return nil
}
