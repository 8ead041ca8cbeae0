package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/raftstore"
	"github.com/leasehold/leasehold/internal/replica"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func init() {
	register(newBackupCommand)
	register(newRestoreCommand)
}

func newBackupCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Copy a running Manager replica's data directory to FILE",
		Long: `Ask the Manager replica at --manager (one address) for a consistent copy of
its data directory — the Raft log and snapshot — while it keeps running, and
write it to FILE ("-" for stdout). leasehold restore turns it back into a
data directory. See docs/operations.md.`,
		Example: `  leasehold backup --manager 127.0.0.1:7401 leasehold-$(date +%F).db`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			conn, err := o.dial(o.manager)
			if err != nil {
				return usagef("--manager %q: %v", o.manager, err)
			}
			defer conn.Close()
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stream, err := pb.NewAdminClient(conn).Backup(ctx, &pb.BackupRequest{})
			if err != nil {
				return o.managerError(err)
			}
			var w io.Writer = e.stdout
			var f *os.File
			if args[0] != "-" {
				if f, err = os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
					return err
				}
				w = f
			}
			n, err := copyChunks(w, stream)
			if f != nil {
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					os.Remove(args[0])
				}
			}
			if err != nil {
				return o.managerError(err)
			}
			if f != nil {
				fmt.Fprintf(e.stderr, "wrote %d bytes to %s\n", n, args[0])
			}
			return nil
		}),
	}
	o.addFlags(cmd, e, "unused")
	_ = cmd.Flags().MarkHidden("namespace")
	return cmd
}

func copyChunks(w io.Writer, stream pb.Admin_BackupClient) (int64, error) {
	var n int64
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		k, err := w.Write(c.GetData())
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}

func newRestoreCommand(e *env) *cobra.Command {
	var dir, advertise string
	var id uint64
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Found a new Manager group of one from a backup",
		Long: `Create the data directory --data-dir from FILE ("-" for stdin), a copy made by
leasehold backup, as a new group of one: replica --id at --advertise, holding
the backup's namespaces, owners and lease tables under a new epoch. Leases
granted after the backup are unknown to it, so Owners' leases are not kept
(Lookups are told), and LGNs can never be confused with the lost ones. Start
it with leasehold manager --id ID --data-dir DIR, then grow it with leasehold
cluster add (docs/operations.md).`,
		Example: `  leasehold restore --data-dir /var/lib/leasehold --id 1 --advertise 10.0.0.1:7400 leasehold-2026-11-21.db`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, args []string) error {
			switch {
			case dir == "":
				return usagef("--data-dir is required")
			case id == 0:
				return usagef("--id must be a positive integer")
			}
			if err := client.CheckAddr(advertise); err != nil {
				return usagef("--advertise: %v", err)
			}
			var r io.Reader = os.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			if err := restore(dir, id, advertise, r); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "restored %s as replica %d at %s\n", dir, id, advertise)
			return nil
		}),
	}
	cmd.Flags().StringVar(&dir, "data-dir", "", "the data directory `DIR` to create")
	cmd.Flags().Uint64Var(&id, "id", 1, "the `ID` of the new group's one replica")
	cmd.Flags().StringVar(&advertise, "advertise", "", "the `ADDR` the replica will serve at, host:port")
	return cmd
}

// restore unpacks the backup in a scratch directory, replays it, and writes
// its State as the snapshot of a new group of one in dir.
func restore(dir string, id uint64, addr string, r io.Reader) error {
	if _, err := os.Stat(filepath.Join(dir, raftstore.FileName)); err == nil {
		return fmt.Errorf("%s already holds a Manager's state: restore into a new directory", dir)
	}
	scratch, err := os.MkdirTemp("", "leasehold-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	if err := raftstore.Restore(scratch, r); err != nil {
		return err
	}
	old, err := raftstore.Open(scratch)
	if err != nil {
		return err
	}
	ms, _, err := old.Load()
	old.Close()
	if err != nil {
		return err
	}
	st, index, term, err := replica.ReplayLog(ms, 0, time.Now())
	if err != nil {
		return fmt.Errorf("replaying the backup: %w", err)
	}
	st.Refound(id, addr, uint64(time.Now().UnixNano()))
	store, err := raftstore.Open(dir)
	if err != nil {
		return err
	}
	defer store.Close()
	snap := raftpb.Snapshot{Data: st.Encode(), Metadata: raftpb.SnapshotMetadata{
		Index: index, Term: term, ConfState: raftpb.ConfState{Voters: []uint64{id}}}}
	return store.Save(raftpb.HardState{Term: term, Commit: index}, nil, snap)
}
