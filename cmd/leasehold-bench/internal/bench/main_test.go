package bench

import (
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary be the Owner process of a loopback point
// (loopback_owners.go): the loopback tests start it from this executable.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == OwnerProcessArg {
		os.Exit(RunOwnerProcess(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
