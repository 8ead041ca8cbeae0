package sim

import "testing"

// TestFaultyRunsForgetOwners: the faulty runs the sweeps check forget
// Owners (no member, owed nothing, 2 × ManagerLease after last heard;
// docs/protocol.md, "Forgetting Owners"): the checkers judge runs in which
// crashed Owners' records are removed and their IDs come back as new
// Owners, and find nothing wrong.
func TestFaultyRunsForgetOwners(t *testing.T) {
	forgot := 0
	for seed := uint64(1); seed <= 3; seed++ {
		r := Run(scenario(seed))
		if r.Violation != nil {
			t.Fatalf("seed %d: %v", seed, r.Violation)
		}
		t.Logf("seed %d: %d Owner crashes, %d Owners forgotten", seed, r.Stats.OwnerCrashes, r.Stats.OwnersForgotten)
		forgot += r.Stats.OwnersForgotten
	}
	if forgot == 0 {
		t.Fatalf("no Owner forgotten in three faulty runs: the sweeps would not judge the forgetting")
	}
}
