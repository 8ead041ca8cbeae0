// The loop's answers: the Owner and Lookup messages of a Ready handed to
// their streams, with the encoded updates the Lookups of one namespace
// share.

package manager

import (
	"context"
	"log/slog"
	"maps"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// send hands the replica's messages to their streams without ever
// blocking: a stream whose queue is full loses the message, which the
// protocol tolerates like any other lost message. Owners' answers go at
// once; Lookups' messages join the paced fan-out (fanout.go).
func (l *loop) send(owners []lease.OwnerMessage, lookups []replica.LookupMessage) {
	now := time.Now()
	debug := len(owners) > 0 && l.s.cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
	for _, m := range owners {
		k := routeKey{m.Msg.Namespace, m.To}
		st := l.routes[k]
		if st == nil {
			continue
		}
		if !st.snd.offer(wire.LeaseResponseToPB(m.Msg)) {
			l.dropped++
			continue
		}
		l.obs.answered(l.s.metrics, k, now)
		if debug {
			logAnswer(l.s.cfg.Logger, m.Msg)
		}
	}
	l.obs.noteCommits(l.s.metrics, l.s.cfg.Logger, l.r.State(), now)
	var shared map[updateKey]*sharedUpdate
	if len(lookups) > 0 {
		shared = maps.Clone(l.snapshots)
		if shared == nil {
			shared = map[updateKey]*sharedUpdate{}
		}
		defer l.keepSnapshots(shared)
	}
	for _, m := range lookups {
		st := l.lookups[m.To]
		if st == nil {
			continue
		}
		out := syncResponseToPB(m.Msg, shared, st.names != nil && st.names.Accepts(),
			st.names != nil && st.names.AcceptsCompact() && m.Msg.ID == 0)
		if !l.push.queue(st, out, m.Msg.Update.To) {
			l.dropped++
		}
	}
	l.pump(now)
}

// keepSnapshots keeps, of the updates a round converted, the newest
// snapshot's (both forms), for the rounds after it.
func (l *loop) keepSnapshots(shared map[updateKey]*sharedUpdate) {
	var newest keyspace.LSN
	for k := range shared {
		if k.snapshot && k.to > newest {
			newest = k.to
		}
	}
	if newest == 0 {
		return
	}
	clear(l.snapshots)
	if l.snapshots == nil {
		l.snapshots = map[updateKey]*sharedUpdate{}
	}
	for k, su := range shared {
		if k.snapshot && k.to == newest {
			l.snapshots[k] = su
		}
	}
}

// updateKey names an Update by its storage: Updates the Feed hands out at
// one LSN share their Changes or Segments (leasetable.Table.Since), which
// never change.
type updateKey struct {
	from, to keyspace.LSN
	snapshot bool
	changes  *leasetable.Change
	segments *leasetable.Segment
	n        int
	merged   bool // converted after leasetable.Merge
	compact  bool // in the compact form
}

// syncResponseToPB converts m to its wire form, converting its Update only
// once per round for all the Lookups it goes to: a push of a big delta to
// thousands of Lookups holds one copy of it in wire form, not one per
// Lookup. The first stream to send it encodes it, and the others send the
// same bytes (encode.go).
//
// A Lookup that takes merged deltas gets the delta merged
// (leasetable.Merge), also converted once for all such Lookups. A push to
// a Lookup that takes compact deltas goes in that form
// (wire.CompactUpdateToPB), its ranges marked FromCopy where the Lookup
// can take their End from its copy (leasetable.MarkFromCopy), again once
// for all. Answers to polls keep the full form: a Lookup whose copy a
// compact push did not fit polls, and the answer then fits whatever its
// copy holds.
func syncResponseToPB(m *protocol.SyncResponse, shared map[updateKey]*sharedUpdate, merge, compact bool) syncOut {
	u := &m.Update
	compact = compact && merge && !u.Snapshot && len(u.Changes) > 0
	k := updateKey{from: u.From, to: u.To, snapshot: u.Snapshot, n: len(u.Changes) + len(u.Segments), merged: merge, compact: compact}
	if len(u.Changes) > 0 {
		k.changes = &u.Changes[0]
	}
	if len(u.Segments) > 0 {
		k.segments = &u.Segments[0]
	}
	su := shared[k]
	if su == nil {
		su = &sharedUpdate{}
		switch {
		case compact:
			mu := leasetable.Merge(leasetable.MarkFromCopy(*u))
			su.pb = wire.CompactUpdateToPB(&mu)
		case merge:
			mu := leasetable.Merge(*u)
			su.pb = wire.UpdateToPB(&mu)
		default:
			su.pb = wire.UpdateToPB(u)
		}
		shared[k] = su
	}
	rest := *m
	rest.Update = leasetable.Update{}
	out := wire.SyncResponseToPB(&rest)
	out.Update = su.pb
	return syncOut{m: out, shared: su}
}

// logAnswer logs, at debug level, the grants an answer carries, one line
// each with the owner, range and LGN, and its renewals as a count.
func logAnswer(log *slog.Logger, m *protocol.LeaseResponse) {
	renewed := 0
	for _, ls := range m.Leases {
		if !ls.Grant {
			renewed++
			continue
		}
		log.Debug("lease granted", "namespace", m.Namespace, "owner", m.Owner, "range", ls.Range.String(),
			"lgn", ls.LGN, "migrated", ls.Migrated)
	}
	log.Debug("lease answer sent", "namespace", m.Namespace, "owner", m.Owner, "incarnation", m.Incarnation,
		"leases", len(m.Leases), "renewed", renewed)
}
