package sim

import (
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// sbFillOnPaired sends pairing p's fill at once, on the upcall that
// reports it, as kv does (examples/kv/kv/standby.go): from what the
// application holds under p's lease at that moment, which is nothing
// while the upcall reporting the lease's grant has not run (the state a
// promoted or migrated grant carries is not taken up before it). The Owner
// reports a lease's pairing after its grant (owner.Core.stepPairings);
// with faults.PairedBeforeGranted it does not, the fill of a promoted
// grant is empty, the standby reports in sync, and its promotion loses
// acknowledged writes. sbStep resends the fill every Renew until the
// pairing is in sync.
func (s *Sim) sbFillOnPaired(n *node, a *sbApp, p owner.Pairing) {
	a.fills[p] = s.now
	now := n.local(s.now)
	_, granted := n.app.since[p.Lease]
	data := map[keyspace.Key]sbVal{}
	for i := range sbKeys {
		k := sbKey(i)
		if num, held := n.own.CheckLeaseNow(now, k); held && num == p.Lease && granted {
			if v, ok := a.store[k]; ok {
				data[k] = v
			}
		}
	}
	if to := s.byOwner[p.Peer]; to != nil {
		s.send(n, to, fillMsg{p: p, holder: n.name, data: data, pieces: sbPieces(n, now, p.Lease)})
	}
}
