// The golden command "tick": the clock moves on and the Core's timers run.

package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

func (g *golden) tick(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	if len(d.CmdArgs) != 1 {
		d.Fatalf(t, "tick +DURATION or tick to=DURATION")
	}
	a := d.CmdArgs[0]
	var to time.Duration
	switch {
	case strings.HasPrefix(a.Key, "+") && len(a.Vals) == 0:
		dur, err := time.ParseDuration(a.Key[1:])
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		to = g.now + dur
	case a.Key == "to":
		dur, err := time.ParseDuration(a.SingleVal(t))
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		to = dur
	default:
		d.Fatalf(t, "tick +DURATION or tick to=DURATION")
	}
	if to < g.now {
		d.Fatalf(t, "tick to %v: the clock is at %v already", to, g.now)
	}
	g.now = to
	g.printf("t=%v\n", g.now)
	g.c.Tick(g.at())
}
