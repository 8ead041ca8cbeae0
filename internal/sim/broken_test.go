package sim

import (
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// Each test here breaks one protocol rule and requires a checker to catch it
// within the seeds tried: a checker that cannot fail proves nothing.

// caught runs seeds of cfg until one violates a checker in want, and fails
// the test if none does within max seeds.
func caught(t *testing.T, max int, cfg func(seed uint64) Config, want ...string) {
	t.Helper()
	for s := uint64(1); s <= uint64(max); s++ {
		r := Run(cfg(s))
		if v := r.Violation; v != nil {
			for _, w := range want {
				if v.Checker == w {
					t.Logf("caught at seed %d: %v", s, v)
					return
				}
			}
			t.Fatalf("seed %d: expected a %v violation, got %v", s, want, v)
		}
	}
	t.Fatalf("no %v violation within %d seeds: the checker did not catch the broken rule", want, max)
}

func broken(f faults.Set) func(uint64) Config {
	return func(s uint64) Config {
		c := scenario(s)
		c.Break = &f
		return c
	}
}

func TestBrokenNoRaceFilter(t *testing.T) {
	caught(t, 200, broken(faults.Set{NoRaceFilter: true}), "single copy", "continuity")
}

func TestBrokenTimerAtReceipt(t *testing.T) {
	caught(t, 200, broken(faults.Set{TimerAtReceipt: true}), "single copy")
}

func TestBrokenReuseLGN(t *testing.T) {
	caught(t, 200, broken(faults.Set{ReuseLGN: true}), "continuity", "recovery notification")
}

func TestBrokenIgnoreSnapshotDiff(t *testing.T) {
	caught(t, 200, broken(faults.Set{IgnoreSnapshotDiff: true}), "recovery notification")
}

// TestBrokenManagerLeaseEqualsOwnerLease runs a timing that Validate rejects:
// with clock rates apart by MaxDrift, an Owner's slow clock outlives the
// Manager's fast one.
func TestBrokenManagerLeaseEqualsOwnerLease(t *testing.T) {
	if err := equalLeases().Validate(); err == nil {
		t.Fatal("Validate accepted ManagerLease == OwnerLease")
	}
	caught(t, 200, func(s uint64) Config {
		c := Faulty(s, equalLeases())
		c.Unvalidated = true
		return c
	}, "single copy")
}

func equalLeases() protocol.Timing {
	t := protocol.Fast()
	t.ManagerLease = t.OwnerLease
	return t
}
