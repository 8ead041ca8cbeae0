package lookup_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/client/clienttest"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
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

// TestLookupFollowsTheLeader runs a Lookup against a fake replicated
// Manager of three replicas, given a down address and a follower's. It gets
// its copy from the leader the follower names, and keeps it in sync as the
// leader crashes, another is elected, and the crashed one comes back to
// lead again.
func TestLookupFollowsTheLeader(t *testing.T) {
	g := clienttest.Start(t, 3)
	m0, m1, m2 := g.Member(0), g.Member(1), g.Member(2)
	g.Lead(1)
	g.SetRoute("kv-1", "127.0.0.1:8001")
	ctx := context.Background()
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Insecure: true, Manager: closedAddr(t), Managers: []string{m0.Addr}, Timing: protocol.Fast()}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := l.WaitSynced(wctx); err != nil {
		t.Fatal(err)
	}
	key := keyspace.KeyOf("alice")
	if r, ok := l.Lookup(key); !ok || r.Owner != "kv-1" {
		t.Errorf("Lookup = %+v, %v; want kv-1", r, ok)
	}
	if m0.Refused() == 0 || m1.Syncs() != 1 || m2.Syncs() != 0 {
		t.Errorf("m0 refused %d streams, m1 served %d, m2 %d; want some, 1, 0", m0.Refused(), m1.Syncs(), m2.Syncs())
	}
	routes := func(owner string) func() bool {
		return func() bool { r, ok := l.Lookup(key); return ok && r.Owner == owner }
	}

	// m1 crashes, m2 is elected and the table changes.
	g.Crash(1, 2)
	g.SetRoute("kv-2", "127.0.0.1:8002")
	waitFor(t, "route to kv-2", routes("kv-2"))
	if m2.Syncs() == 0 {
		t.Error("m2 served no sync stream")
	}

	// m1 comes back and leads again; the table changes again.
	m1.Restart()
	before := m1.Syncs()
	g.Lead(1)
	g.SetRoute("kv-3", "127.0.0.1:8003")
	waitFor(t, "route to kv-3", routes("kv-3"))
	waitFor(t, "a sync stream served by the restarted m1", func() bool { return m1.Syncs() > before })
}

// TestLookupConfigManagerList: a bad entry fails New, named; with no
// manager answering, WaitSynced names every address.
func TestLookupConfigManagerList(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  lookup.Config
		want string
	}{
		{lookup.Config{Connection: leasehold.Connection{Insecure: true, Manager: "10.0.0.1:7400, 10.0.0.2"}}, `lookup: Config.Manager: address "10.0.0.2" is not host:port`},
		{lookup.Config{Connection: leasehold.Connection{Insecure: true, Manager: ",", Managers: []string{"10.0.0.1:7400"}}}, `lookup: Config.Manager: an empty address in ","`},
		{lookup.Config{Connection: leasehold.Connection{Insecure: true, Managers: []string{" "}}}, `lookup: Config.Managers[0]: an empty address`},
		// Plaintext only when asked for, even to this machine.
		{lookup.Config{Connection: leasehold.Connection{Manager: "127.0.0.1:7400"}}, `set Config.TLS or Config.CertsDir for mutual TLS, or Config.Insecure: true`},
	} {
		l, err := lookup.New(ctx, tc.cfg)
		if err == nil {
			l.Close()
			t.Errorf("New(%+v) succeeded", tc.cfg)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}

	a, b := closedAddr(t), closedAddr(t)
	l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Insecure: true, Manager: a + "," + b + "," + a}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = l.WaitSynced(wctx)
	if want := "lookup: no answer from any manager at " + a + ", " + b + ": "; err == nil ||
		!strings.HasPrefix(err.Error(), want) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitSynced: %v, want %q…", err, want)
	}
}

// TestLookupAge: the copy's age stays below Quiet while the Manager
// answers, grows past it (Stale) while the Manager is stalled, and falls
// back at the first answer after.
func TestLookupAge(t *testing.T) {
	g := clienttest.Start(t, 1)
	g.Lead(0)
	g.SetRoute("kv-1", "127.0.0.1:8001")
	m := g.Member(0)
	m.Mute(true)
	tm := protocol.Fast()
	l, err := lookup.New(context.Background(), lookup.Config{Connection: leasehold.Connection{Insecure: true, Manager: m.Addr, Timing: tm}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if a := l.Age(); a.Synced || !a.Stale() || a.Quiet != tm.LookupQuiet() || a.SyncTimeout != tm.SyncTimeout {
		t.Fatalf("before the first answer: %+v, want not synced, stale, Quiet %s, SyncTimeout %s", a, tm.LookupQuiet(), tm.SyncTimeout)
	}
	m.Mute(false)
	waitFor(t, "a fresh copy", func() bool { a := l.Age(); return a.Synced && !a.Stale() })
	if a := l.Age(); a.Age > a.Quiet || a.Age < 0 {
		t.Fatalf("in touch: %+v", a)
	}
	// Stalled as a stopped process: no answer, no refusal.
	m.Mute(true)
	stalled := time.Now()
	waitFor(t, "a stale copy", func() bool { return l.Age().Stale() })
	a := l.Age()
	if !a.Synced || a.Age <= a.Quiet {
		t.Fatalf("stalled: %+v, want synced and older than Quiet", a)
	}
	if took := time.Since(stalled); took > a.Quiet+time.Second {
		t.Errorf("stale %s after the stall, want within Quiet (%s) of the last answer", took, a.Quiet)
	}
	if r, ok := l.Lookup(keyspace.KeyOf("alice")); !ok || r.Owner != "kv-1" {
		t.Errorf("a stale copy still routes: Lookup = %+v, %v; want kv-1", r, ok)
	}
	m.Mute(false)
	waitFor(t, "a fresh copy again", func() bool { return !l.Age().Stale() })
}
