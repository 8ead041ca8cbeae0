package sim

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

type countingProbe struct {
	calls      int
	in, out    int64
	lastWorkAt time.Duration
}

func (p *countingProbe) ManagerWork(at, took time.Duration) { p.calls++; p.lastWorkAt = at }
func (p *countingProbe) ManagerTraffic(at time.Duration, bytes int, out bool) {
	if out {
		p.out += int64(bytes)
	} else {
		p.in += int64(bytes)
	}
}

// TestThinLookupsLoadTheManagerAlike checks the benchmark options: thin
// Lookups cost the Manager what full ones do, and the Probe sees the
// Manager's work and traffic. It runs with -sim.long, as CI does: the
// options serve leasehold-bench's figures, not the protocol's checks, and
// its two runs of 10 virtual minutes are about 1.5 s of CPU.
func TestThinLookupsLoadTheManagerAlike(t *testing.T) {
	longOnly(t, "a check of the benchmark's options")
	t.Parallel()
	length := 10 * time.Minute
	if raceEnabled {
		length = 5 * time.Minute
	}
	run := func(thin bool) (Result, *countingProbe) {
		p := &countingProbe{}
		r := Run(Config{
			// Enough Owners and delay jitter that pushes overtake each other
			// and Lookups repair gaps.
			Seed: 3, Owners: 60, Lookups: 40, Timing: protocol.Production(), FaultTime: length,
			SettleTime: time.Nanosecond, MinDelay: 5 * time.Millisecond, ClockSkew: true, StartSpread: time.Minute,
			OwnerCrashEvery: time.Minute, LookupCrashEvery: time.Minute,
			NoChecks: true, ThinLookups: thin, Probe: p,
		})
		return r, p
	}
	var (
		full, thin Result
		fp, tp     *countingProbe
		wg         sync.WaitGroup
	)
	wg.Go(func() { full, fp = run(false) })
	wg.Go(func() { thin, tp = run(true) })
	wg.Wait()
	if full.Violation != nil || thin.Violation != nil {
		t.Fatalf("a run with NoChecks reported %v / %v", full.Violation, thin.Violation)
	}
	t.Logf("full: %d sync bytes, probe %d calls, %d in, %d out", full.Stats.SyncBytes, fp.calls, fp.in, fp.out)
	t.Logf("thin: %d sync bytes, probe %d calls, %d in, %d out", thin.Stats.SyncBytes, tp.calls, tp.in, tp.out)
	if fp.calls == 0 || fp.in == 0 || fp.out == 0 {
		t.Fatal("the probe saw nothing")
	}
	if full.Stats.OwnerCrashes == 0 || full.Stats.LookupCrashes == 0 {
		t.Fatal("no churn")
	}
	// The same requests at the same instants: the same run, message for
	// message.
	if thin.Stats.SyncBytes != full.Stats.SyncBytes || thin.Stats.Messages != full.Stats.Messages || tp.in != fp.in || tp.out != fp.out {
		t.Errorf("thin Lookups: %d messages, %d sync bytes; full ones: %d messages, %d sync bytes",
			thin.Stats.Messages, thin.Stats.SyncBytes, full.Stats.Messages, full.Stats.SyncBytes)
	}
}

// traceProbe hashes the Manager's traffic, message by message, with its
// virtual time: two runs with the same hash sent and received the same
// messages at the same instants.
type traceProbe struct {
	n    int
	hash uint64
}

func (p *traceProbe) ManagerWork(at, took time.Duration) {}
func (p *traceProbe) ManagerTraffic(at time.Duration, bytes int, out bool) {
	p.n++
	v := uint64(at)*31 + uint64(bytes)
	if out {
		v++
	}
	p.hash = (p.hash^v)*1099511628211 + 14695981039346656037
}

// TestCompactionKeepsTheRun: dropping the dead timers from the event queue
// (compact) changes nothing in a run: with the queue compacted at every
// doubling from 64 events, the checkers, the stats (events included) and
// the Manager's traffic, message by message, are those of a run that never
// compacts.
func TestCompactionKeepsTheRun(t *testing.T) {
	t.Parallel()
	run := func(floor int) (Result, *traceProbe) {
		p := &traceProbe{}
		r := Run(Config{
			Seed: 5, Owners: 12, Lookups: 40, Timing: protocol.Production(), FaultTime: 10 * time.Minute,
			MinDelay: time.Millisecond, ClockSkew: true, StartSpread: time.Minute,
			OwnerCrashEvery: time.Minute, LookupCrashEvery: 30 * time.Second, Probe: p,
			queueFloor: floor,
		})
		return r, p
	}
	plain, pp := run(1 << 30)
	compacted, cp := run(64)
	if plain.Violation != nil || compacted.Violation != nil {
		t.Fatalf("violations: %v / %v", plain.Violation, compacted.Violation)
	}
	if plain.compactions != 0 || compacted.compactions < 5 {
		t.Fatalf("compactions: %d without, %d with a floor of 64; want 0 and several", plain.compactions, compacted.compactions)
	}
	if plain.Stats.OwnerCrashes == 0 || plain.Stats.LookupCrashes == 0 || pp.n == 0 {
		t.Fatal("no churn or no traffic")
	}
	if !reflect.DeepEqual(plain.Stats, compacted.Stats) {
		t.Errorf("stats differ:\nplain     %+v\ncompacted %+v", plain.Stats, compacted.Stats)
	}
	if *pp != *cp {
		t.Errorf("Manager traffic differs: %d messages (hash %x) without compaction, %d (%x) with", pp.n, pp.hash, cp.n, cp.hash)
	}
}
