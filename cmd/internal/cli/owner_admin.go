package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func init() { register(newForgetCommand) }

// undrain asks the leader to cancel an Owner's drain (drain --cancel).
func undrain(ctx context.Context, e *env, o *clientOptions, id string) error {
	addr, err := o.atLeader(func(addr string) (string, error) {
		return o.ownerCallAt(ctx, addr, id, "cancel the drain of", func(ctx context.Context, c pb.AdminClient, opt grpc.CallOption) error {
			_, err := c.Undrain(ctx, &pb.DrainRequest{Namespace: o.namespace, Owner: id}, opt)
			return err
		})
	}, func(err error) bool { return !unreachableError(err) })
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(e.stdout).Encode(drainJSON{Owner: id, Namespace: o.namespace, Draining: false, Manager: addr})
	}
	fmt.Fprintf(e.stdout, "drain of %s in namespace %s cancelled: it takes ranges again\n", id, o.namespace)
	return nil
}

func newForgetCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "forget [flags] OWNER_ID",
		Short: "Remove a dead Owner from the Manager's table of Owners now",
		Long: `Forget the Owner OWNER_ID: the Manager removes its record (the row of
'leasehold status', which counts toward --max-owners) now, rather than by
its own rule: an Owner that is no member (MEMBER no: silent for the
Manager's --manager-lease, or gone by a goodbye) and is owed nothing is
forgotten 2 × --manager-lease after it was last heard (docs/operations.md,
"Owners that are gone").

It is refused, with exit code 1 and the reason, while the Owner is a member
or is owed anything: while the lease table names it for a range (its
leases, or an earlier run's, until their reservations end, at most one
--manager-lease after the last answer that listed them) or a planned move
hands it ranges. Forgetting it earlier would lose what keeps its ranges
safe if it came back (docs/protocol.md, "Forgetting Owners").

An Owner forgotten that comes back is recorded again as a new Owner.
--manager may list several replicas: the request goes to the leader.

Output: forgot OWNER in namespace NS,
or with --json: {"owner":"kv-2","namespace":"default","forgotten":true,"manager":"…"}`,
		Example: `  leasehold forget kv-2
  leasehold forget kv-2 --namespace presence --manager 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("forget takes one OWNER_ID argument, got %d", len(args))
			}
			if args[0] == "" {
				return fmt.Errorf("forget: OWNER_ID must not be empty")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, args []string) error { return forget(ctx, e, o, args[0]) }),
	}
	o.addFlags(cmd, e, "the namespace `NS` the Owner served")
	return cmd
}

// forgetJSON is forget's --json output.
type forgetJSON struct {
	Owner     string `json:"owner"`
	Namespace string `json:"namespace"`
	Forgotten bool   `json:"forgotten"`
	Manager   string `json:"manager"` // the replica that forgot it: the leader
}

func forget(ctx context.Context, e *env, o *clientOptions, id string) error {
	addr, err := o.atLeader(func(addr string) (string, error) {
		return o.ownerCallAt(ctx, addr, id, "forget", func(ctx context.Context, c pb.AdminClient, opt grpc.CallOption) error {
			_, err := c.Forget(ctx, &pb.ForgetRequest{Namespace: o.namespace, Owner: id}, opt)
			return err
		})
	}, func(err error) bool { return !unreachableError(err) })
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(e.stdout).Encode(forgetJSON{Owner: id, Namespace: o.namespace, Forgotten: true, Manager: addr})
	}
	fmt.Fprintf(e.stdout, "forgot %s in namespace %s\n", id, o.namespace)
	return nil
}
