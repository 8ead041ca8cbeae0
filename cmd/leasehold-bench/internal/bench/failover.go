package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

func init() {
	scenarios["failover"] = scenario{
		about: "Manager failover: kill the leader of three replicas (real gRPC on 127.0.0.1, real data directories) and time the new leader's first answer; leases lost must be 0",
		run:   runFailover,
	}
}

type failoverPlan struct {
	owners           int
	rounds           int // per profile
	profiles         []string
	productionRounds int // fewer: each waits out a 15 s renewal
}

func failoverPlanFor(size Size) failoverPlan {
	if size == Smoke {
		return failoverPlan{owners: 2, rounds: 2, profiles: []string{"fast"}}
	}
	return failoverPlan{owners: 10, rounds: 10, profiles: []string{"fast", "production"}, productionRounds: 5}
}

// failoverRound is what one kill of the leader cost.
type failoverRound struct {
	leader, answer time.Duration // kill → a new leader took over; → an Owner's lease renewed by it
	lost           int           // leases an Owner held before and not after (must be 0)
}

func runFailover(ctx context.Context, o Options) (*Report, error) {
	p := failoverPlanFor(o.Size)
	fig := Figure{
		Name: "failover", Title: "Time from killing the Manager leader to the new leader's first answer",
		XLabel: "round", YLabel: "seconds", Points: true, LegendTop: true,
		Paper: "Centrifuge §2.1.1 keeps the Manager in a Paxos group with a standby (no failover time reported); PRS §4.4 discards all soft state on failover; Slicer's Assigner fails over in 17 s",
		Setup: "—",
		Ours:  fmt.Sprintf("3 Manager replicas, %d Owners and 1 Lookup in one process over gRPC on 127.0.0.1, data directories on local disk; %d rounds with fast timings and %d with production ones, each killing the current leader and restarting it as a follower", p.owners, p.rounds, p.productionRounds),
	}
	table := [][]string{{"timings", "rounds", "new leader p50", "new leader max", "first answer p50", "first answer max", "leases lost", "loss notifications"}}
	var measured []string
	for pi, prof := range p.profiles {
		tm, pp := protocol.Fast(), p
		if prof == "production" {
			tm, pp.rounds = protocol.Production(), p.productionRounds
		}
		rounds, losses, err := failoverRuns(ctx, tm, pp, func(done float64) {
			o.progress((float64(pi)+done)/float64(len(p.profiles)), prof)
		})
		if err != nil {
			return nil, err
		}
		var ls, as []float64
		lost := 0
		s := Series{Name: prof}
		for i, r := range rounds {
			ls = append(ls, r.leader.Seconds())
			as = append(as, r.answer.Seconds())
			lost += r.lost
			s.X = append(s.X, float64(i+1))
			s.Y = append(s.Y, r.answer.Seconds())
		}
		fig.Series = append(fig.Series, s)
		table = append(table, []string{prof, fmt.Sprint(len(rounds)),
			fmt.Sprintf("%.2f s", quantile(ls, 0.5)), fmt.Sprintf("%.2f s", slices.Max(ls)),
			fmt.Sprintf("%.2f s", quantile(as, 0.5)), fmt.Sprintf("%.2f s", slices.Max(as)),
			fmt.Sprint(lost), fmt.Sprint(losses)})
		measured = append(measured, fmt.Sprintf("%s timings: the new leader's first answer %.2f s after the kill (median, max %.2f s), %d leases lost, %d loss notifications",
			prof, quantile(as, 0.5), slices.Max(as), lost, losses))
	}
	fig.Measured = joinSentences(measured)
	return &Report{Figures: []Figure{fig}, Table: table, Notes: []string{
		"A kill stops the leader's gRPC server and Raft loop at once (the process's connections close, as with SIGKILL). " +
			"'new leader' is the kill → a replica reports itself leader; 'first answer' is the kill → an Owner's lease is extended by an answer of the new leader. " +
			"The election waits ten Raft heartbeats without a leader (randomised up to twenty): min(100 ms, Renew/20) each, 25 ms with fast timings and 100 ms in production."}}, nil
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// replicaSet is three Manager replicas on loopback TCP.
type replicaSet struct {
	tm    protocol.Timing
	addrs map[uint64]string
	dirs  map[uint64]string
	srv   map[uint64]*manager.Server
	stop  map[uint64]func()
}

func (rs *replicaSet) start(id uint64) error {
	var peers []manager.Peer
	for i := uint64(1); i <= 3; i++ {
		peers = append(peers, manager.Peer{ID: i, Addr: rs.addrs[i]})
	}
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: rs.tm, ID: id, Peers: peers, DataDir: rs.dirs[id]})
	if err != nil {
		return err
	}
	var lis net.Listener
	for range 50 { // the port may take a moment to be free again
		if lis, err = net.Listen("tcp", rs.addrs[id]); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis); close(done) }()
	rs.srv[id] = srv
	rs.stop[id] = func() { cancel(); <-done; delete(rs.stop, id) }
	return nil
}

func (rs *replicaSet) leader() uint64 {
	for id, s := range rs.srv {
		if rs.stop[id] != nil && s.Snapshot().Cluster.Role == "leader" && s.Snapshot().Replica.Takeovers > 0 {
			return id
		}
	}
	return 0
}

func (rs *replicaSet) close() {
	for _, stop := range rs.stop {
		stop()
	}
}

// waitFor polls cond every millisecond until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

func failoverRuns(ctx context.Context, tm protocol.Timing, p failoverPlan, progress func(float64)) ([]failoverRound, int, error) {
	rs := &replicaSet{tm: tm, addrs: map[uint64]string{}, dirs: map[uint64]string{}, srv: map[uint64]*manager.Server{}, stop: map[uint64]func(){}}
	defer rs.close()
	for id := uint64(1); id <= 3; id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, 0, err
		}
		rs.addrs[id] = l.Addr().String()
		l.Close()
		dir, err := os.MkdirTemp("", "leasehold-failover-")
		if err != nil {
			return nil, 0, err
		}
		defer os.RemoveAll(dir)
		rs.dirs[id] = dir
	}
	for id := uint64(1); id <= 3; id++ {
		if err := rs.start(id); err != nil {
			return nil, 0, err
		}
	}
	list := strings.Join([]string{rs.addrs[1], rs.addrs[2], rs.addrs[3]}, ",")
	var losses atomic.Int64
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Insecure: true, Manager: list, Timing: tm}, OnLoss: func(lookup.Loss) { losses.Add(1) }})
	if err != nil {
		return nil, 0, err
	}
	defer l.Close()
	var owners []*owner.Owner
	for i := range p.owners {
		ow, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{Insecure: true, Manager: list, Timing: tm}, ID: fmt.Sprintf("owner-%02d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 9000+i)})
		if err != nil {
			return nil, 0, err
		}
		defer ow.Close(context.Background())
		owners = append(owners, ow)
	}
	// A new group grants nothing for one ManagerLease; then every range is
	// held.
	full := func() bool {
		var held keyspace.RangeSet
		for _, ow := range owners {
			for _, le := range ow.Held() {
				held = held.Add(le.Range)
			}
		}
		return held.Complement().Empty()
	}
	if !waitFor(ctx, 2*tm.ManagerLease+4*tm.Renew+10*time.Second, full) {
		return nil, 0, fmt.Errorf("bench failover: the owners never held the whole key space")
	}
	// Owners joining one by one moved ranges between them (with loss
	// notifications); count only what the failovers cause.
	time.Sleep(2*tm.Renew + time.Second)
	losses.Store(0)
	var out []failoverRound
	for round := range p.rounds {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		progress(float64(round) / float64(p.rounds))
		old := rs.leader()
		if old == 0 {
			return nil, 0, fmt.Errorf("bench failover: round %d: no leader", round+1)
		}
		type held struct {
			r   keyspace.Range
			num owner.LeaseNum
		}
		var before []held
		var latest time.Time
		for _, ow := range owners {
			for _, le := range ow.Held() {
				before = append(before, held{le.Range, le.Num})
				if le.Expiry.After(latest) {
					latest = le.Expiry
				}
			}
		}
		killed := time.Now()
		rs.stop[old]()
		var r failoverRound
		waitFor(ctx, 30*time.Second, func() bool { return rs.leader() != 0 })
		r.leader = time.Since(killed)
		renewed := func() bool {
			for _, ow := range owners {
				for _, le := range ow.Held() {
					if le.Expiry.After(latest) {
						return true
					}
				}
			}
			return false
		}
		if !waitFor(ctx, tm.OwnerLease, renewed) {
			return nil, 0, fmt.Errorf("bench failover: round %d: no owner renewed within a lease of the kill", round+1)
		}
		r.answer = time.Since(killed)
		// Every lease held before is held after, with the same number, once
		// every owner has renewed with the new leader.
		time.Sleep(tm.Renew + time.Second)
		var after []held
		for _, ow := range owners {
			for _, le := range ow.Held() {
				after = append(after, held{le.Range, le.Num})
			}
		}
		for _, b := range before {
			if !slices.Contains(after, b) {
				r.lost++
			}
		}
		out = append(out, r)
		if err := rs.start(old); err != nil {
			return nil, 0, err
		}
		waitFor(ctx, 10*time.Second, func() bool {
			return rs.srv[old].Snapshot().Cluster.Role == "follower" && rs.srv[old].Snapshot().Cluster.Leader != 0
		})
		time.Sleep(time.Second)
	}
	return out, int(losses.Load()), nil
}
