package owner

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// Confirmed releases (CoreConfig.ConfirmReleases).
//
// In a linked server, giving a range up and the server ceasing to serve it
// are one step: CheckLeaseNow reads the held set the Core has just changed,
// before the request that tells the Manager goes out. An application
// behind the agent learns of the change only when the agent's message
// reaches it, and believes its old deadline until then. If the Core
// acknowledged a recall by omission at once, the Manager could grant the
// range to another Owner while the application still served it. So with
// ConfirmReleases the piece stays listed in every request, though no
// longer held, until the embedder says the application has let it go
// (Released) or the lease would have run out, which the application's
// deadline never passes. The Manager meanwhile keeps the range reserved to
// this Owner, as for any lease it lists, and frees it when the request
// that omits it arrives. A renewal of a listed piece is neither taken up
// nor refused. Handovers need none of this: the application stops serving
// a range before it reports the handover done. Leave drops every listed
// piece: an embedder leaves only once its application serves nothing.

// keepListed adds a given-up piece to the pieces still listed.
func (c *Core) keepListed(l Lease) {
	c.releasing = append(c.releasing, l)
	slices.SortFunc(c.releasing, func(a, b Lease) int { return keyspace.Compare(a.Range, b.Range) })
}

// Released says the application no longer serves ranges: every listed
// piece overlapping one of them is dropped from the requests, and a
// request goes out at the next Tick, which may be now, so the Manager can
// move them at once.
func (c *Core) Released(now time.Time, ranges []keyspace.Range) {
	n := len(c.releasing)
	c.releasing = slices.DeleteFunc(c.releasing, func(l Lease) bool {
		return slices.ContainsFunc(ranges, func(r keyspace.Range) bool { return r.Overlaps(l.Range) })
	})
	if len(c.releasing) == n || c.left {
		return
	}
	if c.resendAt.IsZero() || now.Before(c.resendAt) {
		c.resendAt = now
	}
}

// Releasing returns the pieces given up but still listed.
func (c *Core) Releasing() []Lease { return slices.Clone(c.releasing) }

// expireReleasing drops the listed pieces whose lease has run out: the
// application's deadline for them has passed too.
func (c *Core) expireReleasing(now time.Time) {
	c.releasing = slices.DeleteFunc(c.releasing, func(l Lease) bool { return !now.Before(l.Expiry) })
}

// isReleasing reports whether r under lease n lies within a listed piece.
func (c *Core) isReleasing(r keyspace.Range, n LeaseNum) bool {
	_, ok := covering(c.releasing, r, n)
	return ok
}

// listed is what a request lists: the held leases, and the pieces given
// up but not yet released, except where a lease held now overlaps them
// (the same application holds that lease: no one else is granted it).
func (c *Core) listed() []protocol.Lease {
	var out []protocol.Lease
	for _, l := range c.held {
		out = append(out, protocol.Lease{Range: l.Range, LGN: l.Num.LGN})
	}
	if len(c.releasing) == 0 {
		return out
	}
	for _, l := range c.releasing {
		if !slices.ContainsFunc(c.held, func(h Lease) bool { return h.Range.Overlaps(l.Range) }) {
			out = append(out, protocol.Lease{Range: l.Range, LGN: l.Num.LGN})
		}
	}
	slices.SortFunc(out, func(a, b protocol.Lease) int { return keyspace.Compare(a.Range, b.Range) })
	return out
}
