package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
)

func init() { register(newLookupCommand) }

type lookupOptions struct {
	clientOptions
	raw       bool // KEY is a uint64, not a name to hash
	readLease bool // ask the first --manager's read lease (the Holder read)
}

func newLookupCommand(e *env) *cobra.Command {
	o := &lookupOptions{}
	cmd := &cobra.Command{
		Use:   "lookup [flags] KEY",
		Short: "Show which Owner holds a key, as a frontend's Lookup library sees it",
		Long: `Show which Owner holds KEY: it runs the Lookup library, waits for its first copy
of the lease table, and prints the Owner, its address and the lease generation
number (LGN) it holds the key under.

KEY is an application name, hashed to a key with xxhash64 (keyspace.KeyOf), or
with --raw a key itself, a uint64 in decimal or 0x hex.

Output: KEY -> OWNER at ADDR (lgn N), or with --json:
  {"key":"alice","hash":"0x…","owner":"kv-1","addr":"127.0.0.1:8001","lgn":17}
When no Owner holds the key it says so on stderr and exits with code 1.`,
		Example: `  leasehold lookup alice
  leasehold lookup --raw 0x8000000000000000 --json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("lookup takes one KEY argument, got %d", len(args))
			}
			return nil
		},
		RunE: run(func(ctx context.Context, args []string) error { return o.run(ctx, e, args[0]) }),
	}
	o.addFlags(cmd, e, "look in namespace `NS`")
	cmd.Flags().BoolVar(&o.raw, "raw", false, "KEY is a key, a uint64 in decimal or 0x hex, not a name to hash")
	cmd.Flags().BoolVar(&o.readLease, "read-lease", false, "ask the first --manager, which answers from its quorum read lease with no message to the leader (linearizable), or refuses")
	return cmd
}

// parseKey turns the KEY argument into a key.
func parseKey(arg string, raw bool) (keyspace.Key, error) {
	if !raw {
		return keyspace.KeyOf(arg), nil
	}
	digits, base := arg, 10
	if strings.HasPrefix(arg, "0x") || strings.HasPrefix(arg, "0X") {
		digits, base = arg[2:], 16
	}
	k, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return 0, usagef("--raw key %q is not a uint64 (decimal, or hex with 0x)", arg)
	}
	return keyspace.Key(k), nil
}

// lookupJSON is the --json output.
type lookupJSON struct {
	Key   string `json:"key"`
	Hash  string `json:"hash"`
	Owner string `json:"owner"`
	Addr  string `json:"addr"`
	LGN   uint64 `json:"lgn"`
}

func (o *lookupOptions) run(ctx context.Context, e *env, arg string) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.readLease {
		return o.leaseLookup(ctx, e, arg)
	}
	key, err := parseKey(arg, o.raw)
	if err != nil {
		return err
	}
	// Status fails fast with a clear error when the manager is down or the
	// namespace unknown; the Lookup library would retry quietly.
	deadline := time.Now().Add(o.timeout)
	if _, err := o.status(ctx, o.namespace); err != nil {
		return err
	}
	opts, err := o.dialOptions()
	if err != nil {
		return err
	}
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Manager: o.manager, Namespace: o.namespace, DialOptions: opts}})
	if err != nil {
		return err
	}
	defer l.Close()
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := l.WaitSynced(wctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while waiting for the manager at %s", o.manager)
		}
		return fmt.Errorf("cannot reach the manager at %s: no copy of the lease table within %s", o.manager, o.timeout)
	}
	route, ok := l.Lookup(key)
	if !ok {
		return fmt.Errorf("no owner holds %s (key %s) in namespace %s", arg, hexKey(key), o.namespace)
	}
	if o.json {
		return json.NewEncoder(e.stdout).Encode(lookupJSON{Key: arg, Hash: hexKey(key), Owner: route.Owner,
			Addr: route.Addr, LGN: uint64(route.LGN)})
	}
	_, err = fmt.Fprintf(e.stdout, "%s -> %s at %s (lgn %d)\n", arg, route.Owner, route.Addr, route.LGN)
	return err
}

// hexKey formats a key as 0x and 16 hex digits.
func hexKey(k keyspace.Key) string { return fmt.Sprintf("0x%016x", uint64(k)) }

// hexEnd formats a range's End: End 0 stands for 2^64, the end of the key
// space, which is printed as such.
func hexEnd(r keyspace.Range) string {
	if r.End == 0 {
		return "0x10000000000000000"
	}
	return hexKey(r.End)
}
