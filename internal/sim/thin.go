package sim

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// thinLookup stands in for a lookup.Core when Config.ThinLookups is set: it
// speaks the same sync protocol to the Manager — a SyncRequest when its
// freshness is Sync old (4× as often while unanswered), carrying its epoch
// and LSN, with heartbeats vouching for freshness as they do for a full
// Lookup (docs/protocol.md, "Heartbeats"); it applies a
// delta or snapshot by moving its LSN, asks again on a gap or a new epoch
// without a snapshot (gaps at most every Sync/4) — but keeps no copy of the table. The Manager sees the
// same requests it would from a full Lookup; the simulation saves the
// memory and time of thousands of full copies.
type thinLookup struct {
	timing   protocol.Timing
	epoch    uint64
	lsn      keyspace.LSN
	nextID   uint64
	nextSync time.Time
	fresh    time.Time // the copy's freshness, as lookup.Core keeps it (zero: none yet)
	pending  map[uint64]time.Time
	sent     map[uint64]time.Time // recent requests, for heartbeats (lookup.Core's)
	lastPoll time.Time
	repaired time.Time // when a gap last made it ask (zero: none outstanding)
	out      []*protocol.SyncRequest
}

func newThinLookup(t protocol.Timing, now time.Time) *thinLookup {
	return &thinLookup{timing: t, nextSync: now, pending: map[uint64]time.Time{}, sent: map[uint64]time.Time{}}
}

func (l *thinLookup) nextDeadline() time.Time { return l.nextSync }

func (l *thinLookup) tick(now time.Time) {
	if !now.Before(l.nextSync) {
		l.request(now)
	}
}

func (l *thinLookup) request(now time.Time) {
	l.nextID++
	l.pending[l.nextID] = now
	l.sent[l.nextID] = now
	for id, sent := range l.pending {
		if now.Sub(sent) > l.timing.SyncTimeout {
			delete(l.pending, id)
		}
	}
	if len(l.sent) > thinMaxSent {
		delete(l.sent, l.nextID-thinMaxSent)
	}
	l.lastPoll = now
	l.schedule()
	l.out = append(l.out, &protocol.SyncRequest{Namespace: namespace, ID: l.nextID, Epoch: l.epoch, LSN: l.lsn, Heartbeats: true,
		MaxDrift: l.timing.MaxDrift})
}

// thinMaxSent is lookup.Core's bound on the requests it remembers.
const thinMaxSent = 16

// schedule is lookup.Core's poll rule: when the copy is Sync old, no
// sooner than Sync/4 after the last request, nor later than LookupPollMax.
func (l *thinLookup) schedule() {
	if next := l.timing.NextPoll(l.lastPoll, l.fresh); !next.IsZero() {
		l.nextSync = next
	}
}

func (l *thinLookup) step(now time.Time, m *protocol.SyncResponse) {
	if m.Namespace != namespace || m.Epoch < l.epoch || m.Epoch == 0 {
		return
	}
	sent, answered := l.pending[m.ID]
	delete(l.pending, m.ID)
	u := m.Update
	if m.Epoch > l.epoch {
		if !u.Snapshot {
			l.request(now)
			return
		}
		l.epoch, l.lsn = m.Epoch, 0
	}
	if u.To > l.lsn {
		if !u.Snapshot && u.From > l.lsn {
			l.repair(now) // a gap: a push was lost or overtaken
			return
		}
		l.lsn = u.To
	}
	if m.Epoch != l.epoch {
		return
	}
	fresh := l.fresh
	if answered {
		l.repaired = time.Time{}
		if sent.After(fresh) {
			fresh = sent
		}
	}
	if sk, ok := l.sent[m.Request]; ok && m.Request != 0 {
		for id := range l.sent {
			if id < m.Request {
				delete(l.sent, id)
			}
		}
		if f := l.timing.Vouched(sk, m.SinceRequest); f.After(fresh) {
			fresh = f
		}
	}
	if fresh != l.fresh {
		l.fresh = fresh
		l.schedule()
	}
}

// repair asks for what a gap misses, at most every Sync/4, as lookup.Core
// does.
func (l *thinLookup) repair(now time.Time) {
	if !l.repaired.IsZero() && now.Sub(l.repaired) < l.timing.Sync/4 {
		return
	}
	l.repaired = now
	l.request(now)
}

func (l *thinLookup) ready() []*protocol.SyncRequest {
	out := l.out
	l.out = nil
	return out
}
