package sim

import (
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// Planned moves with standbys (Config.Migration with Config.Standbys): the
// holder's handover carries the standby application's keys as well (the
// stateMsg's sb), it takes no new write on a range whose state it copied
// out (until the handover's deadline, as acks.go's writes), and the next
// Owner takes up a migrated grant with the keys handed over — a key the
// copy does not have is empty — and must then hold every write
// acknowledged on them (checker.sbServes). A migrated grant's lease is
// paired anew (rule 22), so its first fill copies what was handed over.

// sbHandedOver is the copy of the standby application's keys of handover
// h, held under h's lease, that Owner run n sends with the range's state.
func (s *Sim) sbHandedOver(n *node, h owner.Handover) map[keyspace.Key]sbVal {
	if !s.cfg.Standbys {
		return nil
	}
	now, a := n.local(s.now), n.app.standby()
	data := map[keyspace.Key]sbVal{}
	for i := range sbKeys {
		k := sbKey(i)
		if !h.Range.Contains(k) {
			continue
		}
		if num, ok := n.own.CheckLeaseNow(now, k); ok && num == h.Lease {
			if v, ok := a.store[k]; ok {
				data[k] = v
			}
		}
	}
	return data
}

// sbFrozen reports whether key k, held under lease num, is in a range whose
// state Owner run n copied out for a handover whose deadline has not
// passed at local time now: it takes no write there.
func (s *Sim) sbFrozen(n *node, now time.Time, k keyspace.Key, num owner.LeaseNum) bool {
	for _, f := range n.app.frozen {
		if f.h.Lease == num && now.Before(f.h.Deadline) && f.h.Range.Contains(k) {
			return true
		}
	}
	return false
}

// sbTakeUpMigrated takes up the standby application's keys of the migrated
// (not promoted) grants of ch from the state handed over for them, and
// checks them against the writes acknowledged.
func (s *Sim) sbTakeUpMigrated(n *node, ch owner.OwnershipChange) {
	a, now := n.app.standby(), n.local(s.now)
	for _, g := range ch.Granted {
		if !g.Migrated || g.Promoted {
			continue
		}
		from, ok := s.chk.migratedFrom[leaseID{g.Num.Epoch, g.Num.LGN}]
		if !ok {
			continue // the migration checker fails it
		}
		for i := range sbKeys {
			k := sbKey(i)
			if !g.Range.Contains(k) {
				continue
			}
			delete(a.store, k)
			var copied time.Duration = -1
			for _, t := range n.app.pending { // the latest copy, if the state came more than once
				if t.from == (leaseID{g.Num.Epoch, from}) && t.r.Contains(k) && t.copied > copied {
					copied = t.copied
					if v, ok := t.sb[k]; ok {
						a.store[k] = v
					} else {
						delete(a.store, k)
					}
				}
			}
			if _, ok := a.store[k]; ok {
				s.stats.SBFaults.StandbyHandoverWrites++
			}
			if num, ok := n.own.CheckLeaseNow(now, k); ok && num == g.Num {
				s.chk.sbServes(n, k, "took up a migrated grant")
			}
		}
	}
}
