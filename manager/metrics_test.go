package manager_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// metricNames are the collector's metrics, which the tests compare in full.
var metricNames = []string{
	"leasehold_epoch",
	"leasehold_owners", "leasehold_members", "leasehold_ranges", "leasehold_free_ranges", "leasehold_lookups",
	"leasehold_draining_owners", "leasehold_lsn",
	"leasehold_lease_requests_total", "leasehold_sync_requests_total", "leasehold_grants_total", "leasehold_recalls_total",
	"leasehold_releases_total", "leasehold_expiries_total", "leasehold_owner_restarts_total",
	"leasehold_races_dropped_total", "leasehold_stale_dropped_total",
	"leasehold_raft_is_leader", "leasehold_raft_leader_id", "leasehold_raft_term", "leasehold_raft_commit_index",
	"leasehold_raft_applied_index", "leasehold_raft_has_quorum", "leasehold_ready", "leasehold_raft_proposals_total",
	"leasehold_raft_snapshots_total", "leasehold_raft_takeovers_total", "leasehold_raft_dropped_answers_total",
	"leasehold_renewal_answer_seconds", "leasehold_propagation_seconds", "leasehold_loss_notifications_total",
}

// TestCollectorBeforeRun: before the loop's first step the collector has
// the epoch, zero counters, the Raft series and the empty histograms, and
// no namespaces and no gRPC series yet; it lints clean.
func TestCollectorBeforeRun(t *testing.T) {
	t.Parallel()
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast(), Epoch: 42})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Collector()
	if n := testutil.CollectAndCount(c); n != 10+11+2+6 {
		t.Errorf("collected %d metrics before Run, want 29 (epoch, 9 counters, 11 Raft series, 2 histograms, 6 limit refusals)", n)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP leasehold_epoch The epoch naming this Manager's state; it changes when the Manager loses its state.
# TYPE leasehold_epoch gauge
leasehold_epoch 42
# HELP leasehold_grants_total Ranges granted with a fresh LGN.
# TYPE leasehold_grants_total counter
leasehold_grants_total 0
`), "leasehold_epoch", "leasehold_grants_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// A pedantic registry checks that Collect matches Describe.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestCollectorFollowsServer runs a Manager with a Lookup and an Owner in
// virtual time and reads the metrics as they change.
func TestCollectorFollowsServer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: tm, Epoch: 7, Namespaces: []string{"extra"}})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(srv.Collector())
		lis := bufconn.Listen(1 << 20)
		dial := []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ctx, lis) }()
		synctest.Wait()

		// Both namespaces are published after the loop's first step: each
		// one free range, nobody connected.
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP leasehold_free_ranges Segments of the lease table that no Owner holds.
# TYPE leasehold_free_ranges gauge
leasehold_free_ranges{namespace="default"} 1
leasehold_free_ranges{namespace="extra"} 1
# HELP leasehold_lookups Lookups connected.
# TYPE leasehold_lookups gauge
leasehold_lookups{namespace="default"} 0
leasehold_lookups{namespace="extra"} 0
# HELP leasehold_owners Owner sessions the Manager knows, members or not.
# TYPE leasehold_owners gauge
leasehold_owners{namespace="default"} 0
leasehold_owners{namespace="extra"} 0
`), "leasehold_free_ranges", "leasehold_lookups", "leasehold_owners"); err != nil {
			t.Error(err)
		}
		// The epoch, 7 gauges and a loss counter per namespace, 9 counters,
		// 11 Raft series and 2 histograms; then the gRPC series.
		if n, want := testutil.CollectAndCount(srv.Collector(), metricNames...), 1+2*8+9+11+2; n != want {
			t.Errorf("collected %d metrics, want %d", n, want)
		}
		if n := testutil.CollectAndCount(srv.Collector(), "leasehold_grpc_server_started_total"); n != 13 {
			t.Errorf("collected %d leasehold_grpc_server_started_total series, want one per method (13)", n)
		}

		l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: dial,
			Timing:      tm,
		}})
		if err != nil {
			t.Fatal(err)
		}
		o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{
			Manager:     "passthrough:///bufnet",
			DialOptions: dial,
			Timing:      tm,
		}, ID: "a", Addr: "a:1"})
		if err != nil {
			t.Fatal(err)
		}
		// A new Manager reserves everything for one ManagerLease, then grants.
		time.Sleep(tm.ManagerLease + 2*tm.Renew)
		synctest.Wait()

		got := gauges(t, reg)
		for name, want := range map[string]float64{
			`leasehold_owners{namespace="default"}`:      1,
			`leasehold_members{namespace="default"}`:     1,
			`leasehold_free_ranges{namespace="default"}`: 0,
			`leasehold_lookups{namespace="default"}`:     1,
			`leasehold_owners{namespace="extra"}`:        0,
			`leasehold_epoch`:                            7,
		} {
			if got[name] != want {
				t.Errorf("%s = %g, want %g", name, got[name], want)
			}
		}
		for _, name := range []string{`leasehold_ranges{namespace="default"}`, `leasehold_lsn{namespace="default"}`,
			"leasehold_lease_requests_total", "leasehold_sync_requests_total", "leasehold_grants_total"} {
			if got[name] < 1 {
				t.Errorf("%s = %g, want at least 1", name, got[name])
			}
		}
		// The gRPC series count the Owner's stream, the Lookup's Watch and
		// its Polls, and their messages both ways.
		for _, m := range []string{`grpc_method="Session",grpc_service="leasehold.v1.Leases",grpc_type="bidi_stream"`,
			`grpc_method="Watch",grpc_service="leasehold.v1.Lookups",grpc_type="server_stream"`,
			`grpc_method="Poll",grpc_service="leasehold.v1.Lookups",grpc_type="unary"`} {
			for _, name := range []string{"started", "msg_received", "msg_sent"} {
				key := "leasehold_grpc_server_" + name + "_total{" + m + `}`
				if got[key] < 1 {
					t.Errorf("%s = %g, want at least 1", key, got[key])
				}
			}
		}

		// The owner leaves: its ranges are released and it is no member.
		if err := o.Close(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the snapshot is published at most every 100 ms
		synctest.Wait()
		got = gauges(t, reg)
		if got[`leasehold_members{namespace="default"}`] != 0 || got["leasehold_releases_total"] < 1 {
			t.Errorf("after the owner left: members %g, releases %g; want 0 and at least 1",
				got[`leasehold_members{namespace="default"}`], got["leasehold_releases_total"])
		}
		handled := 0.0
		for key, v := range got {
			if strings.HasPrefix(key, `leasehold_grpc_server_handled_total{grpc_code=`) && strings.Contains(key, `grpc_method="Session"`) {
				handled += v
			}
		}
		if handled != 1 {
			t.Errorf("after the owner left, %g Session streams handled, want 1", handled)
		}

		l.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// gauges gathers reg into a map from name{labels} to value, and checks that
// every metric of the collector is there.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
		for _, m := range f.GetMetric() {
			key := f.GetName()
			if ls := m.GetLabel(); len(ls) > 0 {
				var parts []string
				for _, l := range ls {
					parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
				}
				key += "{" + strings.Join(parts, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	for _, name := range metricNames {
		if !seen[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	return out
}
