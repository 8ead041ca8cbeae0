package testwait

import (
	"flag"
	"strconv"
	"testing"
)

func TestMain(m *testing.M) {
	Parallel()
	m.Run()
}

// TestParallelRaised: go test without -parallel runs this package's tests
// Waiting at a time (GOMAXPROCS under the race detector).
func TestParallelRaised(t *testing.T) {
	f := flag.Lookup("test.parallel")
	set := false
	flag.Visit(func(g *flag.Flag) { set = set || g.Name == "test.parallel" })
	want := strconv.Itoa(Waiting)
	if raceEnabled {
		want = f.DefValue
	}
	if !set && f.Value.String() != want {
		t.Errorf("-test.parallel = %s, want %s", f.Value, want)
	}
}
