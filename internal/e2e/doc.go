// Package e2e holds the end-to-end tests: they build the leasehold and kv
// binaries and run them as real processes on 127.0.0.1, as a user would.
//
//	go test ./internal/e2e -v                     # the product's scenarios (about 20 s of CPU)
//	LEASEHOLD_E2E=all go test ./internal/e2e -v   # all: also the cut-off leader, a duplicated ID, the examples, the dashboard, the gateways' rolling restart, the hostile soak, the read leases under faults
//	go test -short ./...                          # skips them
//	LEASEHOLD_E2E_LOGS=/tmp/ev LEASEHOLD_E2E=all go test ./internal/e2e -run TestStandbyScenario -v
//	                                              # a failed standby run keeps every process's output, the Manager's decisions and the pairings (standby_logs_test.go)
//
// Every scenario runs with mutual TLS: each test makes a throwaway CA and
// the certificates of its processes on first use (trust_test.go), and the
// clients of the test process dial with them too; plaintext appears only
// where a test checks that it is refused, or in an attacker's hands.
//
// The binaries are built once, into a directory TestMain removes, and shared
// by the tests (build_test.go). The scenarios go test ./... runs (all_test.go
// lists them) run all at once (TestMain sets -parallel unless it is given):
// each spends most of its time waiting for real leases and timers, and each
// runs its own Manager and servers on ports of their own. The kv and gateway
// scenarios wait for each step of the table to end, not for a quiet second
// after it (settleOn).
// The other scenarios of LEASEHOLD_E2E=all, which stop processes or cut
// connections on a schedule at full size, run one at a time, and so do the
// gateway's with LEASEHOLD_E2E=all and the read replicas'.
//
// The package has no code of its own besides the tests.
package e2e
