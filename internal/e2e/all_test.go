package e2e

import (
	"os"
	"testing"
)

// allVar names the environment variable that runs every scenario.
const allVar = "LEASEHOLD_E2E"

// onlyWithAll skips t unless LEASEHOLD_E2E=all. go test ./... runs the
// walkthrough (48 keys), the demo, failover (one leader killed, then all
// three), the rolling restart, a stalled leader, a damaged and an edited
// data directory, SIGTERM and the gateway, and stays within a newcomer's
// two minutes (README.md, "Testing"); the walkthrough and failover at full
// size (200 keys, two leaders killed), the leader cut off by a proxy,
// Owners drained while cut off from the leader, the duplicated Owner ID,
// the examples' scenarios and tours, the dashboard's browser tests (three
// Owners, a loss among planned moves, and 1,000), a drain cancelled and a
// killed Owner forgotten, the gateways' rolling restart, the gateway with its
// Manager stopped, the hostile soak, the read leases under a cut, a stop
// and a removal (about a minute), and the agent's Python servers under
// faults (about two minutes) add about nine minutes more, and CI
// (.ci/run) runs them with LEASEHOLD_E2E=all.
func onlyWithAll(t *testing.T) {
	t.Helper()
	if os.Getenv(allVar) != "all" {
		t.Skip("run with " + allVar + "=all (CI does): one of the longer scenarios")
	}
}

// The scenarios that run one kv process per put and per get
// (TestKVScenario, TestManagerFailover) spend most of their time and CPU
// starting those processes: about 1,800 of them with 200 keys. By default
// they use quickKeys, which still puts keys on every server (a server holds
// none of 48 with odds of about 1 in 10^8) and moves some to a joining one
// and leaves some (1 in 10^6); with LEASEHOLD_E2E=all they use nkeys.
const quickKeys = 48

// cliKeys is how many keys those scenarios put, by LEASEHOLD_E2E.
func cliKeys() int {
	if os.Getenv(allVar) == "all" {
		return nkeys
	}
	return quickKeys
}
