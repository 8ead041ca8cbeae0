package sim

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestMain collects garbage at 400% of the live heap, unless $GOGC says
// otherwise: the simulation allocates as it steps (messages, Ready
// batches, the checkers' views) over a live heap of tens of megabytes, and
// at Go's default of 100% the package's tests, go test ./...'s slowest,
// took about a quarter more CPU (user 33–37 s where they take 23–28, with
// at most 0.2 GB resident where they take 0.5; /usr/bin/time on the test
// binary, three runs each). Not under the race detector, whose shadow
// memory grows with the heap.
func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" && !raceEnabled {
		debug.SetGCPercent(400)
	}
	os.Exit(m.Run())
}
