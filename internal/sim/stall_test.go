package sim

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// leaderStalls are the stalls of the leader TestStalledLeaderLosesNothing
// makes, one every four minutes: short, about an election, longer than
// the Owner's renewal period, and longer than an OwnerLease (60 s) and a
// ManagerLease (65 s).
var leaderStalls = []time.Duration{time.Second, 3 * time.Second, 8 * time.Second, 30 * time.Second,
	90 * time.Second, 150 * time.Second}

// stalledLeader is a run of three replicas under production timings on a
// network that loses nothing, whose leader stalls for each of
// leaderStalls in turn — alive, connections open, answering nothing —
// then resumes with everything that waited.
func stalledLeader(f *faults.Set, stalls *int) Config {
	return Config{
		Seed: 1, Managers: 3, Owners: 10, Lookups: 5, Timing: protocol.Production(),
		FaultTime: 4 * time.Minute * time.Duration(len(leaderStalls)+1), MinDelay: time.Millisecond, ClockSkew: true,
		Break: f,
		Script: func(c *Control) {
			for i, d := range leaderStalls {
				c.At(time.Duration(i+1)*4*time.Minute, func() {
					if l := c.Leader(); l >= 0 {
						*stalls++
						c.StallManager(l, d)
					}
				})
			}
		},
	}
}

// TestStalledLeaderLosesNothing: a leader that stops answering with its
// connections open, for any length, costs no lease. Its Owners hear no
// answer for 1.5 × Renew and move to another replica, which has been
// elected meanwhile and renews them under the same LGNs; its Lookups move
// after a Sync. So the Manager records no loss and no Lookup raises one.
func TestStalledLeaderLosesNothing(t *testing.T) {
	t.Parallel()
	stalls := 0
	r := Run(stalledLeader(nil, &stalls))
	s := r.Stats
	t.Logf("%d stalls of the leader (%v), %d takeovers, %d losses, %d loss notifications", stalls, leaderStalls, s.Takeovers, s.LossEvents, s.LookupNotices)
	if r.Violation != nil {
		t.Fatal(r.Violation)
	}
	// Every stall longer than an election timeout (1–2 s here) elects
	// another leader.
	long := 0
	for _, d := range leaderStalls {
		if d > 2*time.Second {
			long++
		}
	}
	if stalls != len(leaderStalls) || s.Takeovers < 1+long {
		t.Fatalf("%d stalls, %d takeovers: the failovers did not happen", stalls, s.Takeovers)
	}
	if s.LossEvents != 0 || s.LookupNotices != 0 {
		t.Fatalf("%d losses recorded, %d loss notifications raised across the stalls, want none", s.LossEvents, s.LookupNotices)
	}
}

// TestBrokenNoStreamLiveness: clients that stay on a stalled leader's open
// stream (faults.NoStreamLiveness: no keepalive, no deadline on an answer)
// let their leases run out while a new leader is elected without them; it
// frees every range when its takeover reservation ends.
func TestBrokenNoStreamLiveness(t *testing.T) {
	t.Parallel()
	stalls := 0
	r := Run(stalledLeader(&faults.Set{NoStreamLiveness: true}, &stalls))
	s := r.Stats
	t.Logf("%d stalls of the leader, %d takeovers, %d losses, %d loss notifications; %v", stalls, s.Takeovers, s.LossEvents, s.LookupNotices, r.Violation)
	if s.LossEvents == 0 {
		t.Fatal("clients without stream liveness lost nothing to a stalled leader: the scenario does not test the rule")
	}
}
