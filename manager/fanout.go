package manager

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// The loop hands messages to stream goroutines, each of which then runs to
// write its message: a push round to every Lookup wakes one goroutine per
// Lookup (and its connection's writer). Handed all at once, thousands of
// them queue on the Go scheduler's run queues, and the goroutines an
// Owner's renewal needs — its connection's reader, its handler, its
// answer's sender — wait behind the whole round: at 1,000 Owners and 4,000
// Lookups under churn, hundreds of milliseconds.
//
// So the loop paces the Lookups' messages (fanout): it hands a Lookup's
// message to its stream only while fewer than maxPushWaking Lookup streams
// it has woken have not yet taken theirs, and keeps the rest in order in a
// backlog, handing more as the woken streams take theirs (each says so on
// Server.pushWake). Owners' answers are never paced: they go to their
// streams at once, ahead of any backlog, so a renewal waits behind at most
// maxPushWaking Lookups' sends rather than a whole round. A push round
// takes as much CPU as before, spread so the scheduler is never thousands
// of goroutines deep.
//
// Nothing here changes what is sent, only when: a Lookup message is read
// from applied state, and a Lookup counts its copy fresh from when it
// asked, never from when an answer arrived, so a later send is as safe as
// a slower network. Each stream gets its messages in the order the
// replica made them (the backlog is one queue).
const (
	// maxPushWaking bounds the Lookup streams woken and not yet running:
	// enough to keep both cores of a small machine busy with sends, few
	// enough that a renewal's goroutines wait behind at most this many.
	maxPushWaking = 64
	// pushStuckAfter: a woken stream that has not taken its message after
	// this long is no longer counted as waking. Its goroutine is not
	// waiting to run but blocked (in the write of an earlier message, on a
	// Lookup that reads slowly), and must not hold up the others.
	pushStuckAfter = 20 * time.Millisecond
	// maxPushBacklog bounds the Lookup messages waiting in the backlog; one
	// past it is dropped, a lost message the Lookup recovers from by its
	// next sync, as from a full stream queue. It is far above a round's
	// size at the documented limits (one message per Lookup).
	maxPushBacklog = 1 << 18
)

// fanout is the loop's paced queue of Lookup messages (loop only).
type fanout struct {
	backlog []queuedPush // in the order the replica made them
	head    int          // backlog[head:] is waiting
	waking  []wokenStream
}

type queuedPush struct {
	st  *lookupStream
	out syncOut
	lsn keyspace.LSN // the LSN its update brings the Lookup to
}

type wokenStream struct {
	st *lookupStream
	at time.Time
}

// pushTaken is called by a Lookup stream's sender when it takes a message
// from its queue: the loop may wake another stream.
func (s *Server) pushTaken() {
	select {
	case s.pushWake <- struct{}{}:
	default:
	}
}

// queue adds a message for st behind those waiting, or drops it if the
// backlog is full.
func (f *fanout) queue(st *lookupStream, out syncOut, lsn keyspace.LSN) bool {
	if f.pending() >= maxPushBacklog {
		return false
	}
	f.backlog = append(f.backlog, queuedPush{st, out, lsn})
	return true
}

func (f *fanout) pending() int { return len(f.backlog) - f.head }

// forget drops st from the streams counted as waking (it closed).
func (f *fanout) forget(st *lookupStream) {
	for i := 0; i < len(f.waking); i++ {
		if f.waking[i].st == st {
			f.waking[i] = f.waking[len(f.waking)-1]
			f.waking = f.waking[:len(f.waking)-1]
			i--
		}
	}
}

// pump hands waiting messages to their streams while fewer than
// maxPushWaking woken streams have not taken theirs. A message whose
// stream has closed is skipped, and one whose stream's queue
// is full is lost, as before pacing.
func (l *loop) pump(now time.Time) {
	f := &l.push
	keep := f.waking[:0]
	for _, w := range f.waking {
		if w.st.snd.waiting() > 0 && now.Sub(w.at) < pushStuckAfter {
			keep = append(keep, w)
		}
	}
	clear(f.waking[len(keep):])
	f.waking = keep
	for f.head < len(f.backlog) && len(f.waking) < maxPushWaking {
		q := f.backlog[f.head]
		f.backlog[f.head] = queuedPush{}
		f.head++
		if l.lookups[q.st.id] != q.st {
			continue // closed
		}
		idle := q.st.snd.waiting() == 0 // no sender runs for it: this starts one
		if !q.st.snd.offer(q.out) {
			l.dropped++
			continue
		}
		q.st.sent = max(q.st.sent, q.lsn)
		if idle {
			f.waking = append(f.waking, wokenStream{q.st, now})
		}
	}
	if f.head == len(f.backlog) {
		clear(f.backlog)
		f.backlog, f.head = f.backlog[:0], 0
	} else if f.head > len(f.backlog)/2 && f.head > 1024 {
		n := copy(f.backlog, f.backlog[f.head:])
		clear(f.backlog[n:])
		f.backlog, f.head = f.backlog[:n], 0
	}
	if f.pending() == 0 {
		// Every message made so far is with its stream: the propagation
		// lags are complete. (Observing walks every Lookup; not on every
		// wake of a round under way.)
		l.obs.pushed(l.s.metrics, l.lookups, now)
	}
}

// pumpDeadline is when pump must run again even if no stream says it took
// a message: when the oldest woken stream counts as stuck. Zero: not
// needed (nothing waits, or nothing is woken to wait for).
func (f *fanout) pumpDeadline() time.Time {
	if f.pending() == 0 || len(f.waking) == 0 {
		return time.Time{}
	}
	d := f.waking[0].at
	for _, w := range f.waking[1:] {
		if w.at.Before(d) {
			d = w.at
		}
	}
	return d.Add(pushStuckAfter)
}
