package sim

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// thinLookup stands in for a lookup.Core when Config.ThinLookups is set: it
// speaks the same sync protocol to the Manager — a SyncRequest every Sync
// (4× as often while unanswered), carrying its epoch and LSN; it applies a
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
	fresh    time.Time // when the last answered request was sent (zero: none yet)
	pending  map[uint64]time.Time
	repaired time.Time // when a gap last made it ask (zero: none outstanding)
	out      []*protocol.SyncRequest
}

func newThinLookup(t protocol.Timing, now time.Time) *thinLookup {
	return &thinLookup{timing: t, nextSync: now, pending: map[uint64]time.Time{}}
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
	for id, sent := range l.pending {
		if now.Sub(sent) > l.timing.SyncTimeout {
			delete(l.pending, id)
		}
	}
	next := l.timing.Sync
	if now.Sub(l.fresh) > l.timing.Sync {
		next = l.timing.Sync / 4
	}
	l.nextSync = now.Add(next)
	l.out = append(l.out, &protocol.SyncRequest{Namespace: namespace, ID: l.nextID, Epoch: l.epoch, LSN: l.lsn})
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
	if answered {
		l.repaired = time.Time{}
		if sent.After(l.fresh) {
			l.fresh = sent
		}
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
