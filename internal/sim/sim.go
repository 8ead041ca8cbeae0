package sim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

const namespace = manager.DefaultNamespace

// base is the virtual wall time every local clock is offset from.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type kind int

const (
	managerNode kind = iota
	ownerNode
	lookupNode
)

type node struct {
	kind   kind
	idx    int // index among nodes of its kind
	name   string
	up     bool
	inc    uint64 // runs so far
	rate   float64
	offset time.Duration
	gen    uint64 // timer generation: a timer event of an older one is stale
	part   int    // partition group; nodes in different groups cannot talk

	mgr     *manager.Core
	own     *owner.Core
	look    *lookup.Core
	thin    *thinLookup // instead of look, with Config.ThinLookups
	session uint64      // the Lookup's session with the Manager
}

// local is the node's clock reading at virtual real time t.
func (n *node) local(t time.Duration) time.Time {
	return base.Add(n.offset + time.Duration(float64(t)*n.rate))
}

// real is the earliest virtual real time at which the node's clock reads at
// least l.
func (n *node) real(l time.Time) time.Duration {
	return time.Duration(math.Ceil(float64(l.Sub(base)-n.offset) / n.rate))
}

type evKind int

const (
	evDeliver evKind = iota
	evTimer
	evFunc
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	to   int
	from int
	msg  any
	gen  uint64
	fn   func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Sim is one simulated run.
type Sim struct {
	cfg      Config
	rng      *rand.Rand
	now      time.Duration
	q        queue
	seq      uint64
	nodes    []*node
	mgr      *node
	owners   []*node
	lookups  []*node
	byOwner  map[string]*node
	bySess   map[uint64]*node
	faulting bool
	epoch    uint64
	nextPart int
	chk      *checker
	stats    Stats
	stopped  bool // Control.Stop was called
}

// Stats describes a run.
type Stats struct {
	Virtual         time.Duration
	Events          int
	OwnerCrashes    int
	LookupCrashes   int
	ManagerRestarts int
	Partitions      int
	Messages        int // delivered or not
	Dropped         int
	Duplicated      int
	LeaseMessages   int   // Owner ↔ Manager
	LeaseBytes      int64 // Owner ↔ Manager, estimated wire size
	SyncBytes       int64 // Lookup ↔ Manager, estimated wire size
	LossEvents      int   // unmigrated LGN changes recorded by the Manager
	Notified        int   // (loss, lookup) pairs notified in time
	WorstDelay      time.Duration
	Bound           time.Duration
	Segments        int // lease-table segments at the end
	ViewBytes       int // a Lookup's copy at the end
}

// MessagesPerOwnerMinute is the Owner ↔ Manager message rate per owner.
func (s Stats) MessagesPerOwnerMinute(owners int) float64 {
	return float64(s.LeaseMessages) / float64(owners) / s.Virtual.Minutes()
}

// Result is the outcome of a run.
type Result struct {
	Seed      uint64
	Violation *Violation // the first checker violation, if any
	Stats     Stats
}

// Violation is a broken guarantee, with when and how.
type Violation struct {
	Checker string // "single copy", "continuity", "recovery notification", "convergence"
	At      time.Duration
	Detail  string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s violated at %s: %s", v.Checker, v.At, v.Detail)
}

// Run runs cfg to the end or to the first violation.
func Run(cfg Config) Result {
	if cfg.ThinLookups && !cfg.NoChecks {
		panic("sim: ThinLookups requires NoChecks: the checkers read every Lookup's copy")
	}
	if !cfg.Unvalidated {
		if err := cfg.Timing.Validate(); err != nil {
			panic(err)
		}
	}
	if cfg.SettleTime == 0 {
		cfg.SettleTime = ConvergenceBound(cfg.Timing)
	}
	s := &Sim{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x1ea5e401d)),
		byOwner: map[string]*node{},
		bySess:  map[uint64]*node{},
	}
	s.chk = newChecker(s)
	s.chk.off = cfg.NoChecks
	s.mgr = s.addNode(managerNode, 0, "manager")
	for i := range cfg.Owners {
		n := s.addNode(ownerNode, i, fmt.Sprintf("owner-%02d", i))
		s.owners = append(s.owners, n)
		s.byOwner[n.name] = n
	}
	for i := range cfg.Lookups {
		s.lookups = append(s.lookups, s.addNode(lookupNode, i, fmt.Sprintf("lookup-%02d", i)))
	}
	s.faulting = true
	for _, n := range s.nodes {
		if cfg.StartSpread > 0 && n != s.mgr {
			s.at(s.uniform(0, cfg.StartSpread), func() {
				if !n.up {
					s.start(n)
				}
			})
			continue
		}
		s.start(n)
	}
	s.scheduleFaults()
	s.at(cfg.FaultTime, s.stopFaults)
	end := cfg.FaultTime + cfg.SettleTime
	if !cfg.NoChecks {
		s.every(s.chk.bound/8, end, s.chk.deadlines)
	}
	if cfg.Script != nil {
		cfg.Script(&Control{s: s, end: end})
	}
	for s.q.Len() > 0 && s.chk.violation == nil && !s.stopped {
		e := heap.Pop(&s.q).(*event)
		if e.at > end {
			break
		}
		s.now = e.at
		s.stats.Events++
		s.handle(e)
	}
	s.now = end
	if s.chk.violation == nil {
		s.chk.deadlines()
	}
	if s.chk.violation == nil {
		s.chk.converged()
	}
	s.stats.Virtual = end
	s.stats.Bound = s.chk.bound
	if t := s.mgr.mgr.Table(namespace); t != nil {
		s.stats.Segments = t.Len()
	}
	for _, l := range s.lookups {
		if l.up && l.look != nil {
			s.stats.ViewBytes = l.look.View().Bytes()
			break
		}
	}
	return Result{Seed: cfg.Seed, Violation: s.chk.violation, Stats: s.stats}
}

// clock reads the real clock that times Manager calls, if anyone listens.
func (s *Sim) clock() time.Time {
	switch {
	case s.cfg.Probe == nil:
		return time.Time{}
	case s.cfg.Stopwatch != nil:
		return s.cfg.Stopwatch()
	}
	return time.Now()
}

// work reports a Manager call that started at t0 (from clock).
func (s *Sim) work(t0 time.Time) {
	if s.cfg.Probe != nil {
		s.cfg.Probe.ManagerWork(s.now, s.clock().Sub(t0))
	}
}

func (s *Sim) addNode(k kind, idx int, name string) *node {
	n := &node{kind: k, idx: idx, name: name, rate: 1}
	s.nodes = append(s.nodes, n)
	return n
}

// at schedules fn at virtual time t.
func (s *Sim) at(t time.Duration, fn func()) {
	s.push(&event{at: t, kind: evFunc, fn: fn})
}

// every runs fn every d until end.
func (s *Sim) every(d, end time.Duration, fn func()) {
	var tick func()
	tick = func() {
		fn()
		if s.now+d <= end {
			s.at(s.now+d, tick)
		}
	}
	s.at(d, tick)
}

func (s *Sim) push(e *event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *Sim) handle(e *event) {
	switch e.kind {
	case evFunc:
		e.fn()
	case evTimer:
		n := s.nodes[e.to]
		if !n.up || e.gen != n.gen {
			return
		}
		s.tick(n)
	case evDeliver:
		n := s.nodes[e.to]
		if !n.up || s.nodes[e.from].part != n.part {
			s.stats.Dropped++
			return
		}
		s.deliver(n, e)
	}
}

func (s *Sim) tick(n *node) {
	now := n.local(s.now)
	switch n.kind {
	case managerNode:
		t0 := s.clock()
		n.mgr.Tick(now)
		s.work(t0)
	case ownerNode:
		n.own.Tick(now)
	case lookupNode:
		if n.thin != nil {
			n.thin.tick(now)
		} else {
			n.look.Tick(now)
		}
	}
	s.after(n)
}

// traceNode names a node whose messages are printed to stdout as the run
// goes (the -sim.trace flag of the tests, for replaying one seed). It is set
// before any run starts and only read afterwards.
var traceNode string

func (s *Sim) trace(n *node, format string, args ...any) {
	if traceNode != "" && n.name == traceNode {
		fmt.Printf("%12s %s: %s\n", s.now, n.name, fmt.Sprintf(format, args...))
	}
}

func (s *Sim) deliver(n *node, e *event) {
	now := n.local(s.now)
	if m, ok := e.msg.(*protocol.SyncResponse); ok && traceNode != "" && n.look != nil {
		s.trace(n, "recv id=%d epoch=%d snap=%v from=%d to=%d changes=%d viewLSN=%d", m.ID, m.Epoch, m.Update.Snapshot, m.Update.From, m.Update.To, len(m.Update.Changes), n.look.View().LSN())
	}
	switch n.kind {
	case managerNode:
		var err error
		if s.cfg.Probe != nil {
			s.cfg.Probe.ManagerTraffic(s.now, wireSize(e.msg), false)
		}
		t0 := s.clock()
		switch m := e.msg.(type) {
		case *protocol.LeaseRequest:
			err = n.mgr.StepLease(now, m)
		case *protocol.SyncRequest:
			err = n.mgr.StepSync(now, s.nodes[e.from].session, m)
		}
		s.work(t0)
		if err != nil {
			panic(fmt.Sprintf("manager rejected a well-formed message: %v", err))
		}
	case ownerNode:
		m := e.msg.(*protocol.LeaseResponse)
		s.trace(n, "recv resp epoch=%d seq=%d ack=%d inc=%d leases=%d (my inc=%d)", m.Epoch, m.Seq, m.AckSeq, m.Incarnation, len(m.Leases), n.inc)
		before := s.chk.heldNums(n)
		n.own.Step(now, m)
		s.chk.ownerStepped(n, before)
	case lookupNode:
		m := e.msg.(*protocol.SyncResponse)
		if n.thin != nil {
			n.thin.step(now, m)
		} else {
			n.look.Step(now, m)
		}
	}
	s.after(n)
}

// after sends what the node's core asks for, hands its upcalls to the
// checkers, and sets its timer.
func (s *Sim) after(n *node) {
	var deadline time.Time
	switch n.kind {
	case managerNode:
		s.chk.managerStepped()
		t0 := s.clock()
		r := n.mgr.Ready()
		deadline = n.mgr.NextDeadline()
		s.work(t0)
		for _, m := range r.Owners {
			if to := s.byOwner[m.To]; to != nil {
				s.send(n, to, m.Msg)
			}
		}
		for _, m := range r.Lookups {
			if to := s.bySess[m.To]; to != nil {
				s.send(n, to, m.Msg)
			}
		}
	case ownerNode:
		out, changes := n.own.Ready()
		for _, m := range out {
			s.trace(n, "send req seq=%d ackE=%d ackS=%d held=%d inc=%d", m.Seq, m.AckEpoch, m.AckSeq, len(m.Held), m.Incarnation)
		}
		s.chk.ownerChanges(n, changes)
		for _, m := range out {
			s.send(n, s.mgr, m)
		}
		deadline = n.own.NextDeadline()
	case lookupNode:
		if n.thin != nil {
			for _, m := range n.thin.ready() {
				s.send(n, s.mgr, m)
			}
			deadline = n.thin.nextDeadline()
			break
		}
		out, losses := n.look.Ready()
		for _, l := range losses {
			s.trace(n, "loss all=%v %d ranges", l.All, len(l.Ranges))
		}
		for _, m := range out {
			s.trace(n, "send sync id=%d lsn=%d epoch=%d", m.ID, m.LSN, m.Epoch)
		}
		s.chk.lookupLosses(n, losses)
		for _, m := range out {
			s.send(n, s.mgr, m)
		}
		deadline = n.look.NextDeadline()
	}
	if s.chk.violation != nil {
		return
	}
	n.gen++
	t := s.now
	if deadline.After(n.local(s.now)) {
		t = n.real(deadline)
		for n.local(t).Before(deadline) { // float rounding
			t++
		}
	}
	s.push(&event{at: t, kind: evTimer, to: s.index(n), gen: n.gen})
}

func (s *Sim) index(n *node) int {
	switch n.kind {
	case managerNode:
		return 0
	case ownerNode:
		return 1 + n.idx
	}
	return 1 + len(s.owners) + n.idx
}

// send puts a message on the network: partitions and drops lose it, delays
// reorder it, and it may arrive twice.
func (s *Sim) send(from, to *node, msg any) {
	s.stats.Messages++
	size := wireSize(msg)
	if from.kind == managerNode && s.cfg.Probe != nil {
		s.cfg.Probe.ManagerTraffic(s.now, size, true)
	}
	if from.kind == ownerNode || to.kind == ownerNode {
		s.stats.LeaseMessages++
		s.stats.LeaseBytes += int64(size)
	} else {
		s.stats.SyncBytes += int64(size)
	}
	if from.part != to.part || (s.faulting && s.rng.Float64() < s.cfg.DropRate) {
		s.stats.Dropped++
		return
	}
	copies := 1
	if s.faulting && s.rng.Float64() < s.cfg.DupRate {
		copies = 2
		s.stats.Duplicated++
	}
	for range copies {
		s.push(&event{at: s.now + s.delay(), kind: evDeliver, from: s.index(from), to: s.index(to), msg: msg})
	}
}

func (s *Sim) delay() time.Duration {
	c := s.cfg
	if s.faulting && c.MaxDelay > 0 && s.rng.Float64() < c.LongDelayRate {
		return c.MaxDelay/2 + time.Duration(s.rng.Int64N(int64(c.MaxDelay/2)+1))
	}
	return c.MinDelay + time.Duration(s.rng.Int64N(int64(3*c.MinDelay)+1))
}

// start boots a node (again): a new run with no memory of the last one, a new
// clock rate, and for the Manager a new epoch.
func (s *Sim) start(n *node) {
	n.up = true
	n.inc++
	n.rate, n.offset = 1, 0
	if s.cfg.ClockSkew {
		// Rates within [1/√(1+d), √(1+d)]: any two differ by at most 1+d.
		hi := math.Sqrt(1 + s.cfg.Timing.MaxDrift)
		switch s.rng.IntN(4) {
		case 0:
			n.rate = hi
		case 1:
			n.rate = 1 / hi
		default:
			n.rate = 1/hi + s.rng.Float64()*(hi-1/hi)
		}
		// Clocks are not synchronized, only their rates bounded (C§2.3.1).
		n.offset = time.Duration(s.rng.Int64N(int64(2*time.Hour))) - time.Hour
	}
	now := n.local(s.now)
	seed := s.rng.Uint64()
	switch n.kind {
	case managerNode:
		s.epoch++
		n.mgr = manager.NewCore(manager.CoreConfig{
			Timing: s.cfg.Timing, Policy: s.cfg.Policy, Epoch: s.epoch, Seed: seed, Faults: s.cfg.Break,
		}, now)
	case ownerNode:
		n.own = owner.NewCore(owner.CoreConfig{
			Namespace: namespace, ID: n.name, Addr: n.name + ":7000", Incarnation: n.inc,
			Timing: s.cfg.Timing, Seed: seed, Faults: s.cfg.Break,
		})
		s.chk.ownerStarted(n)
	case lookupNode:
		delete(s.bySess, n.session)
		n.session = uint64(n.idx)<<32 | n.inc
		s.bySess[n.session] = n
		if s.cfg.ThinLookups {
			n.thin = newThinLookup(s.cfg.Timing, now)
			break
		}
		n.look = lookup.NewCore(lookup.CoreConfig{Namespace: namespace, Timing: s.cfg.Timing, Faults: s.cfg.Break}, now)
		s.chk.lookupStarted(n)
	}
	s.after(n)
}

// crash stops a node: it loses all state; its timers and in-flight messages
// to it go nowhere.
func (s *Sim) crash(n *node) {
	if !n.up {
		return
	}
	n.up = false
	n.gen++
	switch n.kind {
	case managerNode:
		s.stats.ManagerRestarts++
		s.chk.managerCrashed()
	case ownerNode:
		s.stats.OwnerCrashes++
	case lookupNode:
		s.stats.LookupCrashes++
		s.chk.lookupCrashed(n)
	}
}

func (s *Sim) exp(mean time.Duration) time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(mean))
}

func (s *Sim) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

func (s *Sim) scheduleFaults() {
	c, t := s.cfg, s.cfg.Timing
	repeat := func(mean time.Duration, fn func()) {
		if mean <= 0 {
			return
		}
		var next func()
		next = func() {
			if !s.faulting {
				return
			}
			fn()
			s.at(s.now+s.exp(mean), next)
		}
		s.at(s.exp(mean), next)
	}
	repeat(c.OwnerCrashEvery, func() {
		if n := s.pickUp(s.owners); n != nil {
			s.crash(n)
			s.at(s.now+s.uniform(0, 3*t.ManagerLease), func() { s.restart(n) })
		}
	})
	repeat(c.LookupCrashEvery, func() {
		if n := s.pickUp(s.lookups); n != nil {
			s.crash(n)
			s.at(s.now+s.uniform(0, 2*t.SyncTimeout), func() { s.restart(n) })
		}
	})
	repeat(c.ManagerCrashEvery, func() {
		s.crash(s.mgr)
		s.at(s.now+s.uniform(0, 2*t.ManagerLease), func() { s.restart(s.mgr) })
	})
	repeat(c.PartitionEvery, func() {
		s.stats.Partitions++
		s.nextPart++
		p := s.nextPart
		// Cut off a random group; a third of the time the Manager is in it
		// with the Owners that are, isolated from everyone else.
		withMgr := s.rng.IntN(3) == 0
		if withMgr {
			s.mgr.part = p
		}
		for _, n := range append(append([]*node{}, s.owners...), s.lookups...) {
			if s.rng.IntN(4) == 0 {
				n.part = p
			}
		}
		s.at(s.now+s.uniform(t.ManagerLease/4, 3*t.ManagerLease), func() {
			for _, n := range s.nodes {
				if n.part == p {
					n.part = 0
				}
			}
		})
	})
}

func (s *Sim) restart(n *node) {
	if !n.up && s.faulting {
		s.start(n)
	}
}

func (s *Sim) pickUp(ns []*node) *node {
	var up []*node
	for _, n := range ns {
		if n.up {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[s.rng.IntN(len(up))]
}

// stopFaults heals the network and brings every node back.
func (s *Sim) stopFaults() {
	s.faulting = false
	for _, n := range s.nodes {
		n.part = 0
		if !n.up {
			s.start(n)
		}
	}
}
