package sim

import (
	"flag"
	"time"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/protocol"
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
)

// leased is the replicated faulty run with every replica holding read
// leases, lease reads asked of every replica, and one-way cuts between
// replicas on top of the other faults.
func leased(managers int) func(uint64) Config {
	return func(s uint64) Config {
		c := replicated(managers)(s)
		c.ReadLease = &ReadLeaseConfig{Lease: replica.ReadLease{All: true}, OneWayEvery: c.Timing.OwnerLease, MembersEvery: 2 * c.Timing.OwnerLease, DeposeEvery: 3 * c.Timing.OwnerLease}
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
		n = max(n/4, 2) // the replicated sweeps already run the same faults by default
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
		ls.add(r.Leases)
	}
	t.Logf("%d seeds, %d replicas with read leases: %d lease reads served, %d refused, %d Lookup syncs answered under a follower's lease, %d acknowledgement steps, %d one-way cuts; %d leader crashes, %d partitions (%d isolating the leader), %d stalls, %d losses, %d notifications",
		len(results), managers, ls.Reads, ls.Refused, ls.Syncs, ls.Acks, ls.OneWayCuts, tot.LeaderCrashes, tot.Partitions, tot.LeaderIsolations, tot.Stalls, tot.LossEvents, tot.Notified)
	t.Logf("  membership: %d voters removed, %d replicas added as learners, %d promoted, %d stranded (replaced after the faults); %d held answers, the longest held %s; %d batches of several Raft messages, the longest %d; %d leaders deposed",
		ls.Removals, ls.Learners, ls.Promotions, ls.Stranded, ls.Held, ls.LongestHold, tot.RaftBatches, tot.LongestBatch, tot.Deposals)
	if len(results) >= 4 && (ls.Reads == 0 || ls.Refused == 0 || ls.Syncs == 0 || ls.OneWayCuts == 0 || ls.Removals == 0 || ls.Promotions == 0) {
		t.Errorf("the sweep served %d lease reads, refused %d, answered %d syncs under a lease, cut %d links one way, removed %d voters, promoted %d learners: it tests nothing",
			ls.Reads, ls.Refused, ls.Syncs, ls.OneWayCuts, ls.Removals, ls.Promotions)
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
	caughtFrom(t, 5, 200, brokenLease(3, faults.Set{ReadLeaseServeExpired: true}), "linearizability")
}

// TestBrokenReadLeaseSyncServeExpired: the same broken rule seen through
// Lookups alone — no lease reads are asked, and a holder answering a
// Lookup's sync after its lease ran out must be caught by the checker
// following the syncs.
func TestBrokenReadLeaseSyncServeExpired(t *testing.T) {
	caughtFrom(t, 16, 200, func(s uint64) Config {
		c := brokenLease(3, faults.Set{ReadLeaseServeExpired: true})(s)
		c.ReadLease.SyncsOnly = true
		return c
	}, "linearizability")
}

func TestBrokenReadLeaseAckEarly(t *testing.T) {
	caughtFrom(t, 3, 200, brokenLease(3, faults.Set{ReadLeaseAckEarly: true}), "linearizability")
}

// TestBrokenReadLeaseStaleGrant: a grantor that grants in a term it has
// left. The random faults rarely line up the links it needs (200 seeds of
// the 5-replica sweep did not), so the scenario below sets them up.

// staleTermScenario cuts the leader L of 5 replicas and one holder h off
// from the other three, which elect a new leader N; once N leads, h may
// reach one of the three again, x, a follower of N. h still follows L in
// the old term and asks for promises there: L and h itself promise in it,
// and x, which voted in N's term, must not. If x did, h would hold a
// lease from a majority of the old term after N's wait for the old
// promises ended, and serve reads N's acknowledged writes are missing from.
func staleTermScenario(seed uint64, broken bool) Config {
	c := Config{Seed: seed, Managers: 5, Owners: 8, Lookups: 4, Timing: protocol.Fast(),
		FaultTime: 20 * time.Second, MinDelay: 2 * time.Millisecond, ClockSkew: true,
		ReadLease: &ReadLeaseConfig{Lease: replica.ReadLease{All: true}}}
	if broken {
		c.Break = &faults.Set{ReadLeaseStaleGrant: true}
	}
	c.Script = func(ctl *Control) {
		ctl.At(4*time.Second, func() {
			l := ctl.Leader()
			if l < 0 {
				return
			}
			h := (l + 1) % 5
			var xs []int
			for i := range 5 {
				if i != l && i != h {
					xs = append(xs, i)
					ctl.CutLink(l, i)
					ctl.CutLink(h, i)
				}
			}
			opened := false
			ctl.Every(10*time.Millisecond, func() {
				n := ctl.Leader()
				if opened || n < 0 || n == l {
					return
				}
				opened = true
				for _, x := range xs {
					if x != n {
						ctl.HealLink(h, x)
						break
					}
				}
			})
			ctl.At(ctl.Now()+8*time.Second, func() {
				for _, x := range xs {
					ctl.HealLink(l, x)
					ctl.HealLink(h, x)
				}
			})
		})
	}
	return c
}

// TestReadLeaseStaleTermScenario runs the scenario with the rule kept: no
// seed may break linearizability. requiredSeeds seeds by default (the
// broken twin below is caught at seed 2), 8 with -sim.long.
func TestReadLeaseStaleTermScenario(t *testing.T) {
	t.Parallel()
	n := requiredSeeds
	if *longFlag || *seedsFlag > 0 {
		n = 8
	}
	for _, r := range seeds(t, sweepSeeds(n), func(s uint64) Config { return staleTermScenario(s, false) }) {
		if r.Violation != nil {
			t.Error(replay(t, r))
		}
		if r.Leases.Reads == 0 {
			t.Errorf("seed %d: no lease read served", r.Seed)
		}
	}
}

func TestBrokenReadLeaseStaleGrantScenario(t *testing.T) {
	caught(t, 100, func(s uint64) Config { return staleTermScenario(s, true) }, "linearizability")
}

// TestBrokenReadLeaseFromNewest: a holder that times its lease from its
// newest ask while the leader counts it only from the promise it
// acknowledged serves past the count after a lost promise.
//
// It shows at seed 6 of the leased runs, a few seconds on 2 cores and
// minutes under the race detector, so a race run skips it.
func TestBrokenReadLeaseFromNewest(t *testing.T) {
	if raceEnabled {
		t.Skip("leased runs until it shows, minutes under the race detector; run it without -race")
	}
	caughtFrom(t, 6, 200, brokenLease(3, faults.Set{ReadLeaseFromNewest: true}), "linearizability")
}

// The broken twins of the read-lease rules kept at the boundaries of the
// faults: a one-way cut the leader does not hear about (a write-liveness
// symptom, not a safety one), a holder's removal, a deposed leader
// stepping a batch of messages, a holder whose voters lag. The sweeps
// catch them with the nemeses and the stepping that produce those cases:
// membership changes under read leases (members.go), Raft messages
// stepped in batches between drives as the server steps them (step.go),
// and the checker of write liveness (liveness.go).

// TestBrokenReadLeaseCountUnacked: a leader that counts a holder after
// every promise, acknowledged or not, holds every answer past the log of
// a holder it cannot reach for as long as the one-way cut lasts. Safe,
// but Owners lose their leases with a quorum and its leader connected.
func TestBrokenReadLeaseCountUnacked(t *testing.T) {
	caughtFrom(t, 9, 200, brokenLease(3, faults.Set{ReadLeaseCountUnacked: true}), "write liveness", "linearizability")
}

// TestBrokenReadLeaseForgetRemoved: a leader that stops counting a holder
// when it applies the holder's removal acknowledges writes the removed
// holder, which has not applied its removal, serves reads without. It
// shows at seed 65 (about 13 s of CPU); the other read-lease twins keep the
// linearizability checker in the default run.
func TestBrokenReadLeaseForgetRemoved(t *testing.T) {
	longOnly(t, "65 leased runs before it shows")
	caught(t, 200, brokenLease(3, faults.Set{ReadLeaseForgetRemoved: true}), "linearizability")
}

// notYet skips a broken twin the sweeps cannot produce, unless
// -sim.pending asks for the search anyway; a replica test of its guard
// catches it.
var pendingFlag = flag.Bool("sim.pending", false, "also search for the broken read-lease twin the sweeps cannot produce (ConfBlind: docs/protocol.md, Quorum read leases, boundary 4)")

func notYet(t *testing.T, why string) {
	t.Helper()
	if !*pendingFlag {
		t.Skipf("not produced by the sweeps: %s (run with -sim.pending to search)", why)
	}
}

// TestBrokenReadLeaseDeposedGrant: a replica whose Core outlives its
// leadership within a batch of steps promises as the new term's leader.
// The deposals of the leased runs (ReadLeaseConfig.DeposeEvery, deposed.go)
// set it up: a leader stalled past an election, a holder cut off from the
// new leader just before it resumes, its backlog stepped before its timer.
// Five replicas, so that the new leader acknowledges writes while the old
// one is still stalled; it shows at seed 25, about 10 s on 2 cores, so it
// runs with -sim.long, without the race detector. A leader cut off past an
// election stays in the default run (TestReadLeaseStaleTermScenario and its
// broken twin, TestBrokenReadLeaseStaleGrantScenario).
func TestBrokenReadLeaseDeposedGrant(t *testing.T) {
	if raceEnabled {
		t.Skip("25 leased runs of five replicas before it shows, minutes under the race detector; run it without -race")
	}
	longOnly(t, "25 leased runs of five replicas before it shows")
	caught(t, 200, brokenLease(5, faults.Set{ReadLeaseDeposedGrant: true}), "linearizability")
}

// TestBrokenReadLeaseConfBlind: a holder that counts its majority among
// its own voters, whatever the leader's are. The rule is argued
// (docs/protocol.md, "Quorum read leases", boundary 4) and its guard
// tested by TestReadLeaseCountsTheLeadersVoters: the case needs a holder
// whose voters lag the leader's while a majority of its own voters, the
// leader among them, promises in one term, and the sweeps' changes (one
// voter at a time, through the leader) do not make that majority miss the
// leader's, so this search finds nothing.
func TestBrokenReadLeaseConfBlind(t *testing.T) {
	notYet(t, "a holder whose voters lag the leader's, with a promising majority of its own voters that is none of the leader's")
	caught(t, 200, brokenLease(5, faults.Set{ReadLeaseConfBlind: true}), "linearizability")
}

// TestBrokenReadLeaseCountUnackedCuts: the same broken rule through the
// one-way cuts alone, on a network that loses nothing: the write liveness
// checker, or the Owners' lost leases, must catch it.
func TestBrokenReadLeaseCountUnackedCuts(t *testing.T) {
	caught(t, 20, oneWayScenario(3, &faults.Set{ReadLeaseCountUnacked: true}), "write liveness", "owner liveness")
}
