package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/protocol"
)

// latencies is a sample of durations.
type latencies []time.Duration

func (l latencies) String() string {
	if len(l) == 0 {
		return "no sample"
	}
	s := slices.Clone(l)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(int(p*float64(len(s))), len(s)-1)] }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("n=%d mean %s p50 %s p99 %s max %s", len(s), r(sum/time.Duration(len(s))), r(q(0.5)), r(q(0.99)), r(s[len(s)-1]))
}

func (l latencies) p50() time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[len(s)/2]
}

// measured is what one measurement run saw.
type measured struct {
	leaseRead, readIndex, leaderRead latencies // reads asked at a follower (a holder)
	leader                           int       // the replica that led when the reads began
	owner                            latencies // Owner requests, sent to answered, before the crash
	writes                           latencies // entries, appended to acknowledged, before the crash
	afterCrash                       latencies // entries appended in the stall window after a holder crashed
	crashAt                          time.Duration
	bound                            time.Duration // the read-lease bound B
	immediate                        int           // lease reads served at once
}

// measureReadLease runs managers replicas with oneWay of latency between
// replicas (and about a quarter of a millisecond between a client and a
// replica), reads asked at followers every 10 ms by the three paths, and
// a follower holder crashed at 30 s for 5 s.
func measureReadLease(t *testing.T, managers int, leases bool, holders []uint64, oneWay time.Duration) measured {
	tm := protocol.Fast()
	var m measured
	c := Config{Seed: 1, Managers: managers, Owners: 20, Lookups: 2, Timing: tm, FaultTime: 45 * time.Second,
		MinDelay: 250 * time.Microsecond, ReplicaDelay: oneWay, ClockSkew: true}
	if leases {
		c.ReadLease = &ReadLeaseConfig{Lease: replica.ReadLease{All: holders == nil, Holders: holders}, ReadEvery: time.Second}
	}
	crashAt, window := 30*time.Second, 2*time.Second
	c.OwnerLatency = func(at, took time.Duration, _ uint64) {
		if sent := at - took; sent >= 10*time.Second && sent < crashAt {
			m.owner = append(m.owner, took)
		}
	}
	c.WriteLatency = func(at, took time.Duration) {
		switch sent := at - took; {
		case sent >= 10*time.Second && sent < crashAt:
			m.writes = append(m.writes, took)
		case sent >= crashAt && sent < crashAt+window:
			m.afterCrash = append(m.afterCrash, took)
		}
	}
	c.Script = func(ctl *Control) {
		s := ctl.s
		follower := func() *node {
			l := s.leader()
			for _, n := range s.mgrs {
				if n != l && n.up && n.rep != nil && (!leases || n.rep.ReadLease(n.local(s.now)).Holder) {
					return n
				}
			}
			return nil
		}
		// poll calls done every 100 µs until it reports true, for at most 2 s.
		var poll func(start time.Duration, done func() bool, out *latencies)
		poll = func(start time.Duration, done func() bool, out *latencies) {
			if done() {
				*out = append(*out, s.now-start)
				return
			}
			if s.now-start < 2*time.Second {
				s.at(s.now+100*time.Microsecond, func() { poll(start, done, out) })
			}
		}
		ctl.At(10*time.Second, func() {
			m.leader = ctl.Leader()
			ctl.Every(10*time.Millisecond, func() {
				if ctl.Now() > crashAt-time.Second {
					return
				}
				f := follower()
				if f == nil {
					return
				}
				start := s.now
				if leases {
					if _, ok := f.rep.LeaseRead(f.local(s.now)); ok {
						m.immediate++
					}
					poll(start, func() bool { _, ok := f.rep.LeaseRead(f.local(s.now)); return f.up && ok }, &m.leaseRead)
				}
				asked := f.local(s.now)
				f.rep.AskReadIndex(asked)
				s.after(f)
				poll(start, func() bool {
					at, idx := f.rep.ReadIndexProof()
					return f.up && !at.Before(asked) && f.rep.ReadLease(f.local(s.now)).Applied >= idx
				}, &m.readIndex)
				// A client near f asks the leader, which answers from its
				// applied state at once.
				s.at(s.now+s.delay()+oneWay, func() {
					if l := s.leader(); l != nil && l.rep != nil && l.rep.Core() != nil {
						s.at(s.now+s.delay()+oneWay, func() { m.leaderRead = append(m.leaderRead, s.now-start) })
					}
				})
			})
		})
		// Owners restart in turn, every 100 ms: each new run is written
		// to the replicated state (its incarnation), and so are the
		// grants and releases that follow.
		next := 0
		ctl.At(10*time.Second, func() {
			ctl.Every(100*time.Millisecond, func() {
				if ctl.Now() < crashAt+window {
					ctl.RestartOwner(next%ctl.Owners(), 0)
					next++
				}
			})
		})
		ctl.At(crashAt, func() {
			if f := follower(); f != nil {
				ctl.RestartManager(f.idx, 5*time.Second)
			}
		})
	}
	r := Run(c)
	if r.Violation != nil {
		t.Fatalf("%d replicas, leases %v: %v", managers, leases, r.Violation)
	}
	m.crashAt = crashAt
	if leases {
		cc := replica.Settings{Lease: lease.Settings{Timing: tm}, ReadLease: replica.ReadLease{All: true}, RaftTick: raftTick(tm), ElectionTicks: electionTicks}
		cc.SetDefaults()
		m.bound = cc.ReadLeaseBound()
	}
	return m
}

// TestReadLeaseMeasurements runs 3 (and with -sim.long 5) replicas 5 ms apart with and
// without quorum read leases, and compares: a read at a follower served
// from its lease, by a ReadIndex round, and by the leader for a client
// near the follower; an Owner's request answered (the Manager's write
// acknowledgement, renewals and grants); and the stall after a follower
// holder crashes, against its bound. docs/results.md quotes its log. It
// runs with -sim.long: figures, which the sweeps' write liveness and
// linearizability checkers do not need.
func TestReadLeaseMeasurements(t *testing.T) {
	if raceEnabled {
		t.Skip("figures, not races: the race detector would only slow the runs")
	}
	longOnly(t, "figures for docs/results.md")
	t.Parallel()
	const oneWay = 5 * time.Millisecond
	groups := []int{3}
	if *longFlag {
		groups = append(groups, 5)
	}
	for _, managers := range groups {
		on := measureReadLease(t, managers, true, nil, oneWay)
		off := measureReadLease(t, managers, false, nil, oneWay)
		// The paper's configuration: a majority holds, the leader among
		// them (the replica that led the run with every replica a holder,
		// and the next ones).
		var majority []uint64
		for k := range managers/2 + 1 {
			majority = append(majority, uint64((on.leader+k)%managers+1))
		}
		sub := measureReadLease(t, managers, true, majority, oneWay)
		if !slices.Contains(majority, uint64(sub.leader+1)) {
			t.Fatalf("replica %d leads, not one of the holders %v: pick the majority anew", sub.leader+1, majority)
		}
		t.Logf("%d replicas, %s one way between replicas:", managers, oneWay)
		t.Logf("  read at a follower, read lease:     %v (%d of %d served at once)", on.leaseRead, on.immediate, len(on.leaseRead))
		t.Logf("  read at a follower, ReadIndex:      %v", on.readIndex)
		t.Logf("  read at the leader (client near f): %v", on.leaderRead)
		t.Logf("  Owner request answered, leases:     %v", on.owner)
		t.Logf("  Owner request answered, no leases:  %v", off.owner)
		t.Logf("  write appended → acknowledged, leases:    %v", on.writes)
		t.Logf("  write appended → acknowledged, no leases: %v", off.writes)
		t.Logf("  write after a follower holder crashed: %v (bound %s); without leases: %v", on.afterCrash, on.bound, off.afterCrash)
		t.Logf("  holders %v only (a majority with the leader): read lease at a follower holder %v (%d of %d at once); write %v; after a holder crashed %v",
			majority, sub.leaseRead, sub.immediate, len(sub.leaseRead), sub.writes, sub.afterCrash)
		if len(on.leaseRead) == 0 || len(on.readIndex) == 0 || len(on.leaderRead) == 0 || len(on.owner) == 0 || len(off.owner) == 0 || len(on.afterCrash) == 0 {
			t.Fatalf("%d replicas: an empty sample", managers)
		}
		if on.leaseRead.p50() >= on.readIndex.p50() || on.leaseRead.p50() >= on.leaderRead.p50() {
			t.Errorf("%d replicas: lease reads (p50 %s) are no faster than ReadIndex (%s) or the leader (%s)", managers, on.leaseRead.p50(), on.readIndex.p50(), on.leaderRead.p50())
		}
		if worst := slices.Max(on.afterCrash); worst > on.bound+100*time.Millisecond {
			t.Errorf("%d replicas: an Owner waited %s after a holder crashed, beyond the bound %s (plus 100 ms)", managers, worst, on.bound)
		}
	}
}
