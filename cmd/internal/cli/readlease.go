package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/manager"
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/client"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Quorum read leases on the command line: the Manager's flags that name
// the holders and the lease's length, and the reads that use a replica's
// lease (status --read-lease, lookup --read-lease).

// holdersFlag sets ReadLease.All or ReadLease.Holders from "all", "none"
// or a comma-separated list of Raft IDs.
type holdersFlag struct{ l *manager.ReadLease }

func (h holdersFlag) String() string {
	if h.l == nil || !h.l.On() {
		return "none"
	}
	if h.l.All {
		return "all"
	}
	var ids []string
	for _, id := range h.l.Holders {
		ids = append(ids, strconv.FormatUint(id, 10))
	}
	return strings.Join(ids, ",")
}

func (h holdersFlag) Set(v string) error {
	h.l.All, h.l.Holders = false, nil
	switch v {
	case "", "none":
		return nil
	case "all":
		h.l.All = true
		return nil
	}
	for _, s := range strings.Split(v, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("%q is not a replica ID (a positive integer); want all, none or ID,ID,…", s)
		}
		h.l.Holders = append(h.l.Holders, id)
	}
	return nil
}

func (holdersFlag) Type() string { return "IDS" }

// addReadLeaseFlags adds the Manager's read-lease flags.
func addReadLeaseFlags(cmd *cobra.Command, l *manager.ReadLease) {
	f := cmd.Flags()
	f.Var(holdersFlag{l}, "read-lease-holders", "the replicas that hold quorum read leases and serve linearizable reads from their own copy: all, none, or `IDS` (comma-separated); every replica must be given the same")
	f.DurationVar(&l.Duration, "read-lease", 0, "how long a read lease lasts from the holder's ask; a holder's crash stalls writes that long, plus drift (0: one election timeout)")
	f.DurationVar(&l.Renew, "read-lease-renew", 0, "how often a holder renews its read lease (0: a quarter of --read-lease)")
}

// readLeaseText is a replica's read lease in the cluster table.
func readLeaseText(l *pb.ReadLeaseInfo) string {
	switch {
	case l == nil || !l.GetHolder():
		return "-"
	case l.GetServing():
		return fmt.Sprintf("serving (%s left)", time.Duration(l.GetRemainingMs())*time.Millisecond)
	case l.GetRemainingMs() > 0:
		return fmt.Sprintf("held, write pending (%s left)", time.Duration(l.GetRemainingMs())*time.Millisecond)
	}
	return "none"
}

// leaseStatus asks the first replica in --manager for a status from its
// read lease: no message reaches the leader.
func (o *clientOptions) leaseStatus(ctx context.Context, namespace string) (*pb.StatusResponse, error) {
	var resp *pb.StatusResponse
	err := o.atFirst(ctx, func(ctx context.Context, admin pb.AdminClient) (err error) {
		resp, err = admin.Status(ctx, &pb.StatusRequest{Namespace: namespace, ReadLease: true})
		return err
	})
	return resp, err
}

// atFirst calls fn on the first replica in --manager.
func (o *clientOptions) atFirst(ctx context.Context, fn func(context.Context, pb.AdminClient) error) error {
	addrs, err := client.SplitManagers(o.manager)
	if err != nil {
		return usagef("--manager: %v", err)
	}
	if len(addrs) == 0 {
		return usagef("--manager must not be empty")
	}
	conn, err := o.dial(addrs[0])
	if err != nil {
		return fmt.Errorf("invalid --manager address %q: %w", addrs[0], err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := fn(ctx, pb.NewAdminClient(conn)); err != nil {
		return fmt.Errorf("manager at %s: %w", addrs[0], err)
	}
	return nil
}

// leaseLookup answers lookup --read-lease: the Holder read at the first
// replica in --manager.
func (o *lookupOptions) leaseLookup(ctx context.Context, e *env, arg string) error {
	key, err := parseKey(arg, o.raw)
	if err != nil {
		return err
	}
	var resp *pb.HolderResponse
	if err := o.atFirst(ctx, func(ctx context.Context, admin pb.AdminClient) (err error) {
		resp, err = admin.Holder(ctx, &pb.HolderRequest{Namespace: o.namespace, Key: uint64(key)})
		return err
	}); err != nil {
		return err
	}
	if resp.GetOwner() == "" {
		return fmt.Errorf("no owner holds %s (key %s) in namespace %s (manager %d, log index %d)", arg, hexKey(key), o.namespace, resp.GetReplica(), resp.GetIndex())
	}
	if o.json {
		return json.NewEncoder(e.stdout).Encode(lookupJSON{Key: arg, Hash: hexKey(key), Owner: resp.GetOwner(),
			Addr: resp.GetAddr(), LGN: resp.GetLgn()})
	}
	_, err = fmt.Fprintf(e.stdout, "%s -> %s at %s (lgn %d; read lease of manager %d at log index %d)\n", arg, resp.GetOwner(), resp.GetAddr(),
		resp.GetLgn(), resp.GetReplica(), resp.GetIndex())
	return err
}
