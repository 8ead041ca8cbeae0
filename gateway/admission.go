package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// errShed is a request the admission control turned away.
var errShed = errors.New("shed")

// admission bounds one namespace's requests: at most max in flight to its
// Owners, at most maxQueue waiting for a slot. Waiters are served highest
// class first, in arrival order within a class; when the queue is full, a
// newcomer takes the place of the newest waiter of a lower class, which is
// shed, or is shed itself if there is none (Ninja: lower-priority
// partitions are dropped first under overload).
type admission struct {
	max, maxQueue int

	mu       sync.Mutex
	inFlight int                        // guarded by mu
	queues   [len(classNames)][]*waiter // guarded by mu; FIFO per class
	queued   int                        // guarded by mu
}

var classNames = [...]string{"low", "normal", "high"}

type waiter struct {
	ch    chan error // receives nil (admitted, holding a slot) or errShed
	class int
}

func newAdmission(max, maxQueue int) *admission {
	return &admission{max: max, maxQueue: maxQueue}
}

// acquire waits for a slot for a request of class, until ctx ends. It
// returns nil holding a slot (release it), errShed, or ctx's error.
func (a *admission) acquire(ctx context.Context, class int) error {
	a.mu.Lock()
	if a.inFlight < a.max && a.queued == 0 {
		a.inFlight++
		a.mu.Unlock()
		return nil
	}
	if a.queued >= a.maxQueue {
		victim := a.lowestBelowLocked(class)
		if victim == nil {
			a.mu.Unlock()
			return errShed
		}
		victim.ch <- errShed
	}
	w := &waiter{ch: make(chan error, 1), class: class}
	a.queues[class] = append(a.queues[class], w)
	a.queued++
	a.mu.Unlock()
	select {
	case err := <-w.ch:
		return err
	case <-ctx.Done():
		a.mu.Lock()
		if a.removeLocked(w) {
			a.mu.Unlock()
			return ctx.Err()
		}
		a.mu.Unlock()
		if <-w.ch == nil { // admitted meanwhile: give the slot on
			a.release()
		}
		return ctx.Err()
	}
}

// lowestBelowLocked removes and returns the newest waiter of the lowest
// class below class, or nil.
func (a *admission) lowestBelowLocked(class int) *waiter {
	for c := 0; c < class; c++ {
		if q := a.queues[c]; len(q) > 0 {
			w := q[len(q)-1]
			a.queues[c] = q[:len(q)-1]
			a.queued--
			return w
		}
	}
	return nil
}

func (a *admission) removeLocked(w *waiter) bool {
	q := a.queues[w.class]
	for i, x := range q {
		if x == w {
			a.queues[w.class] = append(q[:i:i], q[i+1:]...)
			a.queued--
			return true
		}
	}
	return false
}

// release gives a slot back, to the first waiter of the highest class.
func (a *admission) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := len(a.queues) - 1; c >= 0; c-- {
		if q := a.queues[c]; len(q) > 0 {
			a.queues[c] = q[1:]
			a.queued--
			q[0].ch <- nil // the slot passes on: inFlight is unchanged
			return
		}
	}
	a.inFlight--
}

// load returns the requests in flight and queued.
func (a *admission) load() (inFlight, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight, a.queued
}

// ownerSlots bounds the requests in flight to each Owner.
type ownerSlots struct {
	max int64
	m   sync.Map // owner ID → *atomic.Int64
}

func (o *ownerSlots) tryAcquire(owner string) bool {
	v, _ := o.m.LoadOrStore(owner, new(atomic.Int64))
	n := v.(*atomic.Int64)
	if n.Add(1) > o.max {
		n.Add(-1)
		return false
	}
	return true
}

func (o *ownerSlots) release(owner string) {
	if v, ok := o.m.Load(owner); ok {
		v.(*atomic.Int64).Add(-1)
	}
}
