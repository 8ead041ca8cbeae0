package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func init() { register(newStatusCommand) }

type statusOptions struct {
	clientOptions
	allNamespaces bool // --namespace not given and text output: show them all
	readLease     bool // --read-lease: the first --manager answers from its read lease
}

func newStatusCommand(e *env) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the Managers, their leader, and the Owners that hold each namespace's ranges",
		Long: `Show what the Manager knows. First its replicas: the leader, and each
replica's role (leader, follower, candidate, or unreachable), Raft term, log
position and version (as leasehold version prints it), and its readiness;
every Manager in --manager (a comma-separated list) is asked, and every
replica they name. Then, from the leader, for each namespace the
LSN of its lease table, its ranges (segments of the table), the free ones,
the Lookups connected, and a table of the Owners with the ranges and the
share of the key space each holds, its load (requests per second, as its
last report measured them), its capacity weight, and whether it is
draining; then the busiest keys each Owner reported (sampled rates). In a
namespace with standby Owners (leasehold manager --standbys), or where
Owners gave a zone, the table also shows each Owner's zone, the ranges it
stands by for, and how many of those are in sync (filled: it is promoted,
with no loss, if their holder is lost).

Without --namespace the text output shows every namespace. With --json it
prints one JSON object for one namespace ("default" unless --namespace says):
  {"epoch":N,"namespace":"default","lsn":N,"ranges":N,"free_ranges":N,"lookups":N,
   "standbys":0,
   "owners":[{"id":"kv-1","addr":"127.0.0.1:8001","incarnation":N,"member":true,
              "ranges":N,"share":0.5,"load":120.5,"capacity":1,"draining":false,
              "zone":"","standby_ranges":0,"standby_in_sync":0,
              "hot_keys":[{"key":"0x…","rate":40}]}],
   "leader":N,"leader_addr":"127.0.0.1:7401",
   "managers":[{"id":N,"addr":"127.0.0.1:7401","role":"leader","term":N,
                "commit":N,"applied":N,"version":"v1.2.0"}],
   "ready":[{"addr":"127.0.0.1:7401","ready":true,"reason":"…"}]}

A replica is ready when it knows a leader and has applied everything
committed, and a leader when a majority of its voters answered naming it
(the rule of the Manager's /readyz).`,
		Example: `  leasehold status
  leasehold status --manager 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403
  leasehold status --manager 10.0.0.5:7400 --namespace presence --json`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, _ []string) error { return o.run(ctx, e) }),
	}
	o.addFlags(cmd, e, "show namespace `NS` (text output: every namespace when not given)")
	cmd.Flags().BoolVar(&o.readLease, "read-lease", false, "ask only the first --manager, which answers from its quorum read lease with no message to the leader (linearizable), or refuses")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		o.allNamespaces = !cmd.Flags().Changed("namespace") && !o.json
	}
	return cmd
}

// statusJSON is the --json output.
type statusJSON struct {
	Epoch      uint64 `json:"epoch"`
	Namespace  string `json:"namespace"`
	LSN        uint64 `json:"lsn"`
	Ranges     uint32 `json:"ranges"`
	FreeRanges uint32 `json:"free_ranges"`
	Lookups    uint32 `json:"lookups"`
	// Standbys is the namespace's standby Owners per range (0 or 1).
	Standbys uint32      `json:"standbys"`
	Owners   []ownerJSON `json:"owners"`
	clusterJSON
	// Ready is each replica's readiness, by the rule of its /readyz.
	Ready []readyJSON `json:"ready"`
}

type readyJSON struct {
	Addr   string `json:"addr"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

type ownerJSON struct {
	ID          string  `json:"id"`
	Addr        string  `json:"addr"`
	Incarnation uint64  `json:"incarnation"`
	Member      bool    `json:"member"`
	Ranges      uint32  `json:"ranges"`
	Share       float64 `json:"share"`
	// Load is requests per second over the Owner's last report, Capacity
	// its weight (1 unless it set another), HotKeys its busiest keys.
	Load     float64 `json:"load"`
	Capacity float64 `json:"capacity"`
	Draining bool    `json:"draining"`
	// Zone is the Owner's failure domain; StandbyRanges the leases it is
	// standby for, StandbyInSync how many of those are filled.
	Zone          string       `json:"zone"`
	StandbyRanges uint32       `json:"standby_ranges"`
	StandbyInSync uint32       `json:"standby_in_sync"`
	HotKeys       []hotKeyJSON `json:"hot_keys"`
}

type hotKeyJSON struct {
	Key  string  `json:"key"`  // 0x and 16 hex digits
	Rate float64 `json:"rate"` // requests per second, estimated from a sample
}

// capacity is an Owner's capacity weight: 0 means 1.
func capacity(ow *pb.OwnerStatus) float64 {
	if c := ow.GetCapacity(); c > 0 {
		return c
	}
	return 1
}

func (o *statusOptions) run(ctx context.Context, e *env) error {
	if err := o.validate(); err != nil {
		return err
	}
	ask := o.namespace
	if o.allNamespaces {
		ask = ""
	}
	if o.readLease {
		resp, err := o.leaseStatus(ctx, ask)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "answered by manager %d from its read lease: %s\n", resp.GetCluster().GetId(), readLeaseText(resp.GetCluster().GetReadLease()))
		writeStatus(e.stdout, resp)
		return nil
	}
	answers, err := o.askAll(ctx, ask)
	if err != nil {
		return err
	}
	resp := leaderAnswer(answers)
	if resp == nil {
		return answers[0].err
	}
	cluster := clusterOf(answers)
	ready := readiness(answers)
	if !o.json {
		writeCluster(e.stdout, cluster)
		for _, r := range ready {
			state := "ready"
			if !r.Ready {
				state = "not ready"
			}
			fmt.Fprintf(e.stdout, "  %s: %s (%s)\n", r.Addr, state, r.Reason)
		}
		fmt.Fprintln(e.stdout)
		writeStatus(e.stdout, resp)
		return nil
	}
	if len(resp.GetNamespaces()) != 1 {
		return fmt.Errorf("manager at %s: answered %d namespaces for %q", o.manager, len(resp.GetNamespaces()), o.namespace)
	}
	n := resp.GetNamespaces()[0]
	out := statusJSON{Epoch: resp.GetEpoch(), Namespace: n.GetName(), LSN: n.GetLsn(), Ranges: n.GetSegments(),
		FreeRanges: n.GetFreeSegments(), Lookups: n.GetLookups(), Standbys: n.GetStandbys(), Owners: []ownerJSON{},
		clusterJSON: cluster, Ready: ready}
	for _, ow := range n.GetOwners() {
		oj := ownerJSON{ID: ow.GetId(), Addr: ow.GetAddr(), Incarnation: ow.GetIncarnation(),
			Member: ow.GetMember(), Ranges: ow.GetRanges(), Share: ow.GetShare(), Load: ow.GetLoad(),
			Capacity: capacity(ow), Draining: ow.GetDraining(), Zone: ow.GetZone(),
			StandbyRanges: ow.GetStandbyRanges(), StandbyInSync: ow.GetStandbyInSync(), HotKeys: []hotKeyJSON{}}
		for _, k := range ow.GetHotKeys() {
			oj.HotKeys = append(oj.HotKeys, hotKeyJSON{Key: hexKey(keyspace.Key(k.GetKey())), Rate: k.GetRate()})
		}
		out.Owners = append(out.Owners, oj)
	}
	return json.NewEncoder(e.stdout).Encode(out)
}

// writeStatus prints the text output: a header per namespace, then its
// owners as a table.
func writeStatus(w io.Writer, resp *pb.StatusResponse) {
	fmt.Fprintf(w, "epoch %d\n", resp.GetEpoch())
	for _, n := range resp.GetNamespaces() {
		sb := ""
		if n.GetStandbys() > 0 {
			sb = fmt.Sprintf(", %s per range", count(int(n.GetStandbys()), "standby"))
		}
		fmt.Fprintf(w, "\nnamespace %s: lsn %d, %s (%d free), %s%s\n", n.GetName(), n.GetLsn(),
			count(int(n.GetSegments()), "range"), n.GetFreeSegments(), count(int(n.GetLookups()), "lookup"), sb)
		if len(n.GetOwners()) == 0 {
			fmt.Fprintln(w, "  no owners")
			continue
		}
		standbys := showStandbys(n)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if standbys {
			fmt.Fprintln(tw, "  ID\tADDR\tMEMBER\tRANGES\tSHARE%\tLOAD/s\tCAP\tDRAINING\tZONE\tSTANDBY-FOR\tIN-SYNC\tINCARNATION")
		} else {
			fmt.Fprintln(tw, "  ID\tADDR\tMEMBER\tRANGES\tSHARE%\tLOAD/s\tCAP\tDRAINING\tINCARNATION")
		}
		hot := false
		for _, ow := range n.GetOwners() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.1f\t%.1f\t%g\t%s\t", ow.GetId(), ow.GetAddr(), yesNo(ow.GetMember()),
				ow.GetRanges(), 100*ow.GetShare(), ow.GetLoad(), capacity(ow), yesNo(ow.GetDraining()))
			if standbys {
				fmt.Fprintf(tw, "%s\t%d\t%d\t", cmp.Or(ow.GetZone(), "-"), ow.GetStandbyRanges(), ow.GetStandbyInSync())
			}
			fmt.Fprintf(tw, "%d\n", ow.GetIncarnation())
			hot = hot || len(ow.GetHotKeys()) > 0
		}
		_ = tw.Flush()
		if hot {
			writeHotKeys(w, n.GetOwners())
		}
	}
}

// showStandbys says whether the text output shows the standby columns:
// in a namespace with standbys, or where an Owner gave a zone.
func showStandbys(n *pb.NamespaceStatus) bool {
	if n.GetStandbys() > 0 {
		return true
	}
	for _, ow := range n.GetOwners() {
		if ow.GetZone() != "" || ow.GetStandbyRanges() > 0 {
			return true
		}
	}
	return false
}

// hotKeysShown is how many of each Owner's hot keys the text output shows.
const hotKeysShown = 3

// writeHotKeys prints each Owner's busiest keys, the busiest first, after
// the owners' table: one line per Owner that reported any.
func writeHotKeys(w io.Writer, owners []*pb.OwnerStatus) {
	fmt.Fprintln(w, "  hot keys (requests/s):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, ow := range owners {
		keys := slices.Clone(ow.GetHotKeys())
		if len(keys) == 0 {
			continue
		}
		slices.SortStableFunc(keys, func(a, b *pb.HotKey) int { return cmp.Compare(b.GetRate(), a.GetRate()) })
		var parts []string
		for _, k := range keys[:min(len(keys), hotKeysShown)] {
			parts = append(parts, fmt.Sprintf("%s %.1f", hexKey(keyspace.Key(k.GetKey())), k.GetRate()))
		}
		fmt.Fprintf(tw, "    %s\t%s\n", ow.GetId(), strings.Join(parts, ", "))
	}
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// count is n and noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// readiness applies the rule of /readyz (manager.Readiness) to each
// replica's answer. Whether a leader holds a quorum is judged from the
// answers themselves: a majority of its voters, itself included, answered
// naming it leader in its term.
func readiness(answers []replicaAnswer) []readyJSON {
	out := []readyJSON{}
	for _, a := range answers {
		if a.err != nil {
			out = append(out, readyJSON{Addr: a.addr, Reason: "unreachable"})
			continue
		}
		c := a.resp.GetCluster()
		ci := manager.ClusterInfo{ID: c.GetId(), Leader: c.GetLeader(), Role: c.GetRole(), Term: c.GetTerm(),
			Commit: c.GetCommit(), Applied: c.GetApplied(), Serving: c.GetServing()}
		if c.GetRole() == "leader" {
			voters, agree := 0, 0
			for _, p := range c.GetPeers() {
				if !p.GetVoter() {
					continue
				}
				voters++
				for _, b := range answers {
					bc := b.resp.GetCluster()
					if b.err == nil && bc.GetId() == p.GetId() && bc.GetLeader() == c.GetId() && bc.GetTerm() == c.GetTerm() {
						agree++
						break
					}
				}
			}
			ci.Quorum = agree > voters/2
		}
		ok, why := manager.Readiness(ci)
		out = append(out, readyJSON{Addr: a.addr, Ready: ok, Reason: why})
	}
	return out
}
