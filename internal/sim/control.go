package sim

import (
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/rebalance"
)

// Control is how a Config.Script acts on a run: it schedules functions at
// virtual times, crashes and starts Manager replicas, Owners and Lookups,
// cuts nodes off, and asks a Lookup where a key lives and that Owner
// whether it holds the key — what a frontend of the application does. Its
// methods must be called from Script or from functions it scheduled, never
// concurrently.
type Control struct {
	s   *Sim
	end time.Duration
}

// Now is the current virtual time.
func (c *Control) Now() time.Duration { return c.s.now }

// End is the virtual time at which the run ends.
func (c *Control) End() time.Duration { return c.end }

// Owners is the number of Owners; they are numbered from 0.
func (c *Control) Owners() int { return len(c.s.owners) }

// Lookups is the number of Lookups; they are numbered from 0.
func (c *Control) Lookups() int { return len(c.s.lookups) }

// At runs fn at virtual time t (at once, after the current event, if t is
// past).
func (c *Control) At(t time.Duration, fn func()) { c.s.at(max(t, c.s.now), fn) }

// Every runs fn every d of virtual time from now until the end of the run.
func (c *Control) Every(d time.Duration, fn func()) {
	var tick func()
	tick = func() {
		fn()
		if c.s.now+d <= c.end {
			c.s.at(c.s.now+d, tick)
		}
	}
	c.s.at(c.s.now+d, tick)
}

// Stats is the run's statistics so far.
func (c *Control) Stats() Stats { return c.s.stats }

// OwnerUp reports whether Owner i is running.
func (c *Control) OwnerUp(i int) bool { return c.s.owners[i].up }

// CrashOwner stops Owner i, losing all its state.
func (c *Control) CrashOwner(i int) { c.s.crash(c.s.owners[i]) }

// StartOwner starts Owner i again as a new incarnation, if it is down.
func (c *Control) StartOwner(i int) { c.startIfDown(c.s.owners[i]) }

// RestartOwner crashes Owner i and starts it again after down.
func (c *Control) RestartOwner(i int, down time.Duration) {
	c.CrashOwner(i)
	c.At(c.s.now+down, func() { c.StartOwner(i) })
}

// CrashLookup stops Lookup i, losing its copy of the table.
func (c *Control) CrashLookup(i int) { c.s.crash(c.s.lookups[i]) }

// StartLookup starts Lookup i again with an empty copy, if it is down.
func (c *Control) StartLookup(i int) { c.startIfDown(c.s.lookups[i]) }

// RestartLookup crashes Lookup i and starts it again after down.
func (c *Control) RestartLookup(i int, down time.Duration) {
	c.CrashLookup(i)
	c.At(c.s.now+down, func() { c.StartLookup(i) })
}

func (c *Control) startIfDown(n *node) {
	if !n.up {
		c.s.start(n)
	}
}

// Managers is the number of Manager replicas; they are numbered from 0
// (replica i has Raft ID i+1 until a membership change replaces it with a
// new one, as an operator replaces a removed replica: members.go).
func (c *Control) Managers() int { return len(c.s.mgrs) }

// Leader is the number of the replica that leads and has taken over (of
// two, the one of the later term), or -1 if none has.
func (c *Control) Leader() int {
	if l := c.s.leader(); l != nil && l.rep.Core() != nil {
		return l.idx
	}
	return -1
}

// ManagerUp reports whether replica i is running.
func (c *Control) ManagerUp(i int) bool { return c.s.mgrs[i].up }

// CrashManager stops replica i. It keeps its Raft log, unless it is the
// only replica and Config.ManagerLosesState is set.
func (c *Control) CrashManager(i int) { c.s.crash(c.s.mgrs[i]) }

// StartManager starts replica i again, from its Raft log, if it is down.
func (c *Control) StartManager(i int) { c.startIfDown(c.s.mgrs[i]) }

// RestartManager crashes replica i and starts it again after down.
func (c *Control) RestartManager(i int, down time.Duration) {
	c.CrashManager(i)
	c.At(c.s.now+down, func() { c.StartManager(i) })
}

// Cut cuts the replicas, Owners and Lookups numbered in managers, owners
// and lookups off from every other node for d: they can talk among
// themselves only.
func (c *Control) Cut(d time.Duration, managers, owners, lookups []int) {
	s := c.s
	s.stats.Partitions++
	s.nextPart++
	p := s.nextPart
	lead := s.leader()
	for _, i := range managers {
		s.mgrs[i].part = p
	}
	for _, i := range owners {
		s.owners[i].part = p
	}
	for _, i := range lookups {
		s.lookups[i].part = p
	}
	s.countIsolation(lead)
	c.At(s.now+d, func() {
		for _, n := range s.nodes {
			if n.part == p {
				n.part = 0
			}
		}
	})
}

// Route asks Lookup i which Owner its copy names for key: the Owner's
// number, or ok false if the Lookup is down or its copy names nobody.
func (c *Control) Route(i int, key keyspace.Key) (owner int, ok bool) {
	l := c.s.lookups[i]
	if !l.up || l.look == nil {
		return 0, false
	}
	name, _, _, ok := l.look.Lookup(key)
	if !ok {
		return 0, false
	}
	o := c.s.byOwner[name]
	if o == nil {
		return 0, false
	}
	return o.idx, true
}

// Holds reports whether Owner i is up and holds a lease on key now, by its
// own clock: CheckLeaseNow (C§3.2).
func (c *Control) Holds(i int, key keyspace.Key) bool {
	o := c.s.owners[i]
	if !o.up {
		return false
	}
	_, ok := o.own.CheckLeaseNow(o.local(c.s.now), key)
	return ok
}

// Stop ends the run after the current event (a benchmark was cancelled).
// The end-of-run checks still run.
func (c *Control) Stop() { c.s.stopped = true }

// Load is the load the Owners carry now by the committed lease table and
// Config.Workload: requests per second of each Owner (Owner i at index i),
// and the imbalance among the Owners that are up and not shutting down —
// the highest load per unit of capacity over the mean (rebalance.Imbalance;
// ranges no such Owner holds count in the mean only). Without a Workload
// or a table it returns nil and 0.
func (c *Control) Load() (perOwner []float64, imbalance float64) {
	s := c.s
	st := s.furthest()
	if s.cfg.Workload == nil || st == nil {
		return nil, 0
	}
	segs := st.Table(namespace).Segments()
	loads := make([]rebalance.Segment, len(segs))
	perOwner = make([]float64, len(s.owners))
	for i, seg := range segs {
		loads[i] = rebalance.Segment{Range: seg.Range, Owner: seg.Entry.Owner, Load: s.cfg.Workload.Load(seg.Range) * s.cfg.Rate}
		if o := s.byOwner[seg.Entry.Owner]; o != nil {
			perOwner[o.idx] += loads[i].Load
		}
	}
	var members []assign.Member
	for _, o := range s.owners {
		if o.up && !o.draining {
			members = append(members, assign.Member{ID: o.name, Capacity: c.capacity(o.idx)})
		}
	}
	return perOwner, rebalance.Imbalance(members, loads)
}

// capacity is Owner i's capacity (Config.Capacities; 1 without).
func (c *Control) capacity(i int) float64 {
	if caps := c.s.cfg.Capacities; len(caps) > 0 {
		return caps[i%len(caps)]
	}
	return 1
}

// Capacity is Owner i's capacity (Config.Capacities; 1 without).
func (c *Control) Capacity(i int) float64 { return c.capacity(i) }

// Desired is the desired assignment of the replica that leads, which the
// Manager moves the leases towards: the load-aware policy's latest round
// (Config.Rebalance). Nil while no replica has taken over.
func (c *Control) Desired() assign.Assignment {
	if l := c.s.leader(); l != nil && l.rep.Core() != nil {
		return l.rep.Core().Desired(namespace)
	}
	return nil
}

// OwnerName is the ID Owner i uses with the Manager.
func (c *Control) OwnerName(i int) string { return c.s.owners[i].name }

// SetWorkload changes the popularity of the keys from now on (skew
// appearing, or shifting): the Owners' next load reports follow it.
func (c *Control) SetWorkload(w *rebalance.Workload) {
	c.s.cfg.Workload = w
	c.s.hot = w.Top(hotKeys, c.s.cfg.Rate)
}

// TableLSN is the epoch and LSN of the committed lease table (the replica
// furthest ahead; 0, 0 before the first).
func (c *Control) TableLSN() (uint64, keyspace.LSN) {
	st := c.s.furthest()
	if st == nil {
		return 0, 0
	}
	return st.Epoch(), st.Table(namespace).LSN()
}

// LookupLSN is the epoch and LSN of Lookup i's copy, thin or full, and
// whether the Lookup is up.
func (c *Control) LookupLSN(i int) (uint64, keyspace.LSN, bool) {
	l := c.s.lookups[i]
	switch {
	case !l.up:
		return 0, 0, false
	case l.thin != nil:
		return l.thin.Epoch(), l.thin.LSN(), true
	}
	return l.look.Epoch(), l.look.View().LSN(), true
}

// OnTableLSN calls fn whenever the committed lease table's LSN grows (the
// first replica to apply a change), and OnLookupLSN calls fn whenever a
// full Lookup's copy changes LSN: for measuring how changes propagate. One
// Manager epoch only: a Manager that restarts with empty storage starts
// LSNs over.
func (c *Control) OnTableLSN(fn func(keyspace.LSN)) { c.s.onTable = fn }

// OnLookupLSN: see OnTableLSN.
func (c *Control) OnLookupLSN(fn func(lookup int, lsn keyspace.LSN)) { c.s.onLookup = fn }

// StallManager stalls replica i for d: alive, its connections open, it
// answers nothing, and then handles everything that waited (stall.go).
func (c *Control) StallManager(i int, d time.Duration) { c.s.stall(c.s.mgrs[i], d) }

// StallOwner stalls Owner i for d, as StallManager.
func (c *Control) StallOwner(i int, d time.Duration) { c.s.stall(c.s.owners[i], d) }
