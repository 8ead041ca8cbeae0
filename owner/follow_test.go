package owner_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/client/clienttest"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// guard bounds every wait for the fake Manager to answer: a failure guard,
// not a pace.
const guard = 10 * time.Second

// waitFor polls cond until it holds, failing the test after guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, guard)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedAddr returns a loopback address on which nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// TestOwnerFollowsTheLeader runs an Owner against a fake replicated
// Manager of three replicas and moves the leadership under it. The Owner is
// given only a follower's address: the follower refuses and names the
// leader, which grants the lease. When the leader crashes and another is
// elected, and when the crashed one comes back and leads again, the Owner
// follows, and its lease is renewed throughout: the same LeaseNum, never
// revoked.
func TestOwnerFollowsTheLeader(t *testing.T) {
	g := clienttest.Start(t, 3)
	m0, m1, m2 := g.Member(0), g.Member(1), g.Member(2)
	g.Lead(1)
	var mu sync.Mutex
	var revoked []keyspace.Range
	ctx := context.Background()
	o, err := owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{Insecure: true, Manager: m0.Addr, Timing: protocol.Fast()},
		ID:         "kv-1",
		Addr:       "127.0.0.1:8001",
		OnChange:   func(c owner.OwnershipChange) { mu.Lock(); revoked = append(revoked, c.Revoked...); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	key := keyspace.KeyOf("alice")
	var n owner.LeaseNum
	waitFor(t, "lease", func() bool {
		var ok bool
		n, ok = o.CheckLeaseNow(key)
		return ok
	})
	if m0.Refused() == 0 || m1.Sessions() != 1 || m2.Sessions() != 0 {
		t.Errorf("m0 refused %d streams, m1 served %d, m2 %d; want some, 1, 0", m0.Refused(), m1.Sessions(), m2.Sessions())
	}
	held := func(when string) {
		t.Helper()
		if got, ok := o.CheckLeaseNow(key); !ok || got != n || !o.CheckLeaseContinuous(key, n) {
			t.Errorf("%s: lease %v (held %v), want %v held without a gap", when, got, ok, n)
		}
	}

	// m1 crashes and m2 is elected. The Owner's only address is m0's,
	// which now names m2.
	g.Crash(1, 2)
	waitFor(t, "renewals from m2", func() bool { return m2.Answered() >= 3 })
	held("after the leader crashed")

	// m1 comes back and is elected again: m2 steps down naming it.
	m1.Restart()
	before := m1.Answered()
	g.Lead(1)
	waitFor(t, "renewals from the restarted m1", func() bool { return m1.Answered() >= before+3 })
	held("after the old leader came back")
	mu.Lock()
	if len(revoked) != 0 {
		t.Errorf("ranges revoked while the leader moved: %v", revoked)
	}
	mu.Unlock()

	// Close leaves through the leader, which acknowledges at once.
	cctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	start := time.Now()
	if err := o.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > clienttest.OwnerLease/2 {
		t.Errorf("Close took %s: the goodbye was not acknowledged", d)
	}
}

// TestOwnerConfigManagerList: Manager takes a comma-separated list and
// Managers more entries; a bad entry fails New, named.
func TestOwnerConfigManagerList(t *testing.T) {
	g := clienttest.Start(t, 2)
	g.Lead(1)
	ctx := context.Background()
	o, err := owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{
			Insecure: true,
			Manager:  closedAddr(t) + ", " + closedAddr(t),
			Managers: []string{g.Member(0).Addr},
			Timing:   protocol.Fast(),
		},
		ID:   "kv-1",
		Addr: "127.0.0.1:8001",
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lease", func() bool { _, ok := o.CheckLeaseNow(keyspace.KeyOf("alice")); return ok })
	cctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := o.Close(cctx); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		cfg  owner.Config
		want string
	}{
		{owner.Config{Connection: leasehold.Connection{Insecure: true}, ID: "kv-1", Addr: "a:1"}, "owner: Config.Manager (the Manager's address, or a comma-separated list of its replicas' addresses) is required"},
		{owner.Config{Connection: leasehold.Connection{Insecure: true, Manager: "10.0.0.1:7400,manager-2"}, ID: "kv-1", Addr: "a:1"}, `owner: Config.Manager: address "manager-2" is not host:port`},
		{owner.Config{Connection: leasehold.Connection{Insecure: true, Manager: "10.0.0.1:7400,,10.0.0.2:7400"}, ID: "kv-1", Addr: "a:1"}, `owner: Config.Manager: an empty address in "10.0.0.1:7400,,10.0.0.2:7400"`},
		{owner.Config{Connection: leasehold.Connection{Insecure: true, Managers: []string{"10.0.0.1:7400", "10.0.0.2:http"}}, ID: "kv-1", Addr: "a:1"}, `owner: Config.Managers[1]: address "10.0.0.2:http" is not host:port`},
		// Plaintext only when asked for, even to this machine.
		{owner.Config{Connection: leasehold.Connection{Manager: "127.0.0.1:7400"}, ID: "kv-1", Addr: "a:1"}, `owner: no TLS setting for the Manager at 127.0.0.1:7400: set Config.TLS or Config.CertsDir for mutual TLS, or Config.Insecure: true`},
	} {
		o, err := owner.New(ctx, tc.cfg)
		if err == nil {
			o.Close(ctx)
			t.Errorf("New(%+v) succeeded", tc.cfg)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
