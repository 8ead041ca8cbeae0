package sim

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/faults"
)

// porcupineCheck checks a history of lease reads and writes with
// porcupine, independently of the simulation's own checker. The model is
// a log: the state is the highest entry applied, writes apply entries in
// index order, and a read returns the state. Writes still pending at the
// end return then.
func porcupineCheck(t *testing.T, h []LeaseEvent) porcupine.CheckResult {
	t.Helper()
	type op struct {
		write bool
		index uint64
	}
	model := porcupine.Model{
		Init: func() any { return uint64(0) },
		Step: func(state, input, output any) (bool, any) {
			s, in := state.(uint64), input.(op)
			if in.write {
				return in.index == s+1, in.index
			}
			return output.(uint64) == s, s
		},
	}
	var events []porcupine.Event
	id, open := 0, map[uint64]int{}
	for _, e := range h {
		switch e.Kind {
		case WriteCall:
			open[e.Index] = id
			events = append(events, porcupine.Event{Kind: porcupine.CallEvent, Value: op{true, e.Index}, Id: id})
			id++
		case WriteReturn:
			events = append(events, porcupine.Event{Kind: porcupine.ReturnEvent, Id: open[e.Index]})
			delete(open, e.Index)
		case Read:
			events = append(events, porcupine.Event{Kind: porcupine.CallEvent, Value: op{false, 0}, Id: id},
				porcupine.Event{Kind: porcupine.ReturnEvent, Value: e.Index, Id: id})
			id++
		}
	}
	for i := uint64(1); len(open) > 0; i++ {
		if k, ok := open[i]; ok {
			events = append(events, porcupine.Event{Kind: porcupine.ReturnEvent, Id: k})
			delete(open, i)
		}
	}
	return porcupine.CheckEventsTimeout(model, events, time.Minute)
}

// TestReadLeasePorcupineAgrees runs lease-read histories through porcupine:
// the sweep's seeds with the rules kept are linearizable (2 by default, 4
// with -sim.long), and the seeds at which the simulation's checker catches
// a broken twin are not.
func TestReadLeasePorcupineAgrees(t *testing.T) {
	t.Parallel()
	kept := uint64(2)
	if *longFlag || *seedsFlag > 0 {
		kept = 4
	}
	run := func(c Config) (Result, porcupine.CheckResult, int) {
		var h []LeaseEvent
		c.ReadLease.History = func(got []LeaseEvent) { h = got }
		r := Run(c)
		return r, porcupineCheck(t, h), len(h)
	}
	for seed := uint64(1); seed <= kept; seed++ {
		c := leased(3)(seed)
		c.FaultTime /= 2
		r, res, n := run(c)
		if r.Violation != nil || res != porcupine.Ok || r.Leases.Reads == 0 {
			t.Errorf("seed %d, rules kept: simulation %v, porcupine %s (%d events, %d reads)", seed, r.Violation, res, n, r.Leases.Reads)
		}
		t.Logf("seed %d, rules kept: %d events, %d lease reads, porcupine %s", seed, n, r.Leases.Reads, res)
	}
	for _, tc := range []struct {
		name string
		cfg  func(uint64) Config
	}{
		{"ReadLeaseServeExpired", brokenLease(3, faults.Set{ReadLeaseServeExpired: true})},
		{"ReadLeaseAckEarly", brokenLease(3, faults.Set{ReadLeaseAckEarly: true})},
		{"ReadLeaseStaleGrant", func(s uint64) Config { return staleTermScenario(s, true) }},
	} {
		// The first seed the simulation's checker catches the twin at
		// (the seeds differ under the race detector, whose runs are
		// shorter): porcupine must find that history illegal too.
		for seed := uint64(1); ; seed++ {
			if seed > 50 {
				t.Fatalf("%s: the simulation caught nothing in 50 seeds", tc.name)
			}
			r, res, n := run(tc.cfg(seed))
			if r.Violation == nil {
				continue
			}
			t.Logf("%s at seed %d: %d events, porcupine %s; simulation: %v", tc.name, seed, n, res, r.Violation)
			if res != porcupine.Illegal {
				t.Errorf("%s at seed %d: the simulation caught it, porcupine says %s", tc.name, seed, res)
			}
			break
		}
	}
}
