package manager

import (
	"errors"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// ErrNoEpoch is returned to a Lookup before the replicated state has an
// epoch (no leader has committed anything yet).
var ErrNoEpoch = errors.New("manager: no lease table yet")

// LookupMessage is a SyncResponse to deliver to the Lookup session To.
type LookupMessage struct {
	To  uint64
	Msg *protocol.SyncResponse
}

// Feed serves Lookups from a replica's applied State (C§2.2.1, P§4.2): it
// answers their syncs with a delta or a snapshot, and pushes every change
// as soon as the replica applies it. Every replica, leader or follower, runs
// one, so Lookups can be spread over them; a follower's table is the
// leader's committed table, at most its replication lag behind.
//
// A Feed is deterministic and not safe for concurrent use.
type Feed struct {
	st     *State
	timing protocol.Timing
	subs   map[string]map[uint64]*lookupSub
	// upTo records, per namespace, the table and LSN of the last Push: every
	// session has been sent up to there (StepSync never leaves a session
	// behind the table it answers from), so Push has nothing to do until
	// the table moves on. Push runs after every Raft entry applied, one per
	// Owner renewal; without this it would visit every Lookup session each
	// time.
	upTo  map[string]pushMark
	out   []LookupMessage
	syncs uint64
}

type pushMark struct {
	t   *leasetable.Table
	lsn keyspace.LSN
}

type lookupSub struct {
	lastSeen time.Time
	pushed   keyspace.LSN // the LSN the session's copy will have
}

// NewFeed returns a Feed over st.
func NewFeed(st *State, timing protocol.Timing) *Feed {
	return &Feed{st: st, timing: timing, subs: map[string]map[uint64]*lookupSub{}, upTo: map[string]pushMark{}}
}

// Rebase points the Feed at a new State (a snapshot was installed). Each
// session's next message is a snapshot, since LSNs before the new State's
// are not in its log.
func (f *Feed) Rebase(st *State) {
	f.st = st
	clear(f.upTo)
}

// StepSync handles a Lookup's SyncRequest received at now on session id.
func (f *Feed) StepSync(now time.Time, id uint64, req *protocol.SyncRequest) error {
	f.syncs++
	if f.st.epoch == 0 {
		// Checked first: the first leader serves before its first entry,
		// which creates the namespaces, has committed.
		return ErrNoEpoch
	}
	t := f.st.Table(req.Namespace)
	if t == nil {
		return errUnknownNamespace(req.Namespace)
	}
	subs := f.subs[req.Namespace]
	if subs == nil {
		subs = map[uint64]*lookupSub{}
		f.subs[req.Namespace] = subs
	}
	sub := subs[id]
	if sub == nil {
		sub = &lookupSub{}
		subs[id] = sub
	}
	sub.lastSeen = now
	if req.Epoch == f.st.epoch && req.LSN > t.LSN() {
		// This replica is behind the Lookup's copy (it synced with one
		// further ahead): answering now would move the copy back. Push
		// from its LSN once this replica has caught up.
		sub.pushed = req.LSN
		return nil
	}
	var u leasetable.Update
	if req.Epoch != f.st.epoch {
		// The Lookup's copy is from another Manager incarnation: its LSNs
		// mean nothing here.
		u = snapshot(t)
	} else {
		u = t.Since(req.LSN)
	}
	sub.pushed = u.To
	f.out = append(f.out, LookupMessage{To: id, Msg: f.response(req.Namespace, req.ID, u)})
	return nil
}

// snapshot is the table as a snapshot, shared by every session that gets
// one at this LSN.
func snapshot(t *leasetable.Table) leasetable.Update { return t.Snapshot() }

// Close forgets a Lookup session (its stream ended).
func (f *Feed) Close(ns string, id uint64) {
	delete(f.subs[ns], id)
}

// Syncs returns the number of SyncRequests handled, answered or not.
func (f *Feed) Syncs() uint64 { return f.syncs }

// Lookups returns the number of Lookup sessions of a namespace.
func (f *Feed) Lookups(ns string) int { return len(f.subs[ns]) }

// Tick forgets sessions silent for two SyncTimeouts and ages the change logs.
func (f *Feed) Tick(now time.Time) {
	for _, subs := range f.subs {
		for id, l := range subs {
			if now.Sub(l.lastSeen) > 2*f.timing.SyncTimeout {
				delete(subs, id)
			}
		}
	}
	for _, name := range f.st.Namespaces() {
		f.st.Table(name).Truncate(now)
	}
}

// Push sends every subscribed Lookup the changes it has not been sent
// (C§2.2.1 made push: the periodic sync remains the safety net). Call it
// after the State changed.
//
// Sessions at one LSN share one Update (leasetable.Table.Since): a push
// round costs one message header per session, whatever the size of the
// delta or snapshot.
func (f *Feed) Push() {
	for _, name := range f.st.Namespaces() {
		t := f.st.Table(name)
		lsn := t.LSN()
		if m := f.upTo[name]; m.t == t && m.lsn == lsn {
			continue // every session has been sent up to lsn
		}
		f.upTo[name] = pushMark{t, lsn}
		subs := f.subs[name]
		ids := make([]uint64, 0, len(subs))
		for id, l := range subs {
			if l.pushed < lsn {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids) // deterministic order
		for _, id := range ids {
			l := subs[id]
			u := t.Since(l.pushed)
			l.pushed = u.To
			f.out = append(f.out, LookupMessage{To: id, Msg: f.response(name, 0, u)})
		}
	}
}

// Ready returns the messages to send since the last call and forgets them.
func (f *Feed) Ready() []LookupMessage {
	out := f.out
	f.out = nil
	return out
}

func (f *Feed) response(ns string, id uint64, u leasetable.Update) *protocol.SyncResponse {
	return &protocol.SyncResponse{
		Namespace: ns, ID: id, Epoch: f.st.epoch, Update: u,
		Sync: f.timing.Sync, SyncTimeout: f.timing.SyncTimeout,
	}
}
