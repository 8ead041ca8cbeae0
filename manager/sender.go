// A stream's queue of messages to send, and the goroutine that sends them
// only while there are some.

package manager

import "sync"

// sender queues a stream's messages and writes them on a goroutine of its
// own that runs only while the queue holds messages: the loop offers a
// message, which starts the goroutine if none runs, and the goroutine ends
// once the queue is empty. An idle stream (a Lookup between polls, an
// Owner between renewals) so costs one goroutine, its handler blocked in
// Recv, rather than two: at tens of thousands of streams the parked
// senders' stacks were a large part of the Manager's memory per stream.
//
// The queue is a slice that exists only while messages wait: it is
// allocated by the first message of a burst and dropped when the goroutine
// ends, so an idle stream holds no queue either. A channel of limit
// messages, allocated with the stream, cost a Lookup's stream 1.1 KB of
// heap for its whole life (64 messages of 16 bytes), a quarter of its live
// heap at the Manager.
//
// Messages go out in the order queued: one goroutine at most sends at a
// time, and it takes them from the front of the queue.
type sender[T any] struct {
	send  func(T) error // nil: nothing sends; a test reads the queue itself
	limit int           // messages that may wait; more are lost

	mu      sync.Mutex
	queue   []T // waiting, queue[head] first; nil when no goroutine runs
	head    int
	running bool // a goroutine is sending
	stopped bool // the handler is returning, or a send failed: no more sends
	wg      sync.WaitGroup
}

func newSender[T any](limit int, send func(T) error) *sender[T] {
	return &sender[T]{send: send, limit: limit}
}

// offer queues m and makes sure a goroutine sends it. It never blocks:
// with limit messages waiting it returns false and m is lost, which the
// protocol tolerates like any other lost message. After stop, m is
// dropped, as a message queued to a stream whose sender has ended always
// was.
func (s *sender[T]) offer(m T) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return true
	}
	if len(s.queue)-s.head >= s.limit {
		s.mu.Unlock()
		return false
	}
	if s.head > 0 && len(s.queue) == cap(s.queue) {
		// Full at the back with room at the front: move the waiting
		// messages down rather than grow.
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue, s.head = s.queue[:n], 0
	}
	s.queue = append(s.queue, m)
	start := !s.running && s.send != nil
	if start {
		s.running = true
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if start {
		go s.run()
	}
	return true
}

// waiting is the number of messages queued that no goroutine has taken.
func (s *sender[T]) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) - s.head
}

// next takes the message at the front of the queue; ok is false when the
// queue is empty.
func (s *sender[T]) next() (m T, ok bool) {
	if s.head == len(s.queue) {
		return m, false
	}
	m = s.queue[s.head]
	var zero T
	s.queue[s.head] = zero
	s.head++
	if s.head == len(s.queue) {
		s.queue, s.head = s.queue[:0], 0
	}
	return m, true
}

// run sends until the queue is empty. Taking the last message's absence
// and the end of running are one step under mu, and offer queues under
// mu: a message queued while run ends is either seen here or finds
// running false and starts a new goroutine.
func (s *sender[T]) run() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		m, ok := s.next()
		if !ok || s.stopped {
			// Empty, or the handler is returning: as a parked sender
			// ended with its stream's context, what is still queued is
			// not sent. The queue goes with the goroutine.
			s.running, s.queue, s.head = false, nil, 0
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.send(m); err != nil {
			s.mu.Lock()
			s.running, s.stopped, s.queue, s.head = false, true, nil, 0
			s.mu.Unlock()
			return
		}
	}
}

// stop starts no more sends and waits for one under way to end.
func (s *sender[T]) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.wg.Wait()
}
