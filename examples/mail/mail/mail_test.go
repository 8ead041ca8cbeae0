package mail_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	stdmaps "maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/examples/mail/mail"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/manager"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startManager(tb testing.TB) string { return startManagerServer(tb).addr }

type managerServer struct {
	addr string
	srv  *manager.Server
}

func startManagerServer(tb testing.TB) managerServer {
	tb.Helper()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("manager: %v", err)
		}
	})
	return managerServer{lis.Addr().String(), srv}
}

// cluster is n mail nodes' addresses and data directories.
type cluster struct {
	mgr   string
	nodes map[string]string
	dirs  map[string]string
}

func newCluster(tb testing.TB, n int) *cluster {
	c := &cluster{mgr: startManager(tb), nodes: map[string]string{}, dirs: map[string]string{}}
	for i := 1; i <= n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		id := fmt.Sprint("mail-", i)
		c.nodes[id], c.dirs[id] = l.Addr().String(), tb.TempDir()
		l.Close()
	}
	return c
}

func (c *cluster) start(tb testing.TB, id string) *mail.Server {
	tb.Helper()
	s, err := mail.NewServer(context.Background(), mail.ServerConfig{Insecure: true, Manager: c.mgr, ID: id, Listen: c.nodes[id],
		DataDir: c.dirs[id], Nodes: c.nodes, Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newClient(tb testing.TB, mgr string) *mail.Client {
	tb.Helper()
	cl, err := mail.NewClient(context.Background(), mail.ClientConfig{Insecure: true, Manager: mgr, Timing: protocol.Fast()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// TestDeliverReadAfterOwnerLeaves delivers 5 messages to each of 20 users
// over three nodes, checks the spread bound, closes one node (its ranges
// move; their new Owners rebuild the mail maps from the disks), and reads
// every message back, once, from the two left plus the closed node's
// disk, reopened.
func TestDeliverReadAfterOwnerLeaves(t *testing.T) {
	testwait.Side(t)
	c := newCluster(t, 3)
	a := c.start(t, "mail-1")
	c.start(t, "mail-2")
	c.start(t, "mail-3")
	cl := newClient(t, c.mgr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	want := map[string][]string{}
	for i := range 5 {
		for u := range 20 {
			user := fmt.Sprint("user-", u)
			id, err := cl.Deliver(ctx, user, fmt.Sprint("message ", i))
			if err != nil {
				t.Fatal(err)
			}
			want[user] = append(want[user], id)
		}
	}
	check := func(when string) {
		t.Helper()
		for user, ids := range want {
			// A read names the nodes that failed to answer (Incomplete): a
			// node that was down (mail-1, until the Owners rebuilding
			// its old ranges ask it again, every half second) or did not
			// answer within its timeout under load. Such a read is asked
			// again until the test's deadline; a node merely slow to
			// answer the rebuild is waited for by the server itself.
			box, err := cl.Read(ctx, user)
			for err == nil && len(box.Incomplete) != 0 && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				box, err = cl.Read(ctx, user)
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range box.Messages {
				got = append(got, m.ID)
			}
			if !slices.Equal(got, ids) || len(box.Incomplete) != 0 {
				t.Fatalf("%s: %s reads %v (incomplete %v), want %v in order", when, user, got, box.Incomplete, ids)
			}
		}
	}
	check("three nodes")
	// The spread: no user's mail is on more than Spread nodes while every
	// node answers.
	for user := range want {
		on := 0
		for _, dir := range c.dirs {
			if _, err := os.Stat(filepath.Join(dir, hex.EncodeToString([]byte(user))+".mbox")); err == nil {
				on++
			}
		}
		if on > mail.Spread {
			t.Errorf("%s's mail is on %d nodes, more than the spread %d", user, on, mail.Spread)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.start(t, "mail-1") // its disk back, as a node; its Owner rejoins
	check("after mail-1 left and came back")
}

// BenchmarkRebuild measures the rebuild of the mail maps against the
// users per range. Three nodes start on disks holding N users' fragments
// (each user's on one node), and settle with the key space (192 ranges) shared among
// them; then mail-3 is drained, and its ranges move to the other two,
// which rebuild their mail maps from the three disks. The figure is the
// median and the slowest time from a moved range's grant until every
// node's users in it are known.
func BenchmarkRebuild(b *testing.B) {
	for _, users := range benchUsers {
		b.Run(fmt.Sprintf("users-per-range=%d", users/192), func(b *testing.B) {
			for b.Loop() {
				benchRebuild(b, users)
			}
		})
	}
}

var benchUsers = []int{1920, 19200, 96000, 192000}

func benchRebuild(b *testing.B, users int) {
	mgr := startManagerServer(b)
	c := newCluster(b, 3)
	c.mgr = mgr.addr
	line, _ := json.Marshal(mail.Message{ID: "m", Body: "hello", At: time.Now()})
	dirs := slices.Sorted(stdmaps.Values(c.dirs))
	for u := range users { // each user's fragment on one node
		os.WriteFile(filepath.Join(dirs[u%3], hex.EncodeToString(fmt.Appendf(nil, "user-%d", u))+".mbox"), append(line, '\n'), 0o644)
	}
	srvs := map[string]*mail.Server{}
	for id := range c.nodes {
		srvs[id] = c.start(b, id)
	}
	// rebuilt waits until the ranges held by ids cover the key space and
	// are rebuilt, and returns how long those begun after t took.
	rebuilt := func(t time.Time, ids ...string) []time.Duration {
		share := 0.9 / float64(len(ids)) // each holds its share: the moves are over
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var took []time.Duration
			size, done := 0.0, true
			for _, id := range ids {
				mine := 0.0
				for _, r := range srvs[id].Rebuilds() {
					mine += r.Range.Size()
					done = done && r.Took > 0
					if r.Began.After(t) {
						took = append(took, r.Took)
					}
				}
				size += mine
				done = done && mine/math.Exp2(64) > share
			}
			if math.Abs(size/math.Exp2(64)-1) < 1e-9 && done {
				return took
			}
		}
		for _, id := range ids {
			rs := srvs[id].Rebuilds()
			open := 0
			for _, r := range rs {
				if r.Took == 0 {
					open++
				}
			}
			b.Logf("%s: %d ranges, %d not rebuilt", id, len(rs), open)
		}
		b.Fatalf("the key space was not rebuilt within a minute")
		return nil
	}
	rebuilt(time.Time{}, "mail-1", "mail-2", "mail-3")
	at := time.Now()
	cc, err := grpc.NewClient(mgr.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	if _, err := pb.NewAdminClient(cc).Drain(context.Background(), &pb.DrainRequest{Namespace: "default", Owner: "mail-3"}); err != nil {
		b.Fatal(err)
	}
	took := rebuilt(at, "mail-1", "mail-2")
	slices.Sort(took)
	if len(took) == 0 {
		b.Fatal("no range moved")
	}
	b.ReportMetric(float64(len(took)), "ranges")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
}
