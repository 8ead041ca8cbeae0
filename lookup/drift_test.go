package lookup

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// withTimings is m as a current Manager sends it: with its Sync,
// SyncTimeout and MaxDrift.
func withTimings(m *protocol.SyncResponse, drift float64) *protocol.SyncResponse {
	m.Sync, m.SyncTimeout, m.MaxDrift = tm.Sync, tm.SyncTimeout, drift
	return m
}

// TestHeartbeatJudgedWithManagersDrift: a Lookup on the default MaxDrift
// (0.05) served by a Manager run with 0.2 judges a heartbeat with 0.2, the
// Manager's, from the first message that says it; its requests then say
// 0.2, so the Manager vouches to it (protocol.Timing.VouchesFor). A
// Manager that allows less drift than the Lookup's own leaves the Lookup
// on its own; a message without timings changes nothing.
func TestHeartbeatJudgedWithManagersDrift(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	c := newCore()
	if d := oneReq(t, tick(c, base).reqs).MaxDrift; d != tm.MaxDrift {
		t.Fatalf("first request says MaxDrift %g, want the Lookup's own %g", d, tm.MaxDrift)
	}
	step(c, at(10*ms), withTimings(answer(1, snapshot(tab)), 0.2))
	// The replica received request 1 and, 1.2 s later on its clock, sent a
	// heartbeat: a clock 20% fast against ours had ours advance only 1 s.
	step(c, at(1100*ms), withTimings(beat(tab, 1, 1200*ms), 0.2)).none(t)
	if want := at(time.Second); !c.Fresh().Equal(want) {
		t.Fatalf("Fresh() = %v, want %v (send + 1.2 s / 1.2), not send + 1.2 s / 1.05, the Lookup's own",
			c.Fresh(), want)
	}
	if d := c.Timing().MaxDrift; d != 0.2 {
		t.Fatalf("Timing().MaxDrift = %g after the Manager said 0.2, want 0.2", d)
	}
	r := tick(c, c.NextDeadline())
	if d := oneReq(t, r.reqs).MaxDrift; d != 0.2 {
		t.Fatalf("request after adopting says MaxDrift %g, want 0.2", d)
	}

	// A message without timings (zero: "keep your own") keeps 0.2; a
	// Manager that allows less drift than the Lookup's own leaves it on
	// its own.
	now := c.NextDeadline().Add(-time.Millisecond)
	step(c, now, beat(tab, 2, 0))
	if d := c.Timing().MaxDrift; d != 0.2 {
		t.Fatalf("Timing().MaxDrift = %g after a message without timings, want 0.2 still", d)
	}
	step(c, now, withTimings(beat(tab, 2, 0), 0.01))
	if d := c.Timing().MaxDrift; d != tm.MaxDrift {
		t.Fatalf("Timing().MaxDrift = %g after a Manager said 0.01, want the Lookup's own %g", d, tm.MaxDrift)
	}
}
