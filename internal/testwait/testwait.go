// Package testwait is for the test binaries of packages whose tests spend
// their time waiting rather than computing: a Manager, Owners and clients
// over real gRPC or HTTP on 127.0.0.1 with protocol.Fast's 2-s leases, where
// a test polls for a grant, a drain or a lapse it cannot make come sooner.
// Such a package's TestMain calls Parallel before running its tests, and a
// waiting test written to run alone calls Side where it would call t.Parallel.
//
// go test runs at most GOMAXPROCS parallel tests of a package at once, by
// default 2 on a 2-core machine, and a package of waiting tests then takes
// the sum of its tests' waits over 2 however idle the cores are; go test ./...
// runs two packages at a time as well, so the wait also keeps a package of
// work from starting. Parallel lets more of them wait side by side.
package testwait

import (
	"flag"
	"strconv"
	"testing"
)

// Waiting is how many tests of a package that calls Parallel wait at once:
// each uses a few percent of one core (examples/kv/kv's tests use about 3 s
// of CPU in 21 s), so 4 of them halve such a package's time and still
// answer on time on a 2-core machine loaded by other work (load average
// 20); 8 made the Raft groups of three replicas miss their fast timings
// there.
const Waiting = 4

// Parallel raises go test's -parallel to Waiting, unless the command line
// sets it, or the race detector is on: it makes each test's CPU several
// times dearer, and CI's race run (-p 1) keeps the waits' answers on time
// by running fewer things at once, not more. It parses the command line, so
// call it from TestMain before m.Run.
func Parallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			set = true
		}
	})
	if set || raceEnabled {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(Waiting)); err != nil {
		panic("testwait: " + err.Error())
	}
}

// Side marks t a parallel test, as t.Parallel does, for a test that waits
// and was written to run alone: under the race detector it stays one after
// another with the package's other tests, as it ran before, since the
// detector's dearer CPU makes two such tests at once late on 2 cores.
func Side(t *testing.T) {
	t.Helper()
	if !raceEnabled {
		t.Parallel()
	}
}
