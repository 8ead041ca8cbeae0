package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
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
// answers their syncs with a delta or a snapshot, and pushes the changes
// the replica applies. Every replica, leader or follower, runs one, so
// Lookups can be spread over them; a follower's table is the leader's
// committed table, at most its replication lag behind.
//
// Push rounds are coalesced per namespace (Changed): a change is pushed at
// once if the namespace's last round was at least PushEvery ago, and
// otherwise at that round + PushEvery, together with everything applied
// meanwhile. A lone change still reaches every Lookup at once, while a
// burst of entries (a large pool starting: nearly every entry grants)
// costs one round per PushEvery instead of one per entry, each round a
// message to every Lookup. Sync answers are never delayed.
//
// A Feed is deterministic and not safe for concurrent use: what it sends is
// a function of its calls and the times passed to them.
type Feed struct {
	st     *lease.State
	timing protocol.Timing
	subs   map[string]map[uint64]*lookupSub
	// upTo records, per namespace, the table and LSN of the last push
	// round: every session has been sent up to there (StepSync never
	// leaves a session behind the table it answers from), so a round has
	// nothing to do, and Changed starts none, until the table moves on.
	// Changed runs after every Raft Ready applied, most of which change no
	// table (heartbeats, ReadIndex rounds for renewals); without this a
	// round would visit every Lookup session each time.
	upTo map[string]pushMark
	// snaps holds, per namespace, the last snapshot sent (snapshot).
	snaps map[string]sentSnapshot
	// every is the least time between two push rounds of a namespace (0:
	// no coalescing); rounds holds, per namespace, when the last one ran
	// and when the next is due.
	every  time.Duration
	rounds map[string]*pushRounds
	out    []LookupMessage
	syncs  uint64
	// beats holds, per namespace, the sessions that take heartbeats
	// (Heartbeats): the only ones a heartbeat round visits. nextBeat is
	// when the next round runs (zero: no such session).
	beats    map[string]map[uint64]*lookupSub
	nextBeat time.Time
	// serves says whether the replica could answer a poll at once at the
	// given time; a push or heartbeat vouches for freshness only then. nil:
	// never. unserved is the broken rule faults.HeartbeatUnserved.
	serves   func(time.Time) bool
	unserved bool
	stats    FeedStats
}

// FeedStats counts what a Feed sent to Lookups.
type FeedStats struct {
	Heartbeats uint64 // heartbeats sent
	Vouching   uint64 // pushes that vouched for freshness
}

// DefaultPushEvery is the least time between two push rounds of a
// namespace when Settings.PushEvery is 0. A change applied within
// PushEvery of the last round waits at most this long for the next one: a
// tenth of the 1 s goal for a change to reach every Lookup, and one period
// of the default Raft tick. A sustained burst then costs at most 10 rounds
// a second: at start-up of a pool of 10,000 Owners joining over a minute,
// at most 600 messages to each Lookup instead of one per entry that
// changes the table (tens of thousands). 50 ms would halve the wait and
// double the rounds.
const DefaultPushEvery = 100 * time.Millisecond

type pushRounds struct {
	last time.Time // when the last round ran
	ran  bool      // a round has run (last is set)
	due  time.Time // when the pending round runs; zero: none pending
}

type pushMark struct {
	t   *leasetable.Table
	lsn keyspace.LSN
}

type lookupSub struct {
	lastSeen time.Time
	pushed   keyspace.LSN // the LSN the session's copy will have
	// req is the newest request received on the session, at lastSeen
	// (0: none with an ID); sentAt is when a message was last sent on it;
	// beats says its newest request takes heartbeats (Heartbeats, and a
	// MaxDrift at least the replica's).
	req    uint64
	sentAt time.Time
	beats  bool
}

// NewFeed returns a Feed over st that coalesces push rounds by
// DefaultPushEvery (SetPushEvery changes it).
func NewFeed(st *lease.State, timing protocol.Timing) *Feed {
	return &Feed{st: st, timing: timing, subs: map[string]map[uint64]*lookupSub{}, upTo: map[string]pushMark{}, snaps: map[string]sentSnapshot{},
		every: DefaultPushEvery, rounds: map[string]*pushRounds{}, beats: map[string]map[uint64]*lookupSub{}}
}

// SetServes gives the Feed the test of whether its replica could answer a
// Lookup's poll at once at a given time (Replica.Serving): only then do
// its pushes and heartbeats vouch for freshness. Without it they never do.
func (f *Feed) SetServes(serves func(time.Time) bool) { f.serves = serves }

// Stats returns what the Feed has sent.
func (f *Feed) Stats() FeedStats { return f.stats }

// SetPushEvery sets the least time between two push rounds of a namespace:
// 0 means DefaultPushEvery, and a negative d turns coalescing off (Changed
// pushes every change at once).
func (f *Feed) SetPushEvery(d time.Duration) {
	switch {
	case d == 0:
		f.every = DefaultPushEvery
	case d < 0:
		f.every = 0
	default:
		f.every = d
	}
}

// Rebase points the Feed at a new State (a snapshot was installed). Each
// session's next message is a snapshot, since LSNs before the new State's
// are not in its log.
func (f *Feed) Rebase(st *lease.State) {
	f.st = st
	clear(f.upTo)
	clear(f.snaps)
}

// StepSync handles a Lookup's SyncRequest received at now on session id.
func (f *Feed) StepSync(now time.Time, id uint64, req *protocol.SyncRequest) error {
	f.syncs++
	if f.st.Epoch() == 0 {
		// Checked first: the first leader serves before its first entry,
		// which creates the namespaces, has committed.
		return ErrNoEpoch
	}
	t := f.st.Table(req.Namespace)
	if t == nil {
		return fmt.Errorf("%w %q", lease.ErrUnknownNamespace, req.Namespace)
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
	sub.lastSeen, sub.req = now, req.ID
	// A Lookup that would judge what a heartbeat vouches for with a smaller
	// MaxDrift than this replica's is refused them, and its pushes vouch
	// for nothing, until a request says enough: its polls are answered as
	// ever, and each answer tells it the replica's (response).
	if beats := req.Heartbeats && f.timing.VouchesFor(req.MaxDrift); beats != sub.beats {
		sub.beats = beats
		if sub.beats {
			if f.beats[req.Namespace] == nil {
				f.beats[req.Namespace] = map[uint64]*lookupSub{}
			}
			f.beats[req.Namespace][id] = sub
			if f.nextBeat.IsZero() {
				f.nextBeat = now.Add(f.timing.HeartbeatEvery() / 4)
			}
		} else {
			delete(f.beats[req.Namespace], id)
		}
	}
	if req.Epoch == f.st.Epoch() && req.LSN > t.LSN() {
		// This replica is behind the Lookup's copy (it synced with one
		// further ahead): answering now would move the copy back. Push
		// from its LSN once this replica has caught up.
		sub.pushed = req.LSN
		return nil
	}
	var u leasetable.Update
	switch {
	case req.Epoch != f.st.Epoch():
		// The Lookup's copy is from another Manager incarnation: its LSNs
		// mean nothing here.
		u = f.snapshot(req.Namespace, t, 0)
	case req.LSN == t.LSN() || t.HasDelta(req.LSN):
		u = t.Since(req.LSN)
	default:
		u = f.snapshot(req.Namespace, t, req.LSN)
		u.From = req.LSN
	}
	if u.To < t.LSN() {
		// An earlier snapshot (snapshot): it goes as a push, and the answer
		// is the delta from it. The Lookup counts its copy fresh only once
		// it has the answer, so a lost delta is a lost answer, never a copy
		// taken for newer than it is.
		f.out = append(f.out, LookupMessage{To: id, Msg: f.response(req.Namespace, 0, u)})
		u = t.Since(u.To)
	}
	sub.pushed, sub.sentAt = u.To, now
	f.out = append(f.out, LookupMessage{To: id, Msg: f.response(req.Namespace, req.ID, u)})
	return nil
}

// snapshot returns a snapshot of t for a Lookup whose copy is at lsn (0:
// none, or another epoch's), shared by every session that gets it: the
// last one this Feed sent if it is not behind lsn and no more than a
// snapshotLag of changes behind the table (the rest follows as a delta),
// else a new one. A table copies all its segments
// for a snapshot at a new LSN: when a large pool starts, with the table
// changing all the time and Lookups starting too, a new snapshot for each
// would cost O(segments) per Lookup.
func (f *Feed) snapshot(name string, t *leasetable.Table, lsn keyspace.LSN) leasetable.Update {
	if r, ok := f.snaps[name]; ok && r.t == t && r.u.To >= lsn && (r.u.To == t.LSN() || t.HasDelta(r.u.To)) &&
		uint64(t.LSN()-r.u.To) <= uint64(t.Len()/snapshotLag) {
		return r.u
	}
	u := t.Snapshot()
	f.snaps[name] = sentSnapshot{t, u}
	return u
}

// snapshotLag: a snapshot is sent again while the table has changed less
// than 1/snapshotLag of its segments' worth since; the delta that follows
// is then at most that large.
const snapshotLag = 8

type sentSnapshot struct {
	t *leasetable.Table
	u leasetable.Update
}

// Close forgets a Lookup session (its stream ended).
func (f *Feed) Close(ns string, id uint64) {
	delete(f.subs[ns], id)
	delete(f.beats[ns], id)
}

// Syncs returns the number of SyncRequests handled, answered or not.
func (f *Feed) Syncs() uint64 { return f.syncs }

// Lookups returns the number of Lookup sessions of a namespace.
func (f *Feed) Lookups(ns string) int { return len(f.subs[ns]) }

// Tick forgets sessions silent for two SyncTimeouts — a session that takes
// heartbeats for LookupPollMax more, since its Lookup polls that seldom —
// and ages the change logs.
func (f *Feed) Tick(now time.Time) {
	for ns, subs := range f.subs {
		for id, l := range subs {
			quiet := 2 * f.timing.SyncTimeout
			if l.beats {
				quiet += f.timing.LookupPollMax()
			}
			if now.Sub(l.lastSeen) > quiet {
				delete(subs, id)
				delete(f.beats[ns], id)
			}
		}
	}
	for _, name := range f.st.Namespaces() {
		f.st.Table(name).Truncate(now)
	}
}

// Changed tells the Feed that the State may have changed at now; the
// replica calls it after every Ready it applies. Each namespace whose table
// moved since its last push round gets a round now if that round was at
// least PushEvery ago (or never ran), and otherwise one at that round +
// PushEvery (NextDeadline; PushDue runs it).
func (f *Feed) Changed(now time.Time) {
	for _, name := range f.st.Namespaces() {
		if !f.moved(name) {
			continue
		}
		r := f.rounds[name]
		if r == nil {
			r = &pushRounds{}
			f.rounds[name] = r
		}
		switch {
		case f.every == 0 || !r.ran || now.Sub(r.last) >= f.every:
			f.round(name, now)
		case r.due.IsZero():
			r.due = r.last.Add(f.every)
		}
	}
}

// NextDeadline returns when PushDue must be called next: the earliest
// pending push round or heartbeat round, or the zero time if none is
// pending.
func (f *Feed) NextDeadline() time.Time {
	d := f.nextBeat
	for _, r := range f.rounds {
		if !r.due.IsZero() && (d.IsZero() || r.due.Before(d)) {
			d = r.due
		}
	}
	return d
}

// PushDue runs the push rounds and the heartbeat round due by now.
func (f *Feed) PushDue(now time.Time) {
	if d := f.NextDeadline(); d.IsZero() || now.Before(d) {
		return
	}
	defer f.beat(now)
	for _, name := range slices.Sorted(maps.Keys(f.rounds)) { // deterministic order
		r := f.rounds[name]
		if r.due.IsZero() || now.Before(r.due) {
			continue
		}
		if f.st.Table(name) == nil {
			r.due = time.Time{} // the namespace went with a Rebase
			continue
		}
		f.round(name, now)
	}
}

// beat runs the heartbeat round if it is due: every session that takes
// heartbeats, has been sent everything up to the table's LSN, and has been
// sent nothing for HeartbeatEvery gets a push with an empty delta that
// vouches for freshness — exactly the answer a poll received now would
// get. Only a replica that could answer such a poll at once sends them;
// otherwise the Lookups poll, and are answered or refused, as without
// heartbeats. Rounds run every HeartbeatEvery/4, so a session waits at most
// 1.25 × HeartbeatEvery, and a round visits only the sessions that take
// heartbeats: no timer per session.
func (f *Feed) beat(now time.Time) {
	if f.nextBeat.IsZero() || now.Before(f.nextBeat) {
		return
	}
	every := f.timing.HeartbeatEvery()
	f.nextBeat = now.Add(every / 4)
	if !f.vouches(now) {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(f.beats)) {
		t := f.st.Table(name)
		subs := f.beats[name]
		if t == nil || len(subs) == 0 {
			continue
		}
		lsn := t.LSN()
		var ids []uint64
		for id, l := range subs {
			if l.pushed == lsn && l.req != 0 && now.Sub(l.sentAt) >= every {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids) // deterministic order
		for _, id := range ids {
			l := subs[id]
			l.sentAt = now
			m := f.response(name, 0, t.Since(lsn))
			m.Request, m.SinceRequest = l.req, now.Sub(l.lastSeen)
			f.stats.Heartbeats++
			f.out = append(f.out, LookupMessage{To: id, Msg: m})
		}
	}
}

// vouches reports whether the replica's messages built at now may vouch
// for freshness: it could answer a poll at once.
func (f *Feed) vouches(now time.Time) bool {
	return f.unserved || (f.serves != nil && f.serves(now))
}

// round runs a push round of namespace name at now.
func (f *Feed) round(name string, now time.Time) {
	f.push(name, now)
	r := f.rounds[name]
	r.last, r.ran, r.due = now, true, time.Time{}
}

// Push runs a push round at once in every namespace whose table moved,
// without coalescing (Changed is the coalesced form; a round Push runs
// does not count as one for it).
func (f *Feed) Push() {
	for _, name := range f.st.Namespaces() {
		f.push(name, time.Time{}) // vouches for nothing
	}
}

// moved reports whether namespace name's table moved since its last push.
func (f *Feed) moved(name string) bool {
	t := f.st.Table(name)
	m := f.upTo[name]
	return m.t != t || m.lsn != t.LSN()
}

// push sends every subscribed Lookup of namespace name the changes it has
// not been sent (C§2.2.1 made push: the periodic sync remains the safety
// net).
//
// Sessions at one LSN share one Update (leasetable.Table.Since): a push
// round costs one message header per session, whatever the size of the
// delta or snapshot. A push to a session that takes heartbeats vouches for
// freshness as a heartbeat does, if the replica could answer a poll now.
func (f *Feed) push(name string, now time.Time) {
	if !f.moved(name) {
		return // every session has been sent up to the table's LSN
	}
	t := f.st.Table(name)
	lsn := t.LSN()
	f.upTo[name] = pushMark{t, lsn}
	subs := f.subs[name]
	ids := make([]uint64, 0, len(subs))
	for id, l := range subs {
		if l.pushed < lsn {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // deterministic order
	vouch := !now.IsZero() && len(f.beats[name]) > 0 && f.vouches(now)
	for _, id := range ids {
		l := subs[id]
		u := t.Since(l.pushed)
		l.pushed, l.sentAt = u.To, now
		m := f.response(name, 0, u)
		if vouch && l.beats && l.req != 0 {
			m.Request, m.SinceRequest = l.req, now.Sub(l.lastSeen)
			f.stats.Vouching++
		}
		f.out = append(f.out, LookupMessage{To: id, Msg: m})
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
		Namespace: ns, ID: id, Epoch: f.st.Epoch(), Update: u,
		Sync: f.timing.Sync, SyncTimeout: f.timing.SyncTimeout, MaxDrift: f.timing.MaxDrift,
	}
}
