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
// only default run of its path, side by side, all at once (t.Parallel, and
// TestMain raises -parallel for them, sideBySide: each spends most of its
// time waiting on real leases and timers, on ports of its own):
//
//   - TestKVScenario, the README's walkthrough (24 keys): a Manager, kv
//     servers, watch and the kv client as processes; a SIGKILLed server's
//     loss notified within the bound, its keys never read old, a join.
//   - TestGatewayScenario: the gateway process (routes, a hung server's
//     504, the /v1/losses stream, SIGTERM).
//   - TestSingleCopyCheckerCatchesIgnoredDeadline and TestPythonKeyOf: the
//     agent's Python client without servers (the checker of its scenario
//     can fail; its keys are keyspace's), a second or two each.
//
// Four scenarios that ran by default run only with LEASEHOLD_E2E=all now,
// about 10 s, 6 s, 5 s and 6 s of CPU (the last with its link) of the 46
// the package took (go test ./... is sized for a newcomer's wait on 2
// cores, README "Testing"); CI runs them in its LEASEHOLD_E2E=all step.
// What covers their paths in go test ./...:
//
//   - TestStandbyHolderKilled (standby Owners as processes, a holder
//     SIGKILLed under a write load, its ranges promoted with no
//     acknowledged write lost) is step 1 of TestStandbyScenario at a third
//     of its size. By default: the simulation's TestSimulationStandbys
//     (holders, standbys, both and whole zones crashed, every acknowledged
//     write checked, the promotion's broken twins caught),
//     examples/kv/kv's TestStandbyDataPath (kv servers with standbys in
//     process: each put stored at its standby before it is acknowledged)
//     and TestPromotedServesTheCopy (a promoted standby serves its copy),
//     and cmd/internal/cli's status of standbys. Not by default: the kv
//     command's --standbys and --zone flags in a real process, and a real
//     SIGKILL's promotion end to end.
//   - TestReadReplicaFaults (read replicas as processes serving Lookups,
//     stopped and killed under load while Owners die). By default: the
//     simulation's TestSimulationReadReplicas (read replicas crashed,
//     stalled and cut off, every loss notified within the bound, none ever
//     voting), internal/replica's read-replica tests (added, never voting,
//     promoted only when asked) and cmd/internal/cli's --role flags. Not by
//     default: leasehold manager --role read-replica and cluster add
//     --read-replica as processes.
//   - TestEditedDataDirFailsLoudly (a Manager process started on a data
//     directory with an entry edited must exit non-zero naming it). By
//     default: internal/raftstore's TestEditedValueIsRefused and
//     TestDamagedFileIsRefused (the same edits refused by the store's
//     Load, the error naming the entry and the way to recover). Not by
//     default: the process's exit and that it never starts a group.
//   - TestDemo (the README's first command, cmd/leasehold-demo, with its
//     own CA). Its paths are those of TestKVScenario and the packages'
//     own TLS tests; the demo itself is what a newcomer runs first. Not by
//     default: the demo's story and exit status.
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
// (about two minutes), the standby scenario (a holder, a zone, a holder
// with its standby killed; about 50 s) and its quick twin above, and the
// read replicas under four faults with 24 Lookups: about twelve minutes
// more, each a
// variation on a path above, at a size or under faults go test ./... leaves
// to CI.
func onlyWithAll(t *testing.T) {
	t.Helper()
	if !allScenarios() {
		t.Skip("run with " + allVar + "=all (CI does): one of the longer scenarios")
	}
}

// allScenarios says whether LEASEHOLD_E2E=all asks for every scenario.
func allScenarios() bool { return os.Getenv(allVar) == "all" }

// The scenarios that put and get through the kv command run one process
// per batch of keys (batchKeys, kvcli_test.go), not per key: 114 processes
// with 24 keys were most of TestKVScenario's CPU. TestKVScenario, which go
// test ./... runs, uses quickKeys by default; with LEASEHOLD_E2E=all they
// use nkeys. The Manager places ranges by
// consistent hashing of the Owners' IDs, so which server holds a key is the
// same in every run: of the 24 keys, 9 are on kv-2, the server killed, and
// 7 move to kv-4 when it joins while 17 stay, so each step of the scenario
// has keys to check (48 keys checked the same steps with 17 and 18, at
// twice the processes).
const quickKeys = 24

// cliKeys is how many keys TestKVScenario puts, by LEASEHOLD_E2E;
// TestManagerFailover runs only with LEASEHOLD_E2E=all and puts nkeys.
func cliKeys() int {
	if allScenarios() {
		return nkeys
	}
	return quickKeys
}
