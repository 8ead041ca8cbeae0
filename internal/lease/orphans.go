// Orphans (docs/design.md rule 11): the ranges of an Owner's earlier
// incarnation stay in the table until their reservations end.

package lease

import (
	"time"

	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// Orphans: the ranges of an Owner's earlier run.
//
// A request from a new incarnation of an Owner says that run's soft state
// is gone, but not that the old process is: two processes may share an ID
// (a copied configuration, a restarted pod whose old self still runs), and
// the old one keeps acting on its leases until they run out. Its ranges
// are therefore left in the table as they are — owned, under the old LGNs,
// routed to the old address — and stay reserved; nothing renews them. When
// a reservation ends the old process can no longer believe the lease
// (single copy, step 1), and only then does expiry free the range: the
// loss a Lookup is told of comes after the last write the old process
// could acknowledge. The range could not be granted before its reservation
// ended anyway, so nothing is served later than if it had been freed at
// once.
//
// An entry is an orphan when its Owner's session began after it was
// granted: its LGN is at or below the session's since, the table's largest
// LGN when the incarnation first spoke (OwnerRecord.Since, replicated, so
// a new leader tells orphans apart too). The new run's own grants come
// later and have larger LGNs. An orphan is never listed to the new run,
// never renewed and never released by its requests: the new run does not
// hold it, and its omission proves nothing about the old process.

// orphan reports whether table entry e belongs to an earlier run of its
// Owner than the session the Manager has.
func (n *namespace) orphan(e leasetable.Entry) bool {
	o := n.owners[e.Owner]
	return e.Owner != "" && o != nil && e.LGN <= o.since
}

// heldByRun returns the table segments o's run holds: heldBy without the
// orphans.
func (n *namespace) heldByRun(o *ownerSession) []leasetable.Segment {
	segs := n.heldBy(o.id)
	for i, s := range segs {
		if s.Entry.LGN > o.since {
			continue
		}
		out := append([]leasetable.Segment(nil), segs[:i]...)
		for _, s := range segs[i+1:] {
			if s.Entry.LGN > o.since {
				out = append(out, s)
			}
		}
		return out
	}
	return segs
}

// handedInTime reports whether a handover o reports done may be granted on
// migrated: not if this session asked for it and its deadline has passed.
// Past the deadline the Manager has recalled the range, and the holder may
// have taken writes on it again (kv does, once its own deadline passes),
// so the state it handed over may lack them; and the next Owner keeps what
// it was handed only for a while after the deadline. The range is then
// freed and its loss reported instead. Refusing is always safe: the
// receiver drops what it was handed, and Lookups are told.
//
// A handover this session has no record of — one an earlier leader asked
// for, reported in a fresh session after a failover — is taken as before:
// its deadline is not known here, and the Owner reports a handover done
// only before its own deadline (owner.Core.HandoverDone), so the state it
// handed over is complete.
func (c *Core) handedInTime(now time.Time, o *ownerSession, h protocol.Handed) bool {
	if c.broken.LateHandoverDone {
		return true
	}
	a, ok := o.handing[h.Range]
	return !ok || a.to != h.To || a.inc != h.Incarnation || now.Before(a.deadline)
}
