package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// session is one application's connection: its Owner, the events it is
// sent, and what it has acknowledged.
type session struct {
	a     *Agent
	id    string
	owner *owner.Owner
	ready chan struct{} // closed once owner is set

	events  chan *pb.AgentEvent // to the application, in order
	endc    chan struct{}       // closed when the session ends
	stopped chan struct{}       // closed when the Owner has stopped
	endOnce sync.Once

	mu        sync.Mutex
	version   uint64
	last      *pb.AgentEvent // the latest event queued
	applied   uint64         // the latest version the application applied
	pending   []release      // revocations waiting for the application
	handovers map[uint64]owner.Handover
	nextHO    uint64
	heard     time.Time // the application's latest message
	draining  bool
	drainOver bool   // the Owner's drain finished: nothing held
	drainedAt uint64 // the version of the event that said drained; 0: not drained
	reason    string
	sent      time.Time   // when the latest event was queued
	expiries  []time.Time // the Owner's expiries in it
	// known is what the upcalls have reported held, by lease: the Owner
	// publishes a grant before its upcall, and an event must not show the
	// application a lease before the event that grants it (and says
	// whether it comes with the previous holder's state).
	known map[owner.LeaseNum]keyspace.RangeSet
}

// reported returns the parts of held that the upcalls have reported
// granted. It is called with mu held.
func (s *session) reported(held []owner.Lease) []owner.Lease {
	var out []owner.Lease
	for _, l := range held {
		for _, r := range s.known[l.Num].Intersect(keyspace.NewRangeSet(l.Range)).Ranges() {
			p := l
			p.Range = r
			out = append(out, p)
		}
	}
	return out
}

// renewed reports whether the Owner's expiries moved since the latest
// event. It is called with mu held.
func (s *session) renewed() bool {
	held := s.owner.Held()
	if len(held) != len(s.expiries) {
		return true
	}
	for i, l := range held {
		if !l.Expiry.Equal(s.expiries[i]) {
			return true
		}
	}
	return false
}

// release is a revocation the application has not yet acknowledged: the
// Owner keeps the ranges listed to the Manager (owner.Config
// ConfirmReleases) until the application applies an event built after
// the revocation, version or later.
type release struct {
	version uint64
	ranges  []keyspace.Range
}

func newSession(a *Agent, id string) *session {
	s := &session{a: a, id: id, ready: make(chan struct{}), events: make(chan *pb.AgentEvent, eventQueue),
		endc: make(chan struct{}), stopped: make(chan struct{}), handovers: map[uint64]owner.Handover{}, heard: time.Now(),
		known: map[owner.LeaseNum]keyspace.RangeSet{}}
	return s
}

// start sets the Owner and runs the heartbeat; the first event goes out at
// once.
func (s *session) start(o *owner.Owner) {
	s.owner = o
	close(s.ready)
	s.mu.Lock()
	s.emit(nil)
	s.mu.Unlock()
	go s.run()
}

// renewPoll is how often the agent looks for renewals to pass on: the
// deadlines follow each renewal within it, whatever the Manager's timings.
const renewPoll = 50 * time.Millisecond

// run sends an event when a renewal moved the deadlines, and a heartbeat
// at least every Heartbeat; it ends a session whose application went
// quiet.
func (s *session) run() {
	t := time.NewTicker(min(renewPoll, s.a.cfg.Heartbeat))
	defer t.Stop()
	for {
		select {
		case <-s.endc:
			return
		case <-t.C:
		}
		s.mu.Lock()
		quiet := time.Since(s.heard)
		if quiet <= s.a.cfg.AppTimeout && (time.Since(s.sent) >= s.a.cfg.Heartbeat || s.renewed()) {
			s.emit(nil)
		}
		s.mu.Unlock()
		if quiet > s.a.cfg.AppTimeout {
			s.end(fmt.Sprintf("the application sent nothing for %s (the timeout is %s)", quiet.Round(time.Millisecond), s.a.cfg.AppTimeout))
		}
	}
}

// onChange is the Owner's upcall: one event per change, in order.
func (s *session) onChange(c owner.OwnershipChange) {
	<-s.ready
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emit(&c)
}

// emit queues the next event: the held set now, with deadlines, and c's
// changes. It is called with mu held.
func (s *session) emit(c *owner.OwnershipChange) {
	s.version++
	if c != nil {
		for _, r := range c.Revoked {
			for n, rs := range s.known {
				if rs = rs.Subtract(keyspace.NewRangeSet(r)); rs.Empty() {
					delete(s.known, n)
				} else {
					s.known[n] = rs
				}
			}
		}
		for _, g := range c.Granted {
			s.known[g.Num] = s.known[g.Num].Add(g.Range)
		}
	}
	held := s.owner.Held()
	s.expiries = s.expiries[:0]
	for _, l := range held {
		s.expiries = append(s.expiries, l.Expiry)
	}
	s.sent = time.Now()
	ev := &pb.AgentEvent{Version: s.version, Held: leasesOf(s.reported(held))}
	if s.version == 1 {
		ev.Session, ev.Owner, ev.Addr = s.id, s.a.cfg.Owner.ID, s.a.cfg.Owner.Addr
	}
	if c != nil {
		ev.Granted = leasesOf(c.Granted)
		for _, r := range c.Revoked {
			ev.Revoked = append(ev.Revoked, rangePB(r))
		}
		if len(c.Revoked) > 0 {
			// Built after the Owner gave these up: an application that
			// applied it no longer serves them.
			s.pending = append(s.pending, release{s.version, slices.Clone(c.Revoked)})
		}
		for _, h := range c.Handovers {
			s.nextHO++
			s.handovers[s.nextHO] = h
			ev.Handovers = append(ev.Handovers, &pb.AgentHandover{Id: s.nextHO, Range: rangePB(h.Range), Epoch: h.Lease.Epoch,
				Lgn: uint64(h.Lease.LGN), To: h.To, Addr: h.Addr, DeadlineNs: deadline(h.Deadline)})
		}
	}
	if s.drainedAt == 0 && s.drainOver && len(ev.Held) == 0 {
		ev.Drained, s.drainedAt = true, s.version
	}
	ev.NowNs = monoNow()
	s.last = ev
	select {
	case s.events <- ev:
	default:
		go s.end(fmt.Sprintf("the application left %d events unread", eventQueue))
	}
}

// handle applies one message of the application.
func (s *session) handle(m *pb.AppMessage) error {
	if n := len(m.GetLoad()); n > MaxLoadKeys {
		return fmt.Errorf("agent: %d key counts in one message; at most %d (MaxLoadKeys)", n, MaxLoadKeys)
	}
	if n := len(m.GetHandovers()); n > MaxHandoverResults {
		return fmt.Errorf("agent: %d handover results in one message; at most %d (MaxHandoverResults)", n, MaxHandoverResults)
	}
	s.mu.Lock()
	if v := s.version; m.GetApplied() > v {
		s.mu.Unlock()
		return fmt.Errorf("agent: applied %d, but the latest event sent is %d", m.GetApplied(), v)
	}
	s.heard = time.Now()
	var released []keyspace.Range
	if m.GetApplied() > s.applied {
		s.applied = m.GetApplied()
		kept := s.pending[:0]
		for _, r := range s.pending {
			if r.version <= s.applied {
				released = append(released, r.ranges...)
			} else {
				kept = append(kept, r)
			}
		}
		s.pending = kept
	}
	var done []owner.Handover
	var oks []bool
	for _, r := range m.GetHandovers() {
		if h, ok := s.handovers[r.GetId()]; ok {
			delete(s.handovers, r.GetId())
			done, oks = append(done, h), append(oks, r.GetOk())
		}
	}
	drain := m.GetDrain() && !s.draining
	if drain {
		s.draining = true
	}
	s.mu.Unlock()

	if len(released) > 0 {
		s.owner.Released(released)
	}
	for i, h := range done {
		s.owner.HandoverDone(h, oks[i])
	}
	for _, kc := range m.GetLoad() {
		s.owner.Count(keyspace.Key(kc.GetKey()), kc.GetCount())
	}
	if drain {
		go s.drain()
	}
	return nil
}

// drain moves every range away for the application, then says so.
func (s *session) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), s.a.cfg.DrainTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.endc:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.drainFor(ctx)
}

// drainFor drains for at most ctx and, if nothing is held after, sends the
// event that says drained.
func (s *session) drainFor(ctx context.Context) {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	if err := s.owner.Drain(ctx); err != nil {
		s.a.cfg.Logger.Warn("agent: the drain did not finish", "session", s.id, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainOver = true
	if s.drainedAt == 0 {
		s.emit(nil)
	}
}

// drainedApplied reports whether the application applied the event that
// said drained.
func (s *session) drainedApplied() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drainedAt != 0 && s.applied >= s.drainedAt
}

// check answers for key from the latest event.
func (s *session) check(key keyspace.Key) *pb.CheckResponse {
	s.mu.Lock()
	ev := s.last
	s.mu.Unlock()
	resp := &pb.CheckResponse{Version: ev.GetVersion()}
	held := ev.GetHeld()
	i, ok := slices.BinarySearchFunc(held, key, func(l *pb.AgentLease, k keyspace.Key) int {
		switch r := rangeOf(l.GetRange()); {
		case r.Contains(k):
			return 0
		case uint64(r.Start) > uint64(k):
			return 1
		default:
			return -1
		}
	})
	if ok {
		resp.Held, resp.Lease = true, held[i]
		s.owner.Count(key, 1)
	}
	return resp
}

// end ends the session once; the Owner then stops: it leaves if the
// application applied the drained event, and otherwise stops renewing at
// once, so that every range lapses at the Manager and is reported lost
// (nothing the application may still believe is freed early).
func (s *session) end(reason string) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.reason = reason
		s.mu.Unlock()
		leave := s.drainedApplied()
		close(s.endc)
		s.a.cfg.Logger.Info("agent: session ended", "session", s.id, "reason", reason, "left", leave)
		go func() {
			<-s.ready
			if leave {
				ctx, cancel := context.WithTimeout(context.Background(), s.a.cfg.Owner.Timing.OwnerLease)
				_ = s.owner.Close(ctx)
				cancel()
			} else {
				_ = s.owner.Abandon()
			}
			s.a.closed(s)
			close(s.stopped)
		}()
	})
}

func rangePB(r keyspace.Range) *pb.Range {
	return &pb.Range{Start: uint64(r.Start), End: uint64(r.End)}
}

func rangeOf(r *pb.Range) keyspace.Range {
	return keyspace.Range{Start: keyspace.Key(r.GetStart()), End: keyspace.Key(r.GetEnd())}
}

func leasesOf(ls []owner.Lease) []*pb.AgentLease {
	out := make([]*pb.AgentLease, 0, len(ls))
	for _, l := range ls {
		out = append(out, &pb.AgentLease{Range: rangePB(l.Range), Epoch: l.Num.Epoch, Lgn: uint64(l.Num.LGN),
			DeadlineNs: deadline(l.Expiry), Migrated: l.Migrated})
	}
	return out
}
