package manager_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// readyz asks srv's /readyz and returns whether it answered 200, and the
// body.
func readyz(srv *manager.Server) (bool, string) {
	mux := http.NewServeMux()
	srv.HandleHealth(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	return rec.Code == http.StatusOK, strings.TrimSpace(rec.Body.String())
}

// TestReadyzFollowerCutOff cuts one follower of three replicas off from
// the others: it stops being ready (it campaigns, knowing no leader) while
// the leader, which keeps its quorum, stays ready; once the cut heals it
// follows the leader again and is ready again.
func TestReadyzFollowerCutOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tm := protocol.Fast()
		n := startCutNet(t, tm)
		defer func() {
			n.setCut(nil)
			for _, stop := range n.stopAll {
				stop()
			}
		}()
		allReady := func() bool {
			for _, srv := range n.srv {
				if ok, _ := readyz(srv); !ok {
					return false
				}
			}
			return true
		}
		for i := 0; !allReady(); i++ {
			if i == 100 {
				t.Fatal("the group never became ready")
			}
			time.Sleep(100 * time.Millisecond)
		}
		lead := n.leader()
		// The leader measures its heartbeats' round trips to both others.
		if k := testutil.CollectAndCount(n.srv[lead].Collector(), "leasehold_raft_peer_round_trip_seconds"); k != 2 {
			t.Errorf("the leader has %d peer round-trip series, want 2", k)
		}
		var f uint64
		for id := range n.srv {
			if id != lead {
				f = id
				break
			}
		}
		cut := addrOf(f)
		n.setCut(func(from, to string) bool { return from == cut || to == cut })
		var why string
		ready := true
		for i := 0; ready; i++ {
			if i == 100 {
				t.Fatalf("follower %d is still ready 10 s after it was cut off: %s", f, why)
			}
			time.Sleep(100 * time.Millisecond)
			ready, why = readyz(n.srv[f])
		}
		t.Logf("cut-off follower: %s", why)
		if ok, why := readyz(n.srv[lead]); !ok || n.leader() != lead {
			t.Fatalf("the leader %d, which kept its quorum, is not ready: %s", lead, why)
		}
		n.setCut(nil)
		for i := 0; !ready; i++ {
			if i == 100 {
				t.Fatalf("follower %d is not ready 10 s after the cut healed: %s", f, why)
			}
			time.Sleep(100 * time.Millisecond)
			ready, why = readyz(n.srv[f])
		}
		if !strings.Contains(why, "follower") {
			t.Errorf("healed follower's reason %q does not say it follows", why)
		}
	})
}

// TestReadiness checks the rule on the views that break it.
func TestReadiness(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ci    manager.ClusterInfo
		ready bool
		why   string
	}{
		{manager.ClusterInfo{ID: 1, Role: "follower", Term: 3}, false, "no leader"},
		{manager.ClusterInfo{ID: 1, Role: "pre-candidate", Term: 3}, false, "no leader"},
		{manager.ClusterInfo{ID: 1, Leader: 1, Role: "leader", Term: 3, Commit: 9, Applied: 9}, false, "without a quorum"},
		{manager.ClusterInfo{ID: 1, Leader: 1, Role: "leader", Term: 3, Commit: 9, Applied: 9, Quorum: true}, true, "leader"},
		{manager.ClusterInfo{ID: 2, Leader: 1, Role: "follower", Term: 3, Commit: 9, Applied: 7}, false, "applied 7 of 9"},
		{manager.ClusterInfo{ID: 2, Leader: 1, Role: "follower", Term: 3, Commit: 9, Applied: 9}, true, "follower of leader 1"},
		{manager.ClusterInfo{ID: 4, Leader: 1, Role: manager.RoleReadReplica, Term: 3, Commit: 9, Applied: 9, Serving: true}, true, "read-replica of leader 1"},
		{manager.ClusterInfo{ID: 4, Leader: 1, Role: manager.RoleReadReplica, Term: 3, Commit: 9, Applied: 9}, false, "no proof from leader 1"},
	} {
		ok, why := manager.Readiness(tc.ci)
		if ok != tc.ready || !strings.Contains(why, tc.why) {
			t.Errorf("Readiness(%+v) = %v, %q; want %v, …%q…", tc.ci, ok, why, tc.ready, tc.why)
		}
	}
}
