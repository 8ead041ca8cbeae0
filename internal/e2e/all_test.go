package e2e

import (
	"os"
	"testing"
)

// allVar names the environment variable that runs every scenario.
const allVar = "LEASEHOLD_E2E"

// onlyWithAll skips t unless LEASEHOLD_E2E=all. go test ./... runs the
// README's walkthrough (48 keys), its first command (the demo), the gateway,
// an edited data directory, the agent's checker, a holder with a standby
// killed (TestStandbyHolderKilled) and one read replica's stop under Lookup
// load (TestReadReplicaFaults, four faults with LEASEHOLD_E2E=all), and
// stays within a
// newcomer's wait (README.md, "Testing"); the walkthrough at full size (200
// keys), failover (two leaders killed, then all three), the rolling restart,
// a stalled leader and one cut off by a proxy, a damaged data directory,
// SIGTERM, Owners drained while cut off from the leader, the duplicated
// Owner ID, the examples' scenarios and tours, the dashboard's browser tests
// (three Owners, a loss among planned moves, and 1,000), a drain cancelled
// and a killed Owner forgotten, the gateways' rolling restart, the gateway
// with its Manager stopped, the hostile soak, the read leases under a cut, a
// stop and a removal (about a minute), and the agent's Python servers under
// faults (about two minutes), the standby scenario (a holder, a zone, a
// holder with its standby killed; about 50 s) add about eleven minutes more, and CI (.ci/run)
// runs them with LEASEHOLD_E2E=all.
func onlyWithAll(t *testing.T) {
	t.Helper()
	if os.Getenv(allVar) != "all" {
		t.Skip("run with " + allVar + "=all (CI does): one of the longer scenarios")
	}
}

// The scenarios that run one kv process per put and per get spend most of
// their time and CPU starting those processes: about 1,800 of them with 200
// keys. TestKVScenario, which go test ./... runs, uses quickKeys by default, which still puts keys on every server (a server holds
// none of 48 with odds of about 1 in 10^8) and moves some to a joining one
// and leaves some (1 in 10^6); with LEASEHOLD_E2E=all they use nkeys.
const quickKeys = 48

// cliKeys is how many keys TestKVScenario puts, by LEASEHOLD_E2E;
// TestManagerFailover runs only with LEASEHOLD_E2E=all and puts nkeys.
func cliKeys() int {
	if os.Getenv(allVar) == "all" {
		return nkeys
	}
	return quickKeys
}
