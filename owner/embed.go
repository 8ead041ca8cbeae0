package owner

import (
	"context"

	"github.com/leasehold/leasehold/keyspace"
)

// The calls below are for a process that holds leases on behalf of another
// (the agent, docs/agent.md); a linked server needs none of them.

// Released says the application no longer serves ranges it was told were
// revoked (Config.ConfirmReleases): the Owner stops listing them to the
// Manager, which may then move them at once.
func (o *Owner) Released(ranges []keyspace.Range) {
	select {
	case o.released <- ranges:
	case <-o.stopped:
	}
}

// Drain asks the Manager to move every range away, handing each range's
// state over as it goes (Config.Handovers), and returns once nothing is
// held, or with ctx's error. The Owner stays a member: Close leaves.
func (o *Owner) Drain(ctx context.Context) error {
	drained := make(chan struct{})
	select {
	case o.drain <- drained:
	case <-ctx.Done():
		return ctx.Err()
	case <-o.stopped:
		return context.Canceled
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Abandon stops the Owner at once without a word to the Manager: nothing
// is renewed, handed over or released, so every range stays reserved until
// its lease runs out at the Manager, which then reports its state lost.
// It is how an agent lets go when its application died: nothing the
// application still believes is freed early.
func (o *Owner) Abandon() error {
	if !o.closed.CompareAndSwap(false, true) {
		return nil
	}
	o.cancel()
	o.wg.Wait()
	o.up.Close()
	return o.managers.Close()
}

// Count counts n requests on key, as n calls of CheckLeaseNow would, for
// the load reports: an application that checks its leases itself reports
// its requests this way.
func (o *Owner) Count(key keyspace.Key, n uint64) {
	h := o.held.Load()
	i, ok := findLease(h.leases, key)
	if !ok || n == 0 {
		return
	}
	if v := h.hits[i].Add(n); v/hotSample != (v-n)/hotSample { // as often as CheckLeaseNow samples
		o.load.sample(key)
	}
}
