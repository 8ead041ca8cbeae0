package e2e

import (
	"os"
	"testing"
)

// allVar names the environment variable that runs every scenario.
const allVar = "LEASEHOLD_E2E"

// onlyWithAll skips t unless LEASEHOLD_E2E=all. go test ./... runs the
// walkthrough, the demo, failover, the rolling restart, a stalled leader,
// a damaged data directory and the gateway, and stays within a newcomer's
// two minutes; the leader cut off by a proxy, Owners drained while cut off
// from the leader, the duplicated Owner ID, the examples' scenarios and
// tours, the dashboard's browser tests (three Owners, a loss among planned
// moves, and 1,000), a drain cancelled and a killed Owner forgotten, the
// gateways' rolling restart, the gateway with its Manager stopped and the
// read leases under a cut, a stop and a removal (about a minute) add about
// seven minutes more, and CI (.ci/run) runs them with
// LEASEHOLD_E2E=all.
func onlyWithAll(t *testing.T) {
	t.Helper()
	if os.Getenv(allVar) != "all" {
		t.Skip("run with " + allVar + "=all (CI does): one of the longer scenarios")
	}
}
