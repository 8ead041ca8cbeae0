package replica

import "time"

// Undrain cancels an Owner's drain (leasehold drain --cancel); only the
// leader does.
func (r *Replica) Undrain(now time.Time, ns, id string) error {
	if !r.leading() {
		return r.notLeader()
	}
	return r.core.Undrain(now, ns, id)
}

// Forget removes an Owner's record at an operator's request (leasehold
// forget); only the leader does, and only when the Owner is owed nothing.
func (r *Replica) Forget(now time.Time, ns, id string) error {
	if !r.leading() {
		return r.notLeader()
	}
	return r.core.Forget(now, ns, id)
}
