// Package e2e holds the end-to-end tests: they build the leasehold and kv
// binaries and run them as real processes on 127.0.0.1, as a user would.
//
//	go test ./internal/e2e -v          # the acceptance scenario (about 20 s)
//	go test -short ./...               # skips it
//
// The package has no code of its own besides the tests.
package e2e
