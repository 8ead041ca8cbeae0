// A Core's start (docs/design.md rules 9 and 10): a Manager without state,
// or a new leader taking over the State, reserves the whole key space for
// a ManagerLease before it grants anything.

package lease

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// NewCore returns the core of a Manager that starts at now with no state.
// It knows nothing of leases a previous incarnation granted, so it reserves
// the whole key space for one ManagerLease before granting anything
// (C§2.3.1).
func NewCore(cfg Settings, now time.Time) *Core {
	return Resume(cfg, NewState(cfg.Timing.LogRetention), 0, now)
}

// Resume returns the core of a Manager that takes over st at now as a new
// leader (docs/design.md rules 8 and 10); its sessions number their messages from base,
// which must exceed every sequence number an earlier leader of st used. It works on a copy; st is not
// changed. Owners keep their leases: the table, LGNs and incarnations carry
// over. What a deposed leader promised is not known, so every range is
// reserved until now + ManagerLease unless its holder renews or releases it
// (the second failover rule), and each owner's first request in the new
// session releases nothing, since it may have been sent before the owner
// heard the old leader's last grant. A Replica passes term << 32 (plus a
// count of takeovers within the term), so an Owner orders a new leader's
// messages after an old one's.
func Resume(cfg Settings, st *State, base uint64, now time.Time) *Core {
	return resume(cfg, faults.Set{}, st, base, now)
}

// ResumeBroken is Resume with the rules broken (broken.go) set, for the
// simulation's broken twins: the Replica hands its Core the faults.Set it
// was given.
func ResumeBroken(cfg Settings, broken faults.Set, st *State, base uint64, now time.Time) *Core {
	return resume(cfg, broken, st, base, now)
}

func resume(cfg Settings, broken faults.Set, st *State, base uint64, now time.Time) *Core {
	if cfg.Policy == nil {
		cfg.Policy = assign.ConsistentHash{}
	}
	cfg.Epoch = max(cfg.Epoch, 1)
	c := &Core{cfg: cfg, broken: broken, st: st.Clone(), ns: map[string]*namespace{}, seqBase: base, lastNow: now}
	if c.st.epoch == 0 {
		c.apply(now, Change{Op: OpEpoch, Epoch: cfg.Epoch})
	}
	c.rng = rand.New(rand.NewPCG(cfg.Seed, c.st.epoch^base))
	for _, name := range append([]string{protocol.DefaultNamespace}, cfg.Namespaces...) {
		if c.st.ns[name] == nil {
			c.apply(now, Change{Op: OpNamespace, NS: name})
		}
	}
	for _, name := range c.st.Namespaces() {
		s := c.st.ns[name]
		n := &namespace{name: name, s: s, res: newReservations(), owners: map[string]*ownerSession{}, members: true, pair: true,
			handovers: newOrdered(cmpHandoverEnd), resends: newOrdered(cmpOwnerTimer), silences: newOrdered(cmpOwnerTimer)}
		if base == 0 || !broken.NoTakeoverReservation {
			n.res.set(keyspace.Full, now.Add(cfg.Timing.ManagerLease))
		}
		for _, id := range sortedOwnerIDs(s.owners) {
			r := s.owners[id]
			n.owners[id] = &ownerSession{id: id, addr: r.Addr, inc: r.Incarnation, member: r.Member,
				capacity: r.Capacity, draining: r.Draining, since: r.Since, mySeq: c.seqBase, lastHeard: now, zone: r.Zone}
			c.heard(n, n.owners[id])
			if !r.Member {
				c.forgetTimer(n, n.owners[id])
			}
		}
		c.resumePromoted(n)
		if cfg.Rebalance != nil && len(s.desired) > 0 {
			// Carry on from it. The next round waits for the Owners' load
			// reports: without them it would balance by key space.
			c.setDesired(now, n, slices.Clone(s.desired))
			n.members, n.planAt = false, now.Add(c.rebalanceEvery())
		}
		c.ns[name] = n
	}
	c.flush(now)
	for _, n := range c.ns {
		n.membersAt = time.Time{} // starting is no membership change: the first one is planned at once
	}
	return c
}
