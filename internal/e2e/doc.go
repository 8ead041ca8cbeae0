// Package e2e holds the end-to-end tests: they build the leasehold and kv
// binaries and run them as real processes on 127.0.0.1, as a user would.
//
//	go test ./internal/e2e -v          # the four scenarios (about a minute)
//	go test -short ./...               # skips them
//
// The binaries are built once, into a directory TestMain removes, and shared
// by the tests. The tests run in parallel: each spends most of its time
// waiting for real leases and timers, and each runs its own Manager and
// servers on ports of their own.
//
// The package has no code of its own besides the tests.
package e2e
