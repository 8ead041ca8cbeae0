// The replicated promotion marks (docs/design.md rule 21): which leases
// were granted by promotion, and the message that first listed each, so
// that any leader lists a promoted grant its standby has not acknowledged
// as a promoted grant, as the leader that made it would have. Were the
// mark the promoting leader's alone, the next leader would list the lease
// as a renewal, which the standby refuses (a lease it never held): the
// range would be freed and the copy kept for it thrown away.
//
// A mark lives only until the standby acknowledges a message listing the
// grant (Core.promotionsSeen: the leader forgets it then, followers apply
// the forgetting) or the lease ends (Core.forgetPromoted), and never into
// a new epoch (State.Refound): kept longer, it would have a later leader,
// or one restored from a backup, list a lease the standby holds as a
// promoted grant again, and withhold its pushes to the standby.
//
// A request acknowledges a message at or after the first that listed the
// grant only if the standby heard a message listing it — every message
// lists it until then — and could take it up: a message that answers no
// request of the standby's run gives no lease (rule 2). A new leader's
// session has heard no request until the Owner's first, so it sends the
// Owner nothing while a promoted grant is pending in it (Core.sendPushed):
// a push it could not take the grant from would be acknowledged all the
// same. docs/protocol.md, "A leader change mid-promotion", has the
// argument.

package lease

import (
	"cmp"
	"errors"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// PromotedGrant marks a lease granted by promotion (rule 21). Seq is the
// Seq of the first message of its holder's session to list it: a request
// that acknowledges that message or a later one (AckSeq at or after it, in
// the Manager's epoch) has seen the grant (rule 6: it is listed in every
// message until then), as the leader that made it would judge. The Seqs
// of all leaders of an epoch are ordered (a new leader numbers from above
// every earlier one's), so a later leader judges the same way.
type PromotedGrant struct {
	LGN   keyspace.LGN `json:"l"`
	Owner string       `json:"o,omitempty"` // the promoted standby, its holder
	// Seq is the first message's Seq; in a Change, 0 forgets LGN's mark
	// (the standby acknowledged the grant, or its lease ended).
	Seq uint64 `json:"s"`
}

func (n *nsState) applyPromoted(p *PromotedGrant) error {
	switch {
	case p == nil:
		return errors.New("promotion change without a mark")
	case p.LGN == 0:
		return errors.New("promotion mark without an LGN")
	case p.Seq == 0:
		delete(n.promoted, p.LGN)
		return nil
	case p.Owner == "":
		return errors.New("promotion mark without its holder")
	}
	n.promoted[p.LGN] = *p
	return nil
}

// promotedList returns the promotion marks by LGN.
func (n *nsState) promotedList() []PromotedGrant {
	if len(n.promoted) == 0 {
		return nil
	}
	out := make([]PromotedGrant, 0, len(n.promoted))
	for _, p := range n.promoted {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PromotedGrant) int { return cmp.Compare(a.LGN, b.LGN) })
	return out
}
