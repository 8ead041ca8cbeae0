// The loop: the one goroutine that owns the Replica, steps it with the
// events the handlers post, and drives its Ready (replica.Drive).

package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/raftstore"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/protocol"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// loop is the state owned by Run's goroutine.
type loop struct {
	s       *Server
	r       *replica.Replica
	routes  map[routeKey]*ownerStream
	lookups map[uint64]*lookupStream
	dropped uint64
	// stale says the snapshot is older than the replica's state; it is
	// published at publishAt. publishTook is how long the last one took.
	stale       bool
	publishAt   time.Time
	publishTook time.Duration
	counts      map[string]tableCount // publish's last walk of each table (countTable)
	roleSaid    string                // the last role mismatch logged (role.go)
	push        fanout                // Lookup messages paced to their streams (fanout.go)
	leader      uint64                // last leader logged
	quorumAt    time.Time             // when the leader last saw a quorum active
	obs         observer              // metrics kept by the loop (metrics.go)

	// snapshots holds the newest snapshot converted for Lookups, in wire
	// form and (once a stream has sent it) encoded, merged and not: the
	// Feed sends the same snapshot to every Lookup that starts while the
	// table has moved little, one every few seconds under churn, and
	// converting and encoding it again for each (64,000 segments, 3.4 MB
	// at 1,000 Owners) stalled the loop and the garbage collector.
	snapshots map[updateKey]*sharedUpdate
}

// Run runs the Manager's replica until ctx is cancelled. All of the
// replica's work happens on this one goroutine; stream handlers hand it
// events. It returns an error if the data directory cannot be read or
// written: a replica that cannot persist must not answer.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("manager: Run called twice")
	}
	defer close(s.stopped)
	defer s.transport.Close()
	defer s.closeRelays()
	if s.store != nil {
		defer s.store.Close()
	}
	ms, fresh := raft.NewMemoryStorage(), true
	if s.store != nil {
		var err error
		if ms, fresh, err = s.store.Load(); err != nil {
			return err
		}
	}
	var boot []replica.Peer
	for _, p := range s.cfg.Peers {
		boot = append(boot, replica.Peer{ID: p.ID, Addr: p.Addr})
	}
	if len(boot) == 0 && !s.cfg.Join {
		boot = []replica.Peer{{ID: s.cfg.ID, Addr: s.cfg.Advertise}}
	}
	if s.cfg.Join || !fresh {
		boot = nil
	}
	for _, p := range s.cfg.Peers {
		if p.ID != s.cfg.ID {
			s.transport.SetPeer(p.ID, p.Addr)
		}
	}
	r, err := replica.NewReplica(replica.ReplicaConfig{ID: s.cfg.ID, Settings: s.cfg.settings(), Storage: ms, Bootstrap: boot}, time.Now())
	if err != nil {
		return damagedLog(err)
	}
	l := &loop{s: s, r: r, routes: map[routeKey]*ownerStream{}, lookups: map[uint64]*lookupStream{}}
	for id, addr := range r.State().Peers() {
		if id != s.cfg.ID {
			s.transport.SetPeer(id, addr)
		}
	}
	s.cfg.Logger.Info("manager started", "id", s.cfg.ID, "data_dir", s.cfg.DataDir, "restored", !fresh,
		"namespaces", append([]string{protocol.DefaultNamespace}, s.cfg.Namespaces...),
		"owner_lease", s.cfg.Timing.OwnerLease, "manager_lease", s.cfg.Timing.ManagerLease)
	if err := l.drive(); err != nil {
		return damagedLog(err)
	}
	l.publish()
	close(s.ready)
	timer := time.NewTimer(0)
	defer timer.Stop()
	stopped := func(err error) error {
		err = damagedLog(err)
		s.cfg.Logger.Error("manager stopped: cannot persist or apply its log", "err", err)
		return err
	}
	for {
		if err := l.drive(); err != nil {
			return stopped(err)
		}
		next := l.r.NextDeadline()
		if l.stale && l.publishAt.Before(next) {
			next = l.publishAt
		}
		if pd := l.push.pumpDeadline(); !pd.IsZero() && pd.Before(next) {
			next = pd
		}
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			s.cfg.Logger.Info("manager stopped")
			return nil
		case ev := <-s.events:
			// Take what else is queued, so one entry carries the round.
			drain(s.events, ev, l.handle)
			l.changed()
		case m := <-s.raftIn:
			// The first message and what else is queued, up to
			// replica.MaxStepBatch, then a drive: the stepping policy
			// the simulation sweeps (replica.StepBatch).
			now := time.Now()
			first := true
			_, err := replica.StepBatch(l.r, l, replica.MaxStepBatch, func() (raftpb.Message, bool) {
				if !first {
					select {
					case m = <-s.raftIn:
					default:
						return raftpb.Message{}, false
					}
				}
				first = false
				if m.Type == raftpb.MsgHeartbeatResp {
					l.obs.heartbeatAnswered(s.metrics, m.From, now)
				}
				return m, true
			})
			if err != nil {
				return stopped(err)
			}
			l.changed()
		case <-s.pushWake:
			l.pump(time.Now())
		case <-timer.C:
			if l.push.pending() > 0 {
				l.pump(time.Now())
			}
			if !time.Now().Before(l.r.NextDeadline()) {
				l.r.Tick(time.Now()) // the next drive sends a coalesced push round
				l.changed()
			}
		}
	}
}

// damagedLog marks an error applying the stored log (an entry or a
// snapshot that does not decode) as a damaged data directory, with the way
// to recover: bbolt checks its pages' structure, not the bytes of the
// values in them.
func damagedLog(err error) error {
	if errors.Is(err, lease.ErrCorrupt) && !errors.Is(err, raftstore.ErrDamaged) {
		return fmt.Errorf("%w: %w; %s", raftstore.ErrDamaged, err, raftstore.Recovery)
	}
	return err
}

// drain hands first and then up to 256 more values already queued on ch to
// fn, so that a burst is one round: one Raft entry, one fsync. (Raft
// messages are stepped by replica.StepBatch, to the same limit.)
func drain[T any](ch <-chan T, first T, fn func(T)) {
	fn(first)
	for range 256 {
		select {
		case v := <-ch:
			fn(v)
		default:
			return
		}
	}
}

// drive runs the replica's Ready/Advance cycle (replica.Drive) with the
// loop as its driver, then publishes the snapshot if it is due.
func (l *loop) drive() error {
	if err := replica.Drive(l.r, l); err != nil {
		return err
	}
	l.obs.noteCommits(l.s.metrics, l.s.cfg.Logger, l.r.State(), time.Now())
	if id, addr := l.r.Leader(); id != l.leader {
		l.leader = id
		l.s.cfg.Logger.Info("leader changed", "leader", id, "addr", addr, "self", id == l.s.cfg.ID)
	}
	if l.stale && !time.Now().Before(l.publishAt) {
		l.publish()
	}
	return nil
}

// Now reads the wall clock (replica.Driver).
func (l *loop) Now() time.Time { return time.Now() }

// Persist writes rd to the data directory, if there is one
// (replica.Driver).
func (l *loop) Persist(rd *replica.Ready) error {
	if l.s.store == nil {
		return nil
	}
	if !raft.IsEmptySnap(rd.Compacted) {
		if err := l.s.store.Compact(rd.Compacted); err != nil {
			return fmt.Errorf("manager: compacting the Raft log: %w", err)
		}
	}
	if err := l.s.store.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
		return fmt.Errorf("manager: saving the Raft log: %w", err)
	}
	return nil
}

// Send updates the transport's replicas, sends the Raft messages, and
// hands the answers to their streams (replica.Driver).
func (l *loop) Send(rd *replica.Ready) {
	for _, p := range rd.Peers {
		switch {
		case p.ID == l.s.cfg.ID:
		case p.Addr == "":
			l.s.transport.RemovePeer(p.ID)
			l.s.cfg.Logger.Info("replica removed", "replica", p.ID)
		default:
			l.s.transport.SetPeer(p.ID, p.Addr)
			l.s.cfg.Logger.Info("replica known", "replica", p.ID, "addr", p.Addr)
		}
	}
	if len(rd.Messages) > 0 {
		now := time.Now()
		for _, m := range rd.Messages {
			if m.Type == raftpb.MsgHeartbeat {
				l.obs.heartbeatSent(m.To, now)
			}
		}
	}
	l.s.transport.Send(rd.Messages)
	l.send(rd.Owners, rd.Lookups)
}

func (l *loop) handle(ev event) {
	now := time.Now()
	switch ev := ev.(type) {
	case leaseEvent:
		key := routeKey{ev.req.Namespace, ev.req.Owner}
		err := l.bound(now, key, ev.st, ev.req)
		ev.st.heard = now
		if err == nil {
			err = l.r.StepLease(now, ev.req)
			if errors.Is(err, lease.ErrLimit) {
				l.s.countLimit(err)
			}
		}
		if err == nil {
			// Answers go to the stream the owner last spoke on.
			l.routes[key] = ev.st
			ev.st.key, ev.st.inc = &key, ev.req.Incarnation
			l.obs.noteAsked(key, ev.at)
		}
		ev.errc <- err
	case syncEvent:
		if ev.st.ns == "" {
			ev.st.ns = ev.req.Namespace
		}
		var err error
		if ev.req.Namespace != ev.st.ns {
			err = fmt.Errorf("%w: a lookup stream serves one namespace (%q), got a request for %q",
				lease.ErrBadMessage, ev.st.ns, ev.req.Namespace)
		} else if err = l.r.StepSync(now, ev.st.id, ev.req); err == nil {
			l.lookups[ev.st.id] = ev.st
		}
		ev.errc <- err
	case closeEvent:
		if ev.owner != nil {
			for k, st := range l.routes {
				if st == ev.owner {
					delete(l.routes, k)
					delete(l.obs.asked, k) // no answer will go there
				}
			}
		}
		if ev.lookup != nil {
			delete(l.lookups, ev.lookup.id)
			l.push.forget(ev.lookup)
			l.r.CloseLookup(ev.lookup.ns, ev.lookup.id)
		}
	case confEvent:
		switch {
		case ev.readReplica:
			ev.errc <- l.r.AddReadReplica(now, ev.id, ev.addr)
		case ev.addr != "":
			ev.errc <- l.r.AddLearner(now, ev.id, ev.addr)
		default:
			ev.errc <- l.r.RemoveMember(now, ev.id)
		}
	case drainEvent:
		ev.errc <- l.ownerAdmin(now, ev)
	case leaseReadEvent:
		l.leaseRead(now, ev)
	case unreachableEvent:
		l.r.ReportUnreachable(uint64(ev))
	case snapshotEvent:
		st := raft.SnapshotFinish
		if !ev.ok {
			st = raft.SnapshotFailure
		}
		l.r.ReportSnapshot(ev.id, st)
	}
}

// MaxIncarnationAhead is how far ahead of the Manager's clock, read as
// Unix nanoseconds, an Owner's incarnation may be. The Owner library uses
// its start time; an incarnation far in the future would make every later,
// honest run of the Owner look older and be refused, for as long as the
// group keeps the record. A counter (1, 2, 3…) is always accepted.
const MaxIncarnationAhead = 24 * time.Hour

// errSessionBound refuses a control request for an Owner whose session is
// bound to another live stream.
var errSessionBound = errors.New("leasehold: the owner's session is bound to another live stream")

// bound checks that st may send req for Owner key. A stream speaks for one
// Owner, the one of its first accepted request. An Owner's session is bound
// to the stream it last spoke on while that stream is live: open, and heard
// from within Timing.OwnerQuiet, the wait after which an Owner itself gives
// up a silent replica. Another stream may renew for it (an Owner that
// reconnected before the Manager saw its old stream break), which moves the
// session there, but while the bound stream is live it may not change it:
// leave, drain, report handovers, or bring a new incarnation. A second
// process started with a live Owner's ID is refused loudly, and while the
// Owner speaks on its stream the requests that change its course come from
// there alone (who may speak for an Owner at all is the certificate's
// business: leaseSpeaker, checkLease).
//
// Once the bound stream has been quiet for OwnerQuiet it blocks nothing:
// any request of the Owner's newest incarnation, or of a newer one, is
// accepted from another stream and moves the session there, a leave, a
// drain and handovers included. A quiet stream is one the Owner itself has
// given up by then: its host died and left the stream half-open, or a
// proxy stopped forwarding it (the Manager closes it only once keepalive
// finds it dead, up to peers.KeepaliveServerTime and
// KeepaliveServerTimeout later). The Owner library repeats Draining,
// Handed (until its deadline) and Leaving in every request, so an Owner
// that lost its stream in the middle of a drain or a handover, and reaches
// the Manager again only by another stream (a follower's relay), has no
// other request to move the session with. Refusing it would let its leases
// run out and turn its planned moves into losses.
//
// Accepting it is safe because a request says nothing more for coming on
// another stream. Of the same incarnation, it is the word of the run that
// holds the ranges, by another path: the protocol already takes messages
// delayed, lost, duplicated and reordered by the network (a follower's relay
// is such a path), and the race filter still decides whether it releases
// anything, against the session's latest message, whichever stream that
// went to. Of a newer incarnation, the old run's ranges stay orphans,
// reserved until its leases would have run out (docs/protocol.md), so an
// old run that still serves loses nothing without a loss notification
// after it. A request of an older incarnation than the newest known (the
// bound stream's, or the replicated record's) is from a replaced run and is
// always refused, so it never moves the session back to that run.
func (l *loop) bound(now time.Time, key routeKey, st *ownerStream, req *protocol.LeaseRequest) error {
	if limit := uint64(max(now.UnixNano(), 0)) + uint64(MaxIncarnationAhead); req.Incarnation > limit {
		return fmt.Errorf("%w: incarnation %d is more than %s ahead of the Manager's clock (in Unix nanoseconds); "+
			"it would outrank every later run of owner %q", lease.ErrBadMessage, req.Incarnation, MaxIncarnationAhead, key.owner)
	}
	if st.key != nil && *st.key != key {
		return fmt.Errorf("%w: a lease stream speaks for one owner (%q in namespace %q), got a request for %q in %q",
			lease.ErrBadMessage, st.key.owner, st.key.ns, key.owner, key.ns)
	}
	cur := l.routes[key]
	newest := l.r.State().Owners(key.ns)[key.owner].Incarnation
	if cur != nil {
		newest = max(newest, cur.inc)
	}
	if req.Incarnation < newest {
		return fmt.Errorf("%w: owner %q has a newer incarnation (%d) than this request's (%d): "+
			"another process was started with its ID, and this run is replaced", errSessionBound, key.owner, newest, req.Incarnation)
	}
	if cur == nil || cur == st {
		return nil
	}
	quiet := l.s.cfg.Timing.OwnerQuiet()
	heard := now.Sub(cur.heard)
	if heard >= quiet {
		return nil // the Owner has left that stream: the session moves here
	}
	what, is := "", "is"
	switch {
	case req.Incarnation != cur.inc:
		return fmt.Errorf("%w: a new incarnation for owner %q is refused while its session's stream is live "+
			"(heard from %s ago): another process is running with this ID; a restarted owner is accepted once "+
			"the old stream has been quiet for %s", errSessionBound, key.owner, heard.Round(time.Millisecond), quiet)
	case req.Leaving:
		what = "a leave"
	case req.Draining:
		what = "a drain"
	case len(req.Handed) > 0:
		what, is = "handovers", "are"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s for owner %q %s accepted only from the stream its session is bound to while that stream "+
		"is live (heard from %s ago), and from any once it has closed or been quiet for %s",
		errSessionBound, what, key.owner, is, heard.Round(time.Millisecond), quiet)
}
