package sim

import (
	"github.com/leasehold/leasehold/protocol"
)

// A promotion kept across a Manager leader change (docs/design.md rule 21;
// docs/protocol.md, "Standby Owners"): the Manager replica that first
// sends a promoted grant is crashed at once (StandbyFaults.DeposeOneIn),
// so the grant's message is dropped, delivered, or delivered late, and
// the next leader — another replica, or this one restarted from its log —
// must list the lease to its standby as the promoted grant it is until the
// standby acknowledges it. A Manager that lists it as a renewal instead
// (the mark kept by the leader that promoted alone, faults
// .PromotionLeaderLocal) has the standby refuse a lease it never held: the
// range is freed, a loss reported, and the copy kept for it thrown away —
// safe (every Lookup is told) but the loss standbys exist to prevent.
//
// The checker "promotion kept" holds each such grant to this: its Owner
// run is never sent a message listing the lease as a renewal before it has
// heard one listing it as a grant. Any leader lists a promoted grant as a
// grant until a request of the standby's run acknowledges a message that
// listed it so (rule 6), and a message it hears lists every grant not yet
// acknowledged, so the standby has heard the grant before any renewal of
// it — whether it took it up or not. What else ends such a grant without
// the standby taking it up is not a renewal, and is not held against it:
// the standby's run ending (DeposedOwnerGone), its reservation running out
// while the standby cannot reach a leader (a partition, a stall, no
// leader), the standby leaving or draining, or the plan moving the range
// on. Those are counted in DeposedFreed with the rest; the checker is
// about the one way the promotion itself is lost.

// sbDeposedHeard follows Lease message m from Manager replica from (of run
// gen) to Owner run n, before n steps on it: whether it lists one of n's
// deposed promoted grants as a grant (seen, and, from a later Manager run,
// counted as listed again) or as a renewal before any grant (a violation).
// Messages n drops unseen (a Seq at or below one heard, another
// incarnation's) are skipped, as n skips them.
//
// A grant counts as heard only from a message n could take it up from, by
// n's own rule (owner.Core.Answers): an answer to a request of its run that
// it still remembers — its latest (in order), or one of those before it
// whose send times it keeps (raced). Not, say, a new leader's takeover push, which answers no request
// (AckSeq 0) and so gives no lease (rule 2), though n acknowledges it.
// A grant n could take but does not (its lease already run out on n's
// clock, a piece n gave up since) is heard all the same: that is n's
// lease lapsing, not the promotion lost.
func (s *Sim) sbDeposedHeard(from, n *node, gen uint64, m *protocol.LeaseResponse) {
	if len(s.sbf.deposed) == 0 || m.Incarnation != n.inc {
		return
	}
	if h, ok := s.sbf.heard[n]; ok && h[0] == n.inc && m.Seq <= h[1] {
		return // a duplicate or overtaken: n drops it
	}
	if s.sbf.heard == nil {
		s.sbf.heard = map[*node][2]uint64{}
	}
	s.sbf.heard[n] = [2]uint64{n.inc, m.Seq}
	answers := n.own.Answers(m.AckSeq) // asked before n steps m
	for i := range s.sbf.deposed {
		d := &s.sbf.deposed[i]
		if d.to != n || d.inc != n.inc || m.Epoch != d.num.Epoch {
			continue
		}
		for _, l := range m.Leases {
			switch {
			case l.LGN != d.num.LGN:
			case l.Grant:
				if !answers {
					continue // n cannot take it from m
				}
				d.seenGrant = true
				if (from != d.mgr || gen != d.mgrInc) && !d.regranted {
					d.regranted = true
					s.stats.SBFaults.DeposedRegranted++
				}
			case !d.seenGrant:
				s.chk.fail("promotion kept", "%s (run %d) listed %s its promoted grant %v on %v as a renewal before it ever heard it as a grant: its promoting Manager was crashed as it sent it, and the promotion was lost with it",
					from.name, gen, n.name, d.num, l.Range)
			}
		}
	}
}
