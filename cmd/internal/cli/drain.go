package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/client"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func init() { register(newDrainCommand) }

func newDrainCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	var cancel bool
	cmd := &cobra.Command{
		Use:   "drain [flags] OWNER_ID",
		Short: "Move every range of an Owner to the others, with its state, before maintenance",
		Long: `Drain the Owner OWNER_ID: the Manager moves each of its ranges to another
Owner, asking it to hand the range's state over first (planned moves,
C§2.1.2), and gives it no new ones. Lookups see the moves as migrations, not
losses, when the Owner hands the state over in time (the Manager's
--handover). The Owner keeps running and stays drained until it restarts
or the drain is cancelled (--cancel); an Owner stopped gracefully (SIGTERM)
drains itself first.

At most the Manager's --drain-gate Owners of a namespace may drain at once:
a drain past that is refused, naming the Owners draining already and the
way out, and exits with code 1. Draining an Owner that is draining already
succeeds.

--cancel ends the drain: the Owner is given ranges again and no longer
counts at the gate. Cancelling where no drain runs succeeds and changes
nothing. (An Owner stopping by SIGTERM asks to drain again at its next
request.)

drain returns once the Manager has started the drain; 'leasehold status'
shows the Owner as DRAINING, its ranges falling to 0. --manager may list
several replicas: the request goes to the leader.

Output: draining OWNER in namespace NS: its ranges move to the other owners,
or with --json: {"owner":"kv-2","namespace":"default","draining":true,"manager":"…"}
(with --cancel: drain of OWNER in namespace NS cancelled: it takes ranges
again, and "draining":false).`,
		Example: `  leasehold drain kv-2
  leasehold drain --cancel kv-2
  leasehold drain kv-2 --namespace presence --manager 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("drain takes one OWNER_ID argument, got %d", len(args))
			}
			if args[0] == "" {
				return fmt.Errorf("drain: OWNER_ID must not be empty")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, args []string) error {
			if cancel {
				return undrain(ctx, e, o, args[0]) // owner_admin.go
			}
			return drain(ctx, e, o, args[0])
		}),
	}
	o.addFlags(cmd, e, "the namespace `NS` the Owner serves")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "cancel the Owner's drain: it takes ranges again, and frees its place at the maintenance gate")
	return cmd
}

// drainJSON is drain's --json output.
type drainJSON struct {
	Owner     string `json:"owner"`
	Namespace string `json:"namespace"`
	Draining  bool   `json:"draining"`
	Manager   string `json:"manager"` // the replica that started it: the leader
}

// drain asks the leader to drain an Owner: it tries each Manager in turn,
// following a refusal's leader hint, and stops at the first answer.
func drain(ctx context.Context, e *env, o *clientOptions, id string) error {
	addr, err := o.atLeader(func(addr string) (string, error) { return o.drainAt(ctx, addr, id) },
		func(err error) bool { return !unreachableError(err) }) // refused: the gate is full, no such owner …
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(e.stdout).Encode(drainJSON{Owner: id, Namespace: o.namespace, Draining: true, Manager: addr})
	}
	fmt.Fprintf(e.stdout, "draining %s in namespace %s: its ranges move to the other owners\n", id, o.namespace)
	return nil
}

// drainAt sends one Drain to the replica at addr. On a refusal by a
// replica that is not the leader it returns the leader's address, if known.
func (o *clientOptions) drainAt(ctx context.Context, addr, id string) (hint string, err error) {
	return o.ownerCallAt(ctx, addr, id, "drain", func(ctx context.Context, c pb.AdminClient, opt grpc.CallOption) error {
		_, err := c.Drain(ctx, &pb.DrainRequest{Namespace: o.namespace, Owner: id}, opt)
		return err
	})
}

// ownerCallAt makes one call about an Owner to the replica at addr. On a
// refusal by a replica that is not the leader it returns the leader's
// address, if known; the Manager's other refusals are worded "cannot VERB
// ID: …".
func (o *clientOptions) ownerCallAt(ctx context.Context, addr, id, verb string,
	call func(context.Context, pb.AdminClient, grpc.CallOption) error) (hint string, err error) {
	conn, err := o.dial(addr)
	if err != nil {
		return "", fmt.Errorf("invalid --manager address %q: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var trailer metadata.MD
	err = call(ctx, pb.NewAdminClient(conn), grpc.Trailer(&trailer))
	if err == nil {
		return "", nil
	}
	if hint := client.LeaderHint(err, trailer); hint != "" {
		return hint, o.managerErrorAt(addr, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return "", o.managerErrorAt(addr, err)
	}
	// The Manager's own words, without its package prefixes.
	msg := st.Message()
	for _, pkg := range []string{"leasehold: ", "manager: ", "lease: "} {
		msg = strings.TrimPrefix(msg, pkg)
	}
	switch st.Code() {
	case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument:
		return "", fmt.Errorf("cannot %s %s: %s", verb, id, msg)
	case codes.Unimplemented:
		return "", fmt.Errorf("cannot %s %s: the Manager at %s predates it (upgrade the Manager)", verb, id, addr)
	}
	return "", o.managerErrorAt(addr, err)
}
