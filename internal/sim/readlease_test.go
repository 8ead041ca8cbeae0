package sim

import (
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/manager/config"
)

// leased is the replicated faulty run with every replica holding read
// leases, lease reads asked of every replica, and one-way cuts between
// replicas on top of the other faults.
func leased(managers int) func(uint64) Config {
	return func(s uint64) Config {
		c := replicated(managers)(s)
		c.ReadLease = &ReadLeaseConfig{Lease: config.ReadLease{All: true}, OneWayEvery: c.Timing.OwnerLease}
		return c
	}
}

// TestSimulationReadLease3 and TestSimulationReadLease5 run the replicated
// faulty sweep with quorum read leases on every replica: no lease read may
// break linearizability, and no Owner- or Lookup-facing guarantee may
// change.
func TestSimulationReadLease3(t *testing.T) { testReadLease(t, 3) }
func TestSimulationReadLease5(t *testing.T) { testReadLease(t, 5) }

func testReadLease(t *testing.T, managers int) {
	t.Parallel()
	n := sweepSeeds(sweepSize())
	if !*longFlag && *seedsFlag == 0 && *soakFlag == 0 {
		n = max(n/5, 1) // the replicated sweeps already run the same faults by default
	}
	results := seeds(t, n, leased(managers))
	tot := sweep(t, results, func(s Stats) map[string]int {
		return map[string]int{
			"leader crashes": s.LeaderCrashes, "partitions isolating the leader": s.LeaderIsolations,
			"partitions": s.Partitions, "losses": s.LossEvents, "notifications": s.Notified,
		}
	})
	var ls LeaseStats
	for _, r := range results {
		ls.Reads += r.Leases.Reads
		ls.Refused += r.Leases.Refused
		ls.Acks += r.Leases.Acks
		ls.OneWayCuts += r.Leases.OneWayCuts
	}
	t.Logf("%d seeds, %d replicas with read leases: %d lease reads served, %d refused, %d acknowledgement steps, %d one-way cuts; %d leader crashes, %d partitions (%d isolating the leader), %d losses, %d notifications",
		len(results), managers, ls.Reads, ls.Refused, ls.Acks, ls.OneWayCuts, tot.LeaderCrashes, tot.Partitions, tot.LeaderIsolations, tot.LossEvents, tot.Notified)
	if len(results) >= 4 && (ls.Reads == 0 || ls.Refused == 0 || ls.OneWayCuts == 0) {
		t.Errorf("the sweep served %d lease reads, refused %d, cut %d links one way: it tests nothing", ls.Reads, ls.Refused, ls.OneWayCuts)
	}
}

// The broken read-lease rules: the linearizability checker must catch each.
func brokenLease(managers int, f faults.Set) func(uint64) Config {
	return func(s uint64) Config {
		c := leased(managers)(s)
		c.Break = &f
		return c
	}
}

func TestBrokenReadLeaseServeExpired(t *testing.T) {
	caught(t, 200, brokenLease(3, faults.Set{ReadLeaseServeExpired: true}), "linearizability")
}

func TestBrokenReadLeaseAckEarly(t *testing.T) {
	caught(t, 200, brokenLease(3, faults.Set{ReadLeaseAckEarly: true}), "linearizability")
}

func TestBrokenReadLeaseStaleGrant(t *testing.T) {
	caught(t, 200, brokenLease(5, faults.Set{ReadLeaseStaleGrant: true}), "linearizability")
}
