package sim

import (
	"time"
)

// The schedule: one virtual real time, and a queue of events (deliveries,
// timers, scheduled functions) popped in a total order, so a seed replays
// the same run. The queue is compacted now and then of events that can no
// longer fire.

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
	gen  uint64 // for a timer: the node's timer generation; for a MsgSnap: the sender's run
	// toInc is, for a message from a Manager replica to a Lookup, the
	// Lookup's incarnation when it was sent: the stream it goes on closes
	// with that process.
	toInc uint64
	fn    func()
}

// queue is the event queue: a binary min-heap ordered by (at, seq), a
// total order, so events pop in the same order whatever the heap's shape.
// Each slot carries its event's key, so that sifting compares without
// following a pointer: with hundreds of thousands of events queued, those
// pointer chases (cache misses) were most of the heap's time.
type queue []qitem

type qitem struct {
	at  time.Duration
	seq uint64
	e   *event
}

func (a qitem) less(b qitem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *queue) push(e *event) {
	*q = append(*q, qitem{e.at, e.seq, e})
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *queue) pop() *event {
	h := *q
	top := h[0].e
	n := len(h) - 1
	h[0] = h[n]
	h[n] = qitem{}
	h = h[:n]
	*q = h
	q.down(0)
	return top
}

func (q queue) down(i int) {
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q[r].less(q[l]) {
			m = r
		}
		if !q[m].less(q[i]) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

// init restores the heap order after the slice was changed at will.
func (q queue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
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
	s.q.push(e)
	if len(s.q) >= s.compactAt {
		s.compact()
	}
}

// minCompact is the queue length below which compact is not worth it
// (Config.queueFloor replaces it in tests).
const minCompact = 1 << 16

// compact drops the timer events that can no longer fire: every step of a
// node sets a new timer (after) and leaves its previous one in the queue,
// to be popped and ignored when its time comes (handle: its gen is old).
// With 100,000 Lookups, each pushed a change every few hundred
// milliseconds while their timers lie a poll (30 s) ahead, those dead
// timers were millions of events, and the heap's work on them most of the
// run's time. The events that stay keep their (at, seq), which alone orders
// the queue, so the run pops the same live events in the same order as
// without compaction. A dropped timer that the run would have popped (at
// or before its end) still counts in Stats.Events, which stays the same.
// It runs when the queue has doubled since the last compaction, so its
// cost is amortised over the pushes.
func (s *Sim) queueFloor() int {
	if s.cfg.queueFloor > 0 {
		return s.cfg.queueFloor
	}
	return minCompact
}

func (s *Sim) compact() {
	s.compactions++
	q := s.q[:0]
	for _, it := range s.q {
		e := it.e
		if e.kind == evTimer && e.gen != s.nodes[e.to].gen {
			if e.at <= s.end {
				s.stats.Events++
			}
			continue
		}
		q = append(q, it)
	}
	clear(s.q[len(q):])
	s.q = q
	s.q.init()
	s.compactAt = max(2*len(s.q), s.queueFloor())
}
