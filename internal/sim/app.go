package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// The application on each Owner: what a server that keeps state in memory
// does with its upcalls (Config.Migration, Config.Workload).
//
// A planned move (C§2.1.2) is carried out as examples/kv does it: the holder
// sends the range's state to the next Owner over the simulated network
// (stateMsg), the next Owner keeps it for the grant to come and acknowledges
// (stateAck), and on the acknowledgement the holder calls HandoverDone.
// Messages between Owners are dropped, delayed, duplicated and cut off like
// any other, so some moves miss their deadline and fall back to a recall.
// With Config.AppFaults, one Owner run in declineOneIn has no handover
// upcall at all (it gives every range up at once, as an application
// without migration does), and the application gives up one handover in
// giveUpOneIn while faults last.
//
// The migration checker (checker.tookUp) holds the Manager to its side of
// the bargain: an Owner that takes up a grant marked migrated must have
// received the state of the very lease the grant names (MigratedFrom);
// otherwise the state is gone and no Lookup hears of it.

const (
	declineOneIn = 8
	giveUpOneIn  = 16
)

// app is the application state of one Owner run.
type app struct {
	pending []transfer // state received for moves, waiting for their grant
	loadAt  time.Time  // local time of the last load report
	// since is when each held lease was taken up, local time: a load
	// meter counts a range's requests only while it is held.
	since map[owner.LeaseNum]time.Time
	// frozen lists the ranges whose state was copied out for a handover:
	// the application takes no write on them until the handover's
	// deadline, or until it gives the handover up (acks.go).
	frozen []freeze
	sb     *sbApp // Config.Standbys (standby.go)
}

// transfer is the state of a range handed over to this Owner run: the
// state of lease from, received at (virtual time).
type transfer struct {
	r      keyspace.Range
	from   leaseID
	at     time.Duration
	copied time.Duration          // when the sender copied the state out
	sb     map[keyspace.Key]sbVal // the standby application's keys (standby_moves.go)
}

// stateMsg carries the state of h.Range from the Owner run fromInc to the
// run h.Incarnation of h.To.
type stateMsg struct {
	h       owner.Handover
	fromInc uint64
	copied  time.Duration          // virtual time the state was copied out
	sb      map[keyspace.Key]sbVal // the standby application's keys (standby_moves.go)
}

// stateAck acknowledges a stateMsg to the Owner run fromInc.
type stateAck struct {
	h       owner.Handover
	fromInc uint64
}

// ownerConfig completes an Owner run's core configuration with what its
// application does: hand state over, weigh its capacity, report its load.
func (s *Sim) ownerConfig(n *node, cfg owner.CoreConfig) owner.CoreConfig {
	n.app = app{}
	if s.cfg.Migration {
		decline := s.cfg.AppFaults && s.rng.IntN(declineOneIn) == 0 // this run hands nothing over
		cfg.Handovers = !decline
	}
	if len(s.cfg.Capacities) > 0 {
		cfg.Capacity = s.cfg.Capacities[n.idx%len(s.cfg.Capacities)]
	}
	if s.cfg.Workload != nil || s.cfg.Rate > 0 {
		cfg.Load = func(now time.Time) ([]protocol.RangeLoad, []protocol.KeyLoad, time.Duration) {
			return s.loadReport(n, now)
		}
	}
	return cfg
}

// loadReport is what an Owner's load meter would have counted since its
// last report: each held range's share of the workload's requests while it
// was held (a range taken up during the window counts for part of it), and
// the hottest keys among those it holds. Ranges given up during the window
// are left out (a real meter reports them too).
func (s *Sim) loadReport(n *node, now time.Time) ([]protocol.RangeLoad, []protocol.KeyLoad, time.Duration) {
	prev := n.app.loadAt
	n.app.loadAt = now
	window := now.Sub(prev)
	if prev.IsZero() || window <= 0 || s.cfg.Workload == nil {
		return nil, nil, 0 // the first report, or no requests yet
	}
	secs := window.Seconds()
	held := n.own.Held(now)
	var loads []protocol.RangeLoad
	for _, l := range held {
		from := prev
		if at, ok := n.app.since[l.Num]; ok && at.After(from) {
			from = at
		}
		loads = append(loads, protocol.RangeLoad{Range: l.Range,
			Requests: uint64(s.cfg.Workload.Load(l.Range)*s.cfg.Rate*now.Sub(from).Seconds() + 0.5)})
	}
	maps.DeleteFunc(n.app.since, func(num owner.LeaseNum, _ time.Time) bool {
		return !slices.ContainsFunc(held, func(l owner.Lease) bool { return l.Num == num })
	})
	var hot []protocol.KeyLoad
	for _, k := range s.hot {
		if len(hot) == hotReported {
			break
		}
		if slices.ContainsFunc(held, func(l owner.Lease) bool { return l.Range.Contains(k.Key) }) {
			hot = append(hot, protocol.KeyLoad{Key: k.Key, Requests: uint64(k.Load*secs + 0.5)})
		}
	}
	return loads, hot, window
}

// hotKeys is how many of the workload's hottest keys the Owners' sketches
// are assumed to find; hotReported how many an Owner reports (as
// owner/load.go does).
const (
	hotKeys     = 64
	hotReported = 8
)

// ownerChanged runs the application's upcalls of an Owner step: it takes
// up the state of migrated grants (checking that it has it), drops the
// state of revoked ranges, and starts the handovers asked for.
func (s *Sim) ownerChanged(n *node, changes []owner.OwnershipChange) {
	for _, ch := range changes {
		for _, g := range ch.Granted {
			if n.app.since == nil {
				n.app.since = map[owner.LeaseNum]time.Time{}
			}
			if _, ok := n.app.since[g.Num]; !ok {
				n.app.since[g.Num] = n.local(s.now)
			}
		}
		if traceNode == n.name {
			s.trace(n, "revoked %v granted %v handovers %v", ch.Revoked, ch.Granted, ch.Handovers)
		}
		for _, g := range ch.Granted {
			// A grant taken up already expired (a run stalled past it,
			// handling an old message, standby_faults.go) serves nothing,
			// and the state it names may be gone (pending keeps it
			// 4 OwnerLeases). A promoted grant's copy is checked by
			// sbChanged.
			if g.Migrated && !g.Promoted && n.local(s.now).Before(g.Expiry) {
				s.chk.tookUp(n, g)
			}
		}
		if s.cfg.Standbys {
			s.sbGranted(n, ch)        // standby_faults.go
			s.sbTakeUpMigrated(n, ch) // standby_moves.go
			s.sbChanged(n, ch)
		}
		for _, h := range ch.Handovers {
			s.handOver(n, h)
		}
	}
	// State received for a move is kept about as long as the move can
	// take: the holder's deadline is an OwnerLease.
	keep := 4 * s.cfg.Timing.OwnerLease
	n.app.pending = slices.DeleteFunc(n.app.pending, func(t transfer) bool { return s.now-t.at > keep })
}

// handOver starts the application's side of a planned move: send the
// state to the next Owner, or give up.
func (s *Sim) handOver(n *node, h owner.Handover) {
	s.stats.Handovers++
	// A give-up is an injected fault: only while faults last, as a late
	// report (slowOneIn). After, each one would cost the range a deadline
	// and a recall, and with standbys a promotion whose handover may be
	// given up again, a chain the settle time is not sized for. The draw
	// is made either way, so a run's random course is kept.
	if giveUp := s.cfg.AppFaults && s.rng.IntN(giveUpOneIn) == 0; giveUp && s.faulting {
		s.stats.HandoversGivenUp++
		n.own.HandoverDone(n.local(s.now), h, false)
		n.app.thaw(h)
		return
	}
	to := s.byOwner[h.To]
	if to == nil {
		n.own.HandoverDone(n.local(s.now), h, false)
		return
	}
	n.app.frozen = append(n.app.frozen, freeze{h: h})
	s.send(n, to, stateMsg{h: h, fromInc: n.inc, copied: s.now, sb: s.sbHandedOver(n, h)})
}

// appDeliver handles a message from another Owner.
func (s *Sim) appDeliver(n *node, from *node, msg any) {
	if s.cfg.Standbys && s.sbDeliver(n, from, msg) {
		return
	}
	now := n.local(s.now)
	switch m := msg.(type) {
	case stateMsg:
		if m.h.Incarnation != n.inc {
			return // for an earlier run of this Owner: its memory is gone
		}
		n.app.pending = append(n.app.pending, transfer{r: m.h.Range,
			from: leaseID{m.h.Lease.Epoch, m.h.Lease.LGN}, at: s.now, copied: m.copied, sb: m.sb})
		s.send(n, from, stateAck{h: m.h, fromInc: m.fromInc})
	case stateAck:
		if m.fromInc != n.inc {
			return
		}
		if s.cfg.AppFaults && s.faulting && s.rng.IntN(slowOneIn) == 0 {
			s.slowHandoverDone(n, m.h)
			return
		}
		s.handoverDone(n, m.h, now)
	}
}

// drain restarts Owner n gracefully, as `kv serve` does on SIGTERM and
// owner.Close does: drain (every range moves away, with its state, once the
// maintenance gate lets it), leave once nothing is held or after
// drainTimeout, and start again a little later.
func (s *Sim) drain(n *node) {
	s.stats.Drains++
	n.draining = true
	inc, began := n.inc, s.now
	n.own.Drain(n.local(s.now))
	s.after(n)
	t := s.cfg.Timing
	var poll func()
	poll = func() {
		if !n.up || n.inc != inc || !s.faulting {
			return
		}
		if n.stalled {
			s.at(s.now+t.Renew/2, poll)
			return
		}
		now := n.local(s.now)
		if len(n.own.Held(now)) > 0 && s.now-began < drainTimeout(t) {
			s.at(s.now+t.Renew/2, poll)
			return
		}
		n.own.Leave(now)
		s.after(n)
		s.at(s.now+t.Renew, func() {
			if n.up && n.inc == inc {
				s.crash(n)
				s.at(s.now+s.uniform(0, t.ManagerLease), func() { s.restart(n) })
			}
		})
	}
	s.at(s.now+t.Renew/2, poll)
}

// drainTimeout is how long a draining Owner waits for its ranges to move
// before it leaves with what it still holds (kv's --drain-timeout).
func drainTimeout(t protocol.Timing) time.Duration { return 4 * t.OwnerLease }

// slowOneIn: with Config.AppFaults, one acknowledged handover in slowOneIn
// is reported done late, around its deadline: an Owner slow to handle
// messages (a long pause, a busy loop) just when it matters.
const slowOneIn = 4

// handoverDone reports handover h of Owner run n done, at local time now.
func (s *Sim) handoverDone(n *node, h owner.Handover, now time.Time) {
	s.stats.HandoversDone++
	if !now.Before(h.Deadline) {
		s.stats.LateHandovers++
	}
	s.trace(n, "handover done %v lease %v", h.Range, h.Lease)
	n.own.HandoverDone(now, h, true)
}

// slowHandoverDone reports handover h of Owner run n done within a renewal
// period either side of its deadline, as an Owner slow to handle the
// acknowledgement would.
func (s *Sim) slowHandoverDone(n *node, h owner.Handover) {
	inc := n.inc
	r := s.cfg.Timing.Renew
	at := max(s.now, n.real(h.Deadline)+s.uniform(0, r)-r/2)
	s.at(at, func() {
		if !n.up || n.inc != inc || n.ghost {
			return
		}
		if n.stalled {
			n.stallQ = append(n.stallQ, func() { s.handoverDone(n, h, n.local(s.now)); s.after(n) })
			return
		}
		s.handoverDone(n, h, n.local(s.now))
		s.after(n)
	})
}
