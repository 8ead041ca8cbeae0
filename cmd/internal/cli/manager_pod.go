package cli

import (
	"context"
	"errors"

	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/raftstore"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// podOptions are the manager's flags for running as a pod of a
// StatefulSet, where every replica gets the same arguments (docs/deploy.md).
type podOptions struct {
	podName      string // --id-from-pod: NAME-ORDINAL
	joinUnlisted bool   // --join-unlisted
}

func (p *podOptions) addPodFlags(f *pflag.FlagSet) {
	f.StringVar(&p.podName, "id-from-pod", "", "take --id from a StatefulSet pod's `NAME` (NAME-ORDINAL): the ordinal plus one, so the pod leasehold-manager-0 is replica 1 on every start")
	f.BoolVar(&p.joinUnlisted, "join-unlisted", false, "start as --join when --peers does not list this replica's ID: the same arguments found the group with the replicas --peers lists and add later ones (a StatefulSet scaled up)")
}

// podID is the replica ID of a StatefulSet pod: its ordinal plus one.
func podID(name string) (uint64, error) {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.ParseUint(name[i+1:], 10, 64)
	if i < 0 || err != nil || n == ^uint64(0) {
		return 0, usagef("--id-from-pod %q is not a StatefulSet pod's name, NAME-ORDINAL", name)
	}
	return n + 1, nil
}

// applyPod sets o.id and o.join from the pod flags, before config reads
// them.
func (o *managerOptions) applyPod() error {
	if o.podName != "" {
		if o.set("id") {
			return usagef("--id and --id-from-pod both name this replica: give one")
		}
		id, err := podID(o.podName)
		if err != nil {
			return err
		}
		o.id = id
	}
	if o.joinUnlisted && !o.join {
		peers, err := parsePeers(o.peers)
		if err != nil {
			return err
		}
		listed := false
		for _, p := range peers {
			listed = listed || p.ID == o.id
		}
		o.join = len(peers) > 0 && !listed
	}
	return nil
}

// forgetfulTimeout bounds how long a replica starting with an empty data
// directory asks the others whether they know it.
const forgetfulTimeout = 3 * time.Second

// refuseForgetful refuses to found a group with an empty data directory
// under an ID the running group has heard from: a lost disk (a
// StatefulSet's PVC deleted or lost) would otherwise come back as a new
// replica that has forgotten the votes and entries it acknowledged, so
// an entry committed with its acknowledgement could be lost in the next
// election. It asks every replica --peers names (and those their answers
// name) for its status; the leader's says how far each member's log is
// known to reach. Only the leader knows that, and only since it took
// over: an empty replica that a new leader has not heard from yet is not
// caught (docs/deploy.md). Nobody answering is a new group, or one that
// is down: the replica then starts as its flags say.
func refuseForgetful(ctx context.Context, cfg manager.Config, log *slog.Logger) error {
	if cfg.DataDir == "" || cfg.Join || len(cfg.Peers) < 2 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, raftstore.FileName)); !errors.Is(err, os.ErrNotExist) {
		return nil // not empty (or unreadable: the store says why)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg.Certs != nil {
		opts = []grpc.DialOption{certs.DialOption(cfg.Certs)}
	}
	ctx, cancel := context.WithTimeout(ctx, forgetfulTimeout)
	defer cancel()
	var addrs []string
	for _, p := range cfg.Peers {
		if p.ID != cfg.ID {
			addrs = append(addrs, p.Addr)
		}
	}
	for _, a := range askReplicas(ctx, addrs, opts) {
		c := a.resp.GetCluster()
		if c.GetRole() != "leader" {
			continue
		}
		for _, p := range c.GetPeers() {
			if p.GetId() == cfg.ID && p.GetMatch() > 0 {
				return usagef("replica %d starts with an empty data directory (%s), but its group still has it as a member that has acknowledged the log up to index %d (says the leader, replica %d at %s): started empty under the same ID it would have forgotten the votes and entries it acknowledged, and could lose committed leases. "+
					"Remove it (leasehold cluster remove %d), then add it back with an empty data directory and --join (docs/operations.md, \"Replace a replica whose disk is lost\"; in Kubernetes, docs/deploy.md, \"A lost volume\")",
					cfg.ID, cfg.DataDir, p.GetMatch(), c.GetId(), a.addr, cfg.ID)
			}
		}
	}
	log.Info("empty data directory: no running group has heard from this replica", "id", cfg.ID)
	return nil
}

// askReplicas asks each address, and every replica the answers name, for
// its status, within ctx; the unreachable are left out.
func askReplicas(ctx context.Context, addrs []string, opts []grpc.DialOption) []replicaAnswer {
	asked := map[string]bool{}
	var out []replicaAnswer
	for len(addrs) > 0 {
		answers := make([]replicaAnswer, len(addrs))
		var wg sync.WaitGroup
		for i, addr := range addrs {
			asked[addr] = true
			wg.Go(func() {
				conn, err := client.Dial(addr, opts)
				if err != nil {
					answers[i] = replicaAnswer{addr: addr, err: err}
					return
				}
				defer conn.Close()
				resp, err := pb.NewAdminClient(conn).Status(ctx, &pb.StatusRequest{})
				answers[i] = replicaAnswer{addr: addr, resp: resp, err: err}
			})
		}
		wg.Wait()
		addrs = nil
		for _, a := range answers {
			if a.err != nil {
				continue
			}
			out = append(out, a)
			for _, p := range a.resp.GetCluster().GetPeers() {
				if addr := p.GetClientAddr(); addr != "" && !asked[addr] {
					asked[addr] = true
					addrs = append(addrs, addr)
				}
			}
		}
	}
	return out
}
