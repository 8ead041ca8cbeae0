// The broken twins of the rules, for the simulation's sweeps.

package lease

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// The broken rules. The simulation proves its checkers can fail by running
// the Manager with a rule broken on purpose (ReplicaConfig.Break, a
// faults.Set, which the Replica hands its Core): each switch is read where
// its rule is kept, and the bodies that break a rule live here, so the
// safety code reads as the rule.
// NoRaceFilter, NoTakeoverReservation and AnswerBeforeCommit (Replica)
// need no body of their own: breaking them skips a step.

// migrateUnhanded is the broken rule faults.MigrateUnhanded: it grants q,
// given up by o without a handover, to the Owner the desired assignment
// names, as if its state had been handed over.
func (c *Core) migrateUnhanded(now time.Time, n *namespace, o *ownerSession, q keyspace.Range, from keyspace.LGN) bool {
	done := false
	n.eachDesired(q, func(p keyspace.Range, want string) {
		if to := n.owners[want]; p == q && want != o.id && to != nil && to.member && !to.draining {
			c.grant(now, n, to, q, from)
			done = true
		}
	})
	return done
}

// renewsHeldSubset is the broken rule faults.RenewHeldSubset: it lets a
// message renew as RenewHeld when every lease it lists renews one the
// request held, without checking that it lists them all, so a recall is
// lost in the compact form.
func renewsHeldSubset(leases, held []protocol.Lease) bool {
	return !slices.ContainsFunc(leases, func(l protocol.Lease) bool {
		return !slices.ContainsFunc(held, func(h protocol.Lease) bool { return h.Range == l.Range && h.LGN == l.LGN })
	})
}

// reusedLGN is the broken rule faults.ReuseLGN: a grant gets the LGN the
// namespace issued last instead of a fresh one (but 1 for the first).
func reusedLGN(n *namespace) keyspace.LGN {
	return max(n.s.lgn, 1)
}
