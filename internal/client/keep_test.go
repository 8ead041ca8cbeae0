package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/client"
	"github.com/leasehold/leasehold/internal/client/clienttest"
	"github.com/leasehold/leasehold/internal/testwait"
	"github.com/leasehold/leasehold/internal/wire"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// TestMain lets the tests that wait on a silent or muted replica wait side
// by side (internal/testwait).
func TestMain(m *testing.M) {
	testwait.Parallel()
	goleak.VerifyTestMain(m)
}

// guard bounds every wait for something to happen over the loopback: a
// failure guard, not a pace.
const guard = 10 * time.Second

// TestNotLeaderCarriesTheHint: a refusal made with NotLeader reaches the
// client as Unavailable with the leader's address in the trailer and the
// message, and LeaderHint finds it; with no leader known there is no hint.
func TestNotLeaderCarriesTheHint(t *testing.T) {
	g := clienttest.Start(t, 2)
	conn, err := client.Dial(g.Member(0).Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	refusal := func() (error, metadata.MD) {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		stream, err := pb.NewLeasesClient(conn).Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		return err, stream.Trailer()
	}

	g.Lead(1)
	err, trailer := refusal()
	leader := g.Member(1).Addr
	if st := status.Convert(err); st.Code() != codes.Unavailable ||
		st.Message() != "leasehold: manager is not the leader (leader at "+leader+")" {
		t.Errorf("refusal: %v", err)
	}
	if got := trailer.Get(client.LeaderKey); !slices.Equal(got, []string{leader}) {
		t.Errorf("trailer %s = %q, want %q", client.LeaderKey, got, leader)
	}
	if got := client.LeaderHint(err, trailer); got != leader {
		t.Errorf("LeaderHint = %q, want %q", got, leader)
	}
	if !client.IsNotLeader(err) {
		t.Errorf("IsNotLeader(%v) = false", err)
	}

	g.Lead(-1)
	err, trailer = refusal()
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "leasehold: manager is not the leader (leader unknown)" {
		t.Errorf("refusal with no leader: %v", err)
	}
	if got := client.LeaderHint(err, trailer); got != "" || !client.IsNotLeader(err) {
		t.Errorf("no leader: LeaderHint = %q, IsNotLeader %v; want \"\", true", got, client.IsNotLeader(err))
	}
}

func TestLeaderHintOnlyFromARefusal(t *testing.T) {
	md := metadata.Pairs(client.LeaderKey, "10.0.0.2:7400")
	for _, tc := range []struct {
		err     error
		trailer metadata.MD
		want    string
	}{
		{nil, md, ""},
		{fmt.Errorf("EOF"), md, ""},
		{status.Error(codes.NotFound, "leasehold: unknown namespace"), md, ""},
		{status.Error(codes.Unavailable, "connection refused"), nil, ""},
		{status.Error(codes.Unavailable, "anything"), md, "10.0.0.2:7400"},
		// A trailer lost on the way: the message still names the leader.
		{status.Error(codes.Unavailable, "leasehold: manager is not the leader (leader at 10.0.0.3:7400)"), nil, "10.0.0.3:7400"},
		{status.Error(codes.Unavailable, "leasehold: manager is not the leader (leader unknown)"), nil, ""},
	} {
		if got := client.LeaderHint(tc.err, tc.trailer); got != tc.want {
			t.Errorf("LeaderHint(%v, %v) = %q, want %q", tc.err, tc.trailer, got, tc.want)
		}
	}
}

// keeper runs Keep on a lease stream to a list of addresses and records
// what it does: every stream opened (by address) and every backoff wait.
type keeper struct {
	m      *client.Managers
	sendq  chan *pb.LeaseRequest
	recv   chan *protocol.LeaseResponse
	cancel context.CancelFunc
	done   chan struct{}
	log    syncBuffer
	seq    uint64

	mu     sync.Mutex
	events []string // "open ADDR" and "pause"
}

// startKeep runs Keep, with first (if any) queued to send. pause, if set,
// replaces the backoff wait (it is recorded either way); returning false
// stops Keep.
func startKeep(t *testing.T, addrs []string, pause func(time.Duration) bool, first ...*pb.LeaseRequest) *keeper {
	t.Helper()
	return startKeepWith(t, addrs, nil, pause, nil, first...)
}

// startKeepLive is startKeep with an answer deadline of wait, and relays.
func startKeepLive(t *testing.T, addrs []string, wait time.Duration, relay bool) *keeper {
	t.Helper()
	return startKeepWith(t, addrs, nil, nil, func(m *client.Managers) {
		m.Liveness(func() time.Duration { return wait }, relay)
	})
}

func startKeepWith(t *testing.T, addrs []string, opts []grpc.DialOption, pause func(time.Duration) bool, setup func(*client.Managers), first ...*pb.LeaseRequest) *keeper {
	t.Helper()
	m, err := client.NewManagers(addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(m)
	}
	k := &keeper{m: m, sendq: make(chan *pb.LeaseRequest, 1), recv: make(chan *protocol.LeaseResponse, 16), done: make(chan struct{})}
	m.SetPause(func(ctx context.Context, d time.Duration) bool {
		k.record("pause")
		if pause != nil {
			return pause(d)
		}
		return client.Sleep(ctx, d)
	})
	for _, req := range first {
		k.sendq <- req
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	log := slog.New(slog.NewTextHandler(&k.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() {
		defer close(k.done)
		client.Keep(ctx, log, "lease", m,
			func(ctx context.Context, cc grpc.ClientConnInterface) (client.Stream[pb.LeaseRequest, pb.LeaseResponse], error) {
				k.record("open " + cc.(*grpc.ClientConn).Target())
				return pb.NewLeasesClient(cc).Session(ctx)
			}, k.sendq, wire.LeaseResponseFromPB, k.recv)
	}()
	t.Cleanup(func() { k.stop(); _ = m.Close() })
	return k
}

func (k *keeper) record(e string) {
	k.mu.Lock()
	k.events = append(k.events, e)
	k.mu.Unlock()
}

// since returns the events from the i-th on.
func (k *keeper) since(i int) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.events[min(i, len(k.events)):])
}

func (k *keeper) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.events)
}

func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

// answered offers lease requests until one of them is answered: Keep
// sends a request lost on a stream that a follower refused again on the
// next, but a request may still be lost on the way (a stream refused as it
// is sent). One is offered at a time, another only after a pause longer
// than a loopback answer takes, so that answers to the requests offered do
// not keep arriving after this returns: a late answer, arriving after the
// test's next request, would count as the stream's word on that one. And
// answers to requests an earlier call offered do not count.
func (k *keeper) answered(t *testing.T) {
	t.Helper()
	first := k.seq + 1
	deadline := time.After(guard)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		k.seq++
		req := wire.LeaseRequestToPB(&protocol.LeaseRequest{Namespace: "default", Owner: "o", Addr: "127.0.0.1:1", Incarnation: 1, Seq: k.seq})
		select {
		case k.sendq <- req:
		default:
		}
		select {
		case resp := <-k.recv:
			if resp.AckSeq >= first {
				return
			}
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no answer within %s; events %q; log:\n%s", guard, k.since(0), k.log.String())
		}
	}
}

// ask sends one lease request and waits for its answer, for at most guard;
// answers to earlier requests are passed over.
func (k *keeper) ask(t *testing.T) {
	t.Helper()
	k.seq++
	k.sendq <- wire.LeaseRequestToPB(&protocol.LeaseRequest{Namespace: "default", Owner: "o", Addr: "127.0.0.1:1", Incarnation: 1, Seq: k.seq})
	deadline := time.After(guard)
	for {
		select {
		case resp := <-k.recv:
			if resp.AckSeq >= k.seq {
				return
			}
		case <-deadline:
			t.Fatalf("no answer within %s; events %q; log:\n%s", guard, k.since(0), k.log.String())
		}
	}
}

// answeredWithin sends one lease request and reports whether it is
// answered within d; answers to earlier requests are passed over.
func (k *keeper) answeredWithin(d time.Duration) bool {
	k.seq++
	k.sendq <- wire.LeaseRequestToPB(&protocol.LeaseRequest{Namespace: "default", Owner: "o", Addr: "127.0.0.1:1", Incarnation: 1, Seq: k.seq})
	deadline := time.After(d)
	for {
		select {
		case resp := <-k.recv:
			if resp.AckSeq >= k.seq {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// closedAddr returns a loopback address on which nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func opens(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, "open "+a)
	}
	return out
}

// TestKeepFollowsHintAtOnce: a follower's refusal sends the stream to the
// leader it names, at once, though the leader is not in the list; the
// switch is logged once, at Info.
func TestKeepFollowsHintAtOnce(t *testing.T) {
	g := clienttest.Start(t, 2)
	g.Lead(1)
	follower, leader := g.Member(0), g.Member(1)
	k := startKeep(t, []string{follower.Addr}, nil)
	k.answered(t)
	if got, want := k.since(0), opens(follower.Addr, leader.Addr); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q (no wait)", got, want)
	}
	if follower.Refused() != 1 || leader.Sessions() != 1 {
		t.Errorf("follower refused %d streams, leader served %d; want 1 and 1", follower.Refused(), leader.Sessions())
	}
	if cur := k.m.Current(); cur != leader.Addr {
		t.Errorf("Current() = %q, want %q", cur, leader.Addr)
	}
	k.answered(t)
	if n := strings.Count(k.log.String(), "following leader at "+leader.Addr); n != 1 {
		t.Errorf("%d log lines announce the leader, want 1:\n%s", n, k.log.String())
	}
	if strings.Contains(k.log.String(), "level=WARN") {
		t.Errorf("a refusal with a hint logged a warning:\n%s", k.log.String())
	}
}

// TestKeepResendsWhatARefusalLost: a message sent on a stream that a
// follower refused reaches the leader, once, without being queued again.
func TestKeepResendsWhatARefusalLost(t *testing.T) {
	g := clienttest.Start(t, 2)
	g.Lead(1)
	req := wire.LeaseRequestToPB(&protocol.LeaseRequest{Namespace: "default", Owner: "o", Addr: "127.0.0.1:1", Incarnation: 1, Seq: 1})
	k := startKeep(t, []string{g.Member(0).Addr}, nil, req)
	select {
	case resp := <-k.recv:
		if resp.AckSeq != 1 {
			t.Errorf("answer acknowledges %d, want 1", resp.AckSeq)
		}
	case <-time.After(guard):
		t.Fatalf("no answer within %s; events %q; log:\n%s", guard, k.since(0), k.log.String())
	}
	if g.Member(0).Refused() != 1 || g.Member(1).Answered() != 1 {
		t.Errorf("the follower refused %d streams, the leader answered %d messages; want 1 and 1",
			g.Member(0).Refused(), g.Member(1).Answered())
	}
}

// TestKeepRotatesWithoutWaiting: down replicas are skipped at once until
// one serves; when every replica fails, Keep waits after each full round.
func TestKeepRotatesWithoutWaiting(t *testing.T) {
	g := clienttest.Start(t, 1)
	g.Lead(0)
	down1, down2 := closedAddr(t), closedAddr(t)
	k := startKeep(t, []string{down1, down2, g.Member(0).Addr}, nil)
	k.answered(t)
	if got, want := k.since(0), opens(down1, down2, g.Member(0).Addr); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}

	down3 := closedAddr(t)
	stopped := make(chan struct{})
	pauses := 0
	all := startKeep(t, []string{down1, down2, down3}, func(d time.Duration) bool {
		if d <= 0 || d > 2*time.Second {
			t.Errorf("waited %s, want within (0, 2s]", d)
		}
		if pauses++; pauses == 3 {
			close(stopped)
			return false
		}
		return true
	})
	select {
	case <-stopped:
	case <-time.After(guard):
		t.Fatalf("no third wait within %s: %q", guard, all.since(0))
	}
	<-all.done
	round := append(opens(down1, down2, down3), "pause")
	want := slices.Concat(round, round, round)
	if got := all.since(0); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if n := strings.Count(all.log.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for one outage, want 1:\n%s", n, all.log.String())
	}
}

// TestKeepBoundsHops: replicas that name each other as the leader (one
// stale) never make Keep spin: it waits after a bounded number of hops.
func TestKeepBoundsHops(t *testing.T) {
	g := clienttest.Start(t, 2)
	a, b := g.Member(0).Addr, g.Member(1).Addr
	g.Refer(0, b)
	g.Refer(1, a)
	paused := make(chan struct{})
	k := startKeep(t, []string{a}, func(time.Duration) bool { close(paused); return false })
	select {
	case <-paused:
	case <-time.After(guard):
		t.Fatalf("no wait within %s: %q", guard, k.since(0))
	}
	<-k.done
	if got, want := k.since(0), append(opens(a, b, a), "pause"); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestKeepFollowsLeaderChanges: a stream follows the leader as it moves:
// when the leader steps down and names the next, at once; when it crashes,
// through the list to a follower that names the new leader; and to a
// replica that was down and comes back as the leader, without waiting for
// gRPC's reconnection backoff.
func TestKeepFollowsLeaderChanges(t *testing.T) {
	testwait.Side(t)
	g := clienttest.Start(t, 3)
	m1, m2 := g.Member(1), g.Member(2)
	g.Lead(0)
	k := startKeep(t, g.Addrs(), nil)
	k.answered(t)

	// m0 steps down for m1.
	i := k.count()
	g.Lead(1)
	k.answered(t)
	if got, want := k.since(i), opens(m1.Addr); !slices.Equal(got, want) {
		t.Errorf("after a step-down: events %q, want %q", got, want)
	}

	// m1 crashes and m2 is elected: the stream tries m2 next, which serves.
	i = k.count()
	g.Crash(1, 2)
	k.answered(t)
	if got, want := k.since(i), opens(m2.Addr); !slices.Equal(got, want) {
		t.Errorf("after a crash: events %q, want %q", got, want)
	}
	if k.m.Current() != m2.Addr {
		t.Errorf("Current() = %q, want %q", k.m.Current(), m2.Addr)
	}

	// m1 comes back and is elected again. Its connection failed while it
	// was down, so gRPC waits before the next attempt and a stream opened
	// on it would fail at once; Keep connects anew.
	cc, err := k.m.Conn(m1.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for s := cc.GetState(); s != connectivity.TransientFailure; s = cc.GetState() {
		cc.Connect()
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection to the crashed m1 stays %s", s)
		}
	}
	m1.Restart()
	served := m1.Sessions()
	i = k.count()
	g.Lead(1)
	k.answered(t)
	if got, want := k.since(i), opens(m1.Addr); !slices.Equal(got, want) {
		t.Errorf("after a restart: events %q, want %q", got, want)
	}
	if m1.Sessions() != served+1 {
		t.Errorf("m1 served %d streams after its restart, want 1", m1.Sessions()-served)
	}
	if n := strings.Count(k.log.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1 (the crash):\n%s", n, k.log.String())
	}
}

// TestKeepSkipsAHungReplica: a replica whose port accepts connections but
// never answers (a hung process; a host that is down costs the same) holds
// the stream up for a bounded time only, and the next one serves.
func TestKeepSkipsAHungReplica(t *testing.T) {
	testwait.Side(t)
	hung, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel completes the handshake, nobody speaks
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	g := clienttest.Start(t, 1)
	g.Lead(0)
	start := time.Now()
	k := startKeep(t, []string{hung.Addr().String(), g.Member(0).Addr}, nil)
	k.answered(t)
	if got, want := k.since(0), opens(g.Member(0).Addr); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the hung replica held the stream up for %s", d)
	}
	if !strings.Contains(k.log.String(), "no connection to "+hung.Addr().String()) {
		t.Errorf("the log does not name the hung replica:\n%s", k.log.String())
	}
}

// TestManagersCloseClosesEveryConn: each address gets one connection, the
// hinted ones included, and Close closes them all.
func TestManagersCloseClosesEveryConn(t *testing.T) {
	m, err := client.NewManagers([]string{"127.0.0.1:1", "127.0.0.1:2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := m.Conn("127.0.0.1:1")
	if again, _ := m.Conn("127.0.0.1:1"); again != a {
		t.Error("two connections to one address")
	}
	b, _ := m.Conn("127.0.0.1:3") // a hinted leader, not in the list
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*grpc.ClientConn{a, b} {
		if s := c.GetState().String(); s != "SHUTDOWN" {
			t.Errorf("%s after Close: %s", c.Target(), s)
		}
	}
	if _, err := m.Conn("127.0.0.1:1"); err == nil {
		t.Error("Conn after Close succeeded")
	}
}

// syncBuffer is a bytes.Buffer safe for a logger to write while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestKeepCapsBackoff: with CapBackoff, the wait after a round of failures
// never exceeds the cap (fast timings: back soon after a new leader).
func TestKeepCapsBackoff(t *testing.T) {
	addrs := []string{closedAddr(t), closedAddr(t)}
	m, err := client.NewManagers(addrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.CapBackoff(100 * time.Millisecond)
	var waits []time.Duration
	m.SetPause(func(_ context.Context, d time.Duration) bool {
		waits = append(waits, d)
		return len(waits) < 8
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	client.Keep(context.Background(), log, "lease", m,
		func(ctx context.Context, cc grpc.ClientConnInterface) (client.Stream[pb.LeaseRequest, pb.LeaseResponse], error) {
			return pb.NewLeasesClient(cc).Session(ctx)
		}, make(chan *pb.LeaseRequest), wire.LeaseResponseFromPB, make(chan *protocol.LeaseResponse, 1))
	if len(waits) != 8 {
		t.Fatalf("%d waits, want 8", len(waits))
	}
	for i, d := range waits {
		if d <= 0 || d > 100*time.Millisecond {
			t.Fatalf("wait %d was %s, want within (0, 100ms]: %v", i, d, waits)
		}
	}
}

// answerWait is the answer deadline of the liveness tests: long enough that
// a loopback answer never misses it, short enough to keep them quick.
const answerWait = 200 * time.Millisecond

// TestKeepLeavesASilentLeader: the leader stalls with its connection open
// (a stopped process, a proxy that stopped forwarding) and another replica
// takes over. A request that goes unanswered for the answer deadline moves
// the stream on, to the next replica, within the deadline and a few round
// trips, and the request is sent again there at once; nothing waits for
// the connection to break or for keepalive. Without the deadline the
// stream stays on the silent leader.
func TestKeepLeavesASilentLeader(t *testing.T) {
	testwait.Side(t)
	g := clienttest.Start(t, 2)
	g.Lead(0)
	k := startKeepLive(t, g.Addrs(), answerWait, false)
	k.answered(t)
	m0, m1 := g.Member(0), g.Member(1)
	m0.Mute(true)
	g.Lead(1)
	i := k.count()
	start := time.Now()
	k.ask(t)
	took := time.Since(start)
	if got, want := k.since(i), opens(m1.Addr); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if took < answerWait || took > answerWait+3*time.Second {
		t.Errorf("the answer came %s after the request, want within [%s, %s]", took, answerWait, answerWait+3*time.Second)
	}
	if !strings.Contains(k.log.String(), "no answer from "+m0.Addr+" within "+answerWait.String()) {
		t.Errorf("the log does not say the leader went silent:\n%s", k.log.String())
	}

	// The same without a deadline: nothing moves the stream.
	g2 := clienttest.Start(t, 2)
	g2.Lead(0)
	k2 := startKeep(t, g2.Addrs(), nil)
	k2.answered(t)
	g2.Member(0).Mute(true)
	g2.Lead(1)
	i = k2.count()
	if k2.answeredWithin(5 * answerWait) {
		t.Errorf("without a deadline the stream moved on: events %q", k2.since(i))
	}
}

// TestKeepRelaysAroundAnUnreachableLeader: the leader still leads (its
// followers reach it) but this client's stream to it gets no answer. The
// follower it tries next refuses naming that leader; rather than going back
// to it, Keep asks the follower to relay, and the relayed stream serves.
// Without relays the client goes round the list and never renews.
func TestKeepRelaysAroundAnUnreachableLeader(t *testing.T) {
	testwait.Side(t)
	g := clienttest.Start(t, 3)
	g.Lead(0)
	k := startKeepLive(t, g.Addrs(), answerWait, true)
	k.answered(t)
	m0, m1 := g.Member(0), g.Member(1)
	m0.Mute(true) // cut off from the client, still the leader
	i := k.count()
	start := time.Now()
	k.ask(t)
	took := time.Since(start)
	if got, want := k.since(i), opens(m1.Addr, m1.Addr); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q (refused, then relayed)", got, want)
	}
	if m1.Relayed() != 1 {
		t.Errorf("m1 relayed %d streams, want 1", m1.Relayed())
	}
	if took > answerWait+3*time.Second {
		t.Errorf("the relayed answer came %s after the request", took)
	}
	if !strings.Contains(k.log.String(), "asking "+m1.Addr+" to relay") {
		t.Errorf("the log does not mention the relay:\n%s", k.log.String())
	}
	// The relayed stream stays: later requests are answered on it.
	i = k.count()
	for range 5 {
		k.ask(t)
	}
	if got := k.since(i); len(got) != 0 {
		t.Errorf("the relayed stream was left: events %q", got)
	}

	// The leader is reachable again: after a while the relayed stream ends,
	// just after an answer, and the client goes back to the leader.
	m0.Mute(false)
	served := m0.Sessions()
	i = k.count()
	deadline := time.Now().Add(guard)
	for m0.Sessions() == served && time.Now().Before(deadline) {
		k.ask(t)
		time.Sleep(answerWait / 4)
	}
	k.ask(t)
	if got, want := k.since(i), opens(m0.Addr); !slices.Equal(got, want) {
		t.Errorf("after the relay: events %q, want %q", got, want)
	}
	if !strings.Contains(k.log.String(), "trying the leader at "+m0.Addr+" directly again") {
		t.Errorf("the log does not say the client went back to the leader:\n%s", k.log.String())
	}

	// Without relays: round the list, never back to a renewal.
	g2 := clienttest.Start(t, 3)
	g2.Lead(0)
	k2 := startKeepLive(t, g2.Addrs(), answerWait, false)
	k2.answered(t)
	g2.Member(0).Mute(true)
	if k2.answeredWithin(5 * answerWait) {
		t.Errorf("answered without a relay: events %q", k2.since(0))
	}
}
