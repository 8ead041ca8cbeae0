package e2e

import (
	"os"
	"testing"
)

// allVar names the environment variable that runs every scenario.
const allVar = "LEASEHOLD_E2E"

// onlyWithAll skips t unless LEASEHOLD_E2E=all, which CI (.ci/run) sets.
//
// go test ./... runs one scenario of each kind of real process, each the
// only default run of its path, side by side (t.Parallel: each spends most
// of its time waiting on real leases and timers, on ports of its own):
//
//   - TestKVScenario, the README's walkthrough (24 keys): a Manager, kv
//     servers, watch and the kv client as processes; a SIGKILLed server's
//     loss notified within the bound, its keys never read old, a join.
//   - TestDemo, the README's first command: cmd/leasehold-demo with its own
//     CA, as a newcomer runs it.
//   - TestGatewayScenario: the gateway process (routes, a hung server's
//     504, the /v1/losses stream, SIGTERM).
//   - TestEditedDataDirFailsLoudly: a Manager with a data directory, whose
//     start must refuse an edited entry (the only default start on one).
//   - TestSingleCopyCheckerCatchesIgnoredDeadline and TestPythonKeyOf: the
//     agent's Python client without servers (the checker of its scenario
//     can fail; its keys are keyspace's), a second or two each.
//   - TestStandbyHolderKilled: standby Owners; a holder killed, its ranges
//     promoted with no acknowledged write lost.
//   - TestReadReplicaFaults: read replicas serving Lookups, one stopped
//     under load (four faults with LEASEHOLD_E2E=all).
//
// LEASEHOLD_E2E=all adds the walkthrough at full size (200 keys), failover
// (two leaders killed, then all three), the rolling restart, a stalled
// leader and one cut off by a proxy, a damaged data directory, SIGTERM,
// Owners drained while cut off from the leader, the duplicated Owner ID,
// the examples' scenarios and tours, the dashboard's browser tests (three
// Owners, a loss among planned moves, and 1,000), a drain cancelled and a
// killed Owner forgotten, the gateways' rolling restart, the gateway with
// its Manager stopped, the hostile soak, the read leases under a cut, a stop
// and a removal (about a minute), the agent's Python servers under faults
// (about two minutes) and the standby scenario (a holder, a zone, a holder
// with its standby killed; about 50 s): about eleven minutes more, each a
// variation on a path above, at a size or under faults go test ./... leaves
// to CI.
func onlyWithAll(t *testing.T) {
	t.Helper()
	if os.Getenv(allVar) != "all" {
		t.Skip("run with " + allVar + "=all (CI does): one of the longer scenarios")
	}
}

// The scenarios that run one kv process per put and per get spend most of
// their time and CPU starting those processes: about 1,800 of them with 200
// keys. TestKVScenario, which go test ./... runs, uses quickKeys by default;
// with LEASEHOLD_E2E=all they use nkeys. The Manager places ranges by
// consistent hashing of the Owners' IDs, so which server holds a key is the
// same in every run: of the 24 keys, 9 are on kv-2, the server killed, and
// 7 move to kv-4 when it joins while 17 stay, so each step of the scenario
// has keys to check (48 keys checked the same steps with 17 and 18, at
// twice the processes).
const quickKeys = 24

// cliKeys is how many keys TestKVScenario puts, by LEASEHOLD_E2E;
// TestManagerFailover runs only with LEASEHOLD_E2E=all and puts nkeys.
func cliKeys() int {
	if os.Getenv(allVar) == "all" {
		return nkeys
	}
	return quickKeys
}
