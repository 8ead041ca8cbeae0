package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func init() { register(newClusterCommand) }

// replicaAnswer is one Manager replica's status, or why it gave none.
type replicaAnswer struct {
	addr    string
	resp    *pb.StatusResponse
	err     error
	version string // the replica's build (manager.VersionKey); "" from one built before it said
}

// askAll asks every Manager in o.manager (a comma-separated list), and every
// replica their answers name, for its status, in parallel within o.timeout.
// The answers are sorted by replica ID, unreachable ones last.
func (o *clientOptions) askAll(ctx context.Context, namespace string) ([]replicaAnswer, error) {
	addrs, err := client.SplitManagers(o.manager)
	if err != nil {
		return nil, usagef("--manager: %v", err)
	}
	asked := map[string]bool{}
	var out []replicaAnswer
	for len(addrs) > 0 {
		var wg sync.WaitGroup
		answers := make([]replicaAnswer, len(addrs))
		for i, addr := range addrs {
			asked[addr] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				oo := *o
				oo.manager = addr
				var md metadata.MD
				oo.header = &md
				resp, err := oo.status(ctx, namespace)
				answers[i] = replicaAnswer{addr: addr, resp: resp, err: err}
				if v := md.Get(manager.VersionKey); len(v) > 0 {
					answers[i].version = v[0]
				}
			}()
		}
		wg.Wait()
		out = append(out, answers...)
		addrs = nil
		for _, a := range answers {
			for _, p := range a.resp.GetCluster().GetPeers() {
				if addr := p.GetClientAddr(); addr != "" && !asked[addr] {
					asked[addr] = true
					addrs = append(addrs, addr)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b replicaAnswer) int {
		if (a.resp == nil) != (b.resp == nil) {
			if a.resp == nil {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.resp.GetCluster().GetId(), b.resp.GetCluster().GetId())
	})
	return out, nil
}

// leaderAnswer is the answer of the replica that says it leads (the one of
// the highest term if several do: a deposed leader that has not noticed
// yet), else the first answer; nil if nobody answered.
func leaderAnswer(answers []replicaAnswer) *pb.StatusResponse {
	var best *pb.StatusResponse
	for _, a := range answers {
		c := a.resp.GetCluster()
		switch {
		case a.resp == nil:
		case best == nil:
			best = a.resp
		case c.GetRole() == "leader" && (best.GetCluster().GetRole() != "leader" || c.GetTerm() > best.GetCluster().GetTerm()):
			best = a.resp
		}
	}
	return best
}

// managerJSON is one replica in --json output.
type managerJSON struct {
	ID      uint64 `json:"id,omitempty"`
	Addr    string `json:"addr"`
	Role    string `json:"role"` // leader, follower, read-replica, candidate, pre-candidate or unreachable
	Term    uint64 `json:"term,omitempty"`
	Commit  uint64 `json:"commit,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	Error   string `json:"error,omitempty"`
	// ReadLease is the replica's quorum read lease, as text.
	ReadLease string `json:"read_lease,omitempty"`
	// Version is the replica's build, as it says (leasehold version).
	Version string `json:"version,omitempty"`
	// Lookups counts the Lookups this replica serves, in the namespaces
	// asked: the spread over the followers and read replicas.
	Lookups uint32 `json:"lookups"`
}

type clusterJSON struct {
	Leader     uint64        `json:"leader"`
	LeaderAddr string        `json:"leader_addr"`
	Managers   []managerJSON `json:"managers"`
}

func clusterOf(answers []replicaAnswer) clusterJSON {
	out := clusterJSON{Managers: []managerJSON{}}
	if l := leaderAnswer(answers); l != nil && l.GetCluster().GetRole() == "leader" {
		out.Leader, out.LeaderAddr = l.GetCluster().GetId(), l.GetCluster().GetLeaderAddr()
	}
	for _, a := range answers {
		c := a.resp.GetCluster()
		m := managerJSON{ID: c.GetId(), Addr: a.addr, Role: c.GetRole(), Term: c.GetTerm(),
			Commit: c.GetCommit(), Applied: c.GetApplied(), ReadLease: readLeaseText(c.GetReadLease()), Version: a.version}
		for _, n := range a.resp.GetNamespaces() {
			m.Lookups += n.GetLookups()
		}
		if a.err != nil {
			m.Role, m.Error = "unreachable", a.err.Error()
		}
		out.Managers = append(out.Managers, m)
	}
	return out
}

// writeCluster prints the replicas as a table under a line naming the leader.
func writeCluster(w io.Writer, c clusterJSON) {
	if c.Leader != 0 {
		fmt.Fprintf(w, "leader: manager %d at %s\n", c.Leader, c.LeaderAddr)
	} else {
		fmt.Fprintln(w, "leader: none known")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tADDR\tROLE\tTERM\tCOMMIT\tAPPLIED\tLOOKUPS\tREAD LEASE\tVERSION")
	for _, m := range c.Managers {
		if m.Error != "" {
			fmt.Fprintf(tw, "  -\t%s\tunreachable\t\t\t\t\t\t\n", m.Addr)
			continue
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", m.ID, m.Addr, m.Role, m.Term, m.Commit, m.Applied, m.Lookups, m.ReadLease, cmp.Or(m.Version, "-"))
	}
	_ = tw.Flush()
}

func newClusterCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show and change the Manager's replica group",
		Long: `Show the Manager's Raft group, or add and remove replicas while it runs.
--manager takes a comma-separated list; the commands find the leader
themselves. See docs/operations.md for growing and shrinking a group.`,
	}
	cmd.AddCommand(newClusterStatusCommand(e), newClusterAddCommand(e), newClusterRemoveCommand(e))
	return cmd
}

func newClusterStatusCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each Manager replica's role, term, log position and version",
		Long: `Ask every Manager in --manager, and every replica they name, for its Raft
state. Prints the leader, then one line per replica (unreachable ones too).
With --json: {"leader":N,"leader_addr":"…","managers":[{"id":N,"addr":"…",
"role":"leader","term":N,"commit":N,"applied":N,"version":"…"}]}. Exits 1 if
no replica answers.`,
		Example: `  leasehold cluster status --manager 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403`,
		Args:    cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			answers, err := o.askAll(ctx, o.namespace)
			if err != nil {
				return err
			}
			if leaderAnswer(answers) == nil {
				return answers[0].err
			}
			c := clusterOf(answers)
			if o.json {
				return json.NewEncoder(e.stdout).Encode(c)
			}
			writeCluster(e.stdout, c)
			return nil
		}),
	}
	o.addFlags(cmd, e, "unused")
	_ = cmd.Flags().MarkHidden("namespace")
	return cmd
}

func newClusterAddCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	checkAddr, readReplica := true, false
	cmd := &cobra.Command{
		Use:   "add ID ADDR",
		Short: "Add a replica to the Manager's group",
		Long: `Add replica ID, reachable at ADDR (host:port), to the Manager's Raft group.
Start the new replica first with --join, --peers naming the running group,
and its own --id, --listen and --data-dir; it receives the state from the
leader once added. The replica joins as a learner, which does not vote; the
leader promotes it to a voter once its log has caught up. Returns when the
promotion is applied; the group then needs a majority of the new size. If
the replica does not catch up within the Manager's --learner-timeout (30s)
it is removed again and the command fails saying what the leader saw. An add
that would leave the group without a quorum of reachable replicas (one is
down) is refused: bring that replica back, or remove it first. An ADDR whose
host name does not resolve here is refused at once (--check-addr=false
skips that). While it waits, it says on stderr every few seconds where the
new replica stands.

With --read-replica the replica joins as a read replica: a learner that
applies the log and answers Lookups but never votes, which no leader ever
promotes (start it with --role read-replica). It changes no quorum, so no
quorum check applies; the command returns once it has caught up. Adding a
read replica's ID again without --read-replica is the explicit promotion
to a voter. See docs/operations.md, "Read replicas".`,
		Example: `  leasehold manager --id 4 --join --peers 1=127.0.0.1:7401,2=127.0.0.1:7402,3=127.0.0.1:7403 \
      --listen 127.0.0.1:7404 --data-dir /var/lib/leasehold/4 &
  leasehold cluster add 4 127.0.0.1:7404 --manager 127.0.0.1:7401
  leasehold manager --role read-replica --id 5 --peers 1=127.0.0.1:7401 \
      --listen 127.0.0.1:7405 --data-dir /var/lib/leasehold/5 &
  leasehold cluster add --read-replica 5 127.0.0.1:7405 --manager 127.0.0.1:7401`,
		Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, args []string) error {
			id, err := parseReplicaID(args[0])
			if err != nil {
				return err
			}
			if err := client.CheckAddr(args[1]); err != nil {
				return usagef("ADDR: %v", err)
			}
			if err := o.validate(); err != nil {
				return err
			}
			if checkAddr {
				if err := checkResolves(ctx, args[1]); err != nil {
					return err
				}
			}
			defer o.addProgress(ctx, e, id, args[1], readReplica)()
			return o.change(ctx, e, addWait, func(ctx context.Context, c pb.AdminClient, opts ...grpc.CallOption) (*pb.ClusterResponse, error) {
				return c.AddPeer(ctx, &pb.AddPeerRequest{Id: id, Addr: args[1], ClientAddr: args[1], ReadReplica: readReplica}, opts...)
			})
		}),
	}
	o.addFlags(cmd, e, "unused")
	cmd.Flags().BoolVar(&readReplica, "read-replica", false, "add the replica as a read replica: it serves Lookups, never votes and is never promoted")
	cmd.Flags().BoolVar(&checkAddr, "check-addr", true, "refuse at once an ADDR whose host name does not resolve here (turn off when only the replicas can resolve it)")
	_ = cmd.Flags().MarkHidden("namespace")
	return cmd
}

func newClusterRemoveCommand(e *env) *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a replica from the Manager's group",
		Long: `Remove replica ID from the Manager's Raft group. Stop it afterwards. Removing
the leader is allowed: the others elect a new one. Removing a voter is
refused if the voters left would not have a quorum of reachable replicas.`,
		Example: `  leasehold cluster remove 3 --manager 127.0.0.1:7401`,
		Args:    cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, args []string) error {
			id, err := parseReplicaID(args[0])
			if err != nil {
				return err
			}
			return o.change(ctx, e, 0, func(ctx context.Context, c pb.AdminClient, opts ...grpc.CallOption) (*pb.ClusterResponse, error) {
				return c.RemovePeer(ctx, &pb.RemovePeerRequest{Id: id}, opts...)
			})
		}),
	}
	o.addFlags(cmd, e, "unused")
	_ = cmd.Flags().MarkHidden("namespace")
	return cmd
}

func parseReplicaID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("ID %q: want a replica ID, a positive integer", s)
	}
	return id, nil
}

// addWait is how much longer than a removal an add may take: the new
// replica's catching up, which the Manager bounds by its --learner-timeout
// (30s by default). A longer --learner-timeout makes cluster add stop
// waiting first, though the add may still complete.
const addWait = 2 * replica.DefaultLearnerTimeout

// change sends a membership change to the leader: it tries each Manager in
// turn, following a refusal's leader hint, and prints the group after. The
// call may take o.timeout, plus ten seconds to apply, plus wait.
func (o *clientOptions) change(ctx context.Context, e *env, wait time.Duration,
	call func(context.Context, pb.AdminClient, ...grpc.CallOption) (*pb.ClusterResponse, error)) error {
	var resp *pb.ClusterResponse
	_, err := o.atLeader(func(addr string) (hint string, err error) {
		oo := *o
		oo.manager = addr
		resp, hint, err = oo.changeAt(ctx, wait, call)
		return hint, err
	}, func(err error) bool {
		// A refusal by the leader (the change would cost the quorum, the
		// new replica did not catch up) is the answer: asking a follower
		// next would only hide it behind "not the leader".
		var u *unreachable
		return !errors.As(err, &u)
	})
	if err != nil {
		return err
	}
	c := clusterJSON{Managers: []managerJSON{}}
	cl := resp.GetCluster()
	c.Leader, c.LeaderAddr = cl.GetLeader(), cl.GetLeaderAddr()
	for _, p := range cl.GetPeers() {
		role := "member"
		if p.GetReadReplica() {
			role = manager.RoleReadReplica
		}
		c.Managers = append(c.Managers, managerJSON{ID: p.GetId(), Addr: p.GetClientAddr(), Role: role})
	}
	if o.json {
		return json.NewEncoder(e.stdout).Encode(c)
	}
	writeCluster(e.stdout, c)
	return nil
}

func (o *clientOptions) changeAt(ctx context.Context, wait time.Duration,
	call func(context.Context, pb.AdminClient, ...grpc.CallOption) (*pb.ClusterResponse, error)) (*pb.ClusterResponse, string, error) {
	conn, err := o.dial(o.manager)
	if err != nil {
		return nil, "", fmt.Errorf("invalid --manager address %q: %w", o.manager, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout+10*time.Second+wait) // the change may take a while to apply
	defer cancel()
	var trailer metadata.MD
	resp, err := call(ctx, pb.NewAdminClient(conn), grpc.Trailer(&trailer))
	if err != nil {
		return nil, client.LeaderHint(err, trailer), o.managerError(err)
	}
	return resp, "", nil
}
