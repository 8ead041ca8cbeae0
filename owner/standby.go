package owner

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// Standby Owners (docs/standbys.md; docs/design.md rules 21-24). In a
// namespace with standbys, the Manager names for each lease, beside its
// holder, a standby Owner in another zone, under a standby number (SGN)
// that it renews each time it names the lease's standby anew, drops it or
// promotes it. The library tells each side of the pair about the other,
// and fences both ways; the application moves the bytes, as it does for
// planned moves (Config.Handovers):
//
//   - The holder sends every write on a key whose lease has a standby
//     (StandbyOf: Peer not "") to it, tagged with the lease and SGN, and
//     acknowledges the client only once the standby stored it and
//     CheckReplicated still holds: the lease is unbroken and the pairing
//     unchanged.
//   - The standby stores a write only if CheckStandbyWrite accepts it: it
//     names the holder, lease and SGN this Owner was last given for the
//     key (StandbyFor), and the key is not held here.
//   - A newly named standby (OwnershipChange.Paired, not InSync) is filled
//     by its holder with a copy of the lease's state, like a handover;
//     once it has the whole copy it calls InSync. Only an in-sync standby
//     is promoted.
//   - When a holder's lease ends without a handover, the Manager grants the
//     range to its in-sync standby, marked Promoted, once the old lease has
//     provably ended: the standby serves from its copy, and no loss is
//     reported. A range whose holder and standby were both lost is
//     reported lost, as without standbys.
//
// The runtime publishes the core's pairings after every step, before the
// held set, so the methods below are local reads like CheckLeaseNow, safe
// from any goroutine, and a write that sees a new lease in CheckLeaseNow
// finds the lease's pairing in StandbyOf.

// roles is the pairings as published for StandbyOf, CheckReplicated,
// StandbyFor and CheckStandbyWrite.
type roles struct {
	epoch uint64
	mine  map[keyspace.LGN]Pairing // of held leases, by LGN (the largest SGN heard)
	of    []Pairing                // the leases this Owner stands by for, sorted by range
}

// StandbyOf returns, for a key this Owner holds now, the pairing its
// writes go through: Peer is the standby to send each write to, tagged
// with Lease and SGN, before acknowledging it; "" means the lease has no
// standby and a write is acknowledged on this copy alone (and lost, with a
// loss notification, if this Owner is). ok is false when the key is not
// held. Like CheckLeaseNow it is a local read, but it counts no request.
func (o *Owner) StandbyOf(key keyspace.Key) (p Pairing, ok bool) {
	num, held := o.holds(key)
	if !held {
		return Pairing{}, false
	}
	r := o.roles.Load()
	if q, ok := r.mine[num.LGN]; ok && r.epoch == num.Epoch {
		return q, true
	}
	return Pairing{Lease: num}, true
}

// holds is CheckLeaseNow without counting a request.
func (o *Owner) holds(key keyspace.Key) (LeaseNum, bool) {
	h := o.held.Load()
	i, ok := findLease(h.leases, key)
	if !ok || time.Since(o.base) >= h.until[i] {
		return LeaseNum{}, false
	}
	return h.leases[i].Num, true
}

// CheckReplicated is the holder's check before it acknowledges a write on
// key that went through pairing p (as StandbyOf returned it, and, when
// p.Peer is not "", stored by the standby): the lease still covers key,
// and the pairing is still p's (no standby named or dropped since: a new
// standby's fill may not hold the write). When it fails the write must not
// be acknowledged; the client retries.
func (o *Owner) CheckReplicated(key keyspace.Key, p Pairing) bool {
	cur, ok := o.StandbyOf(key)
	return ok && cur.Lease == p.Lease && cur.SGN == p.SGN && cur.Peer == p.Peer
}

// Standbys returns the pairing of each lease this Owner holds, as
// StandbyOf would for its keys (Peer "" and SGN 0: not paired yet, or
// a namespace without standbys), sorted by range.
func (o *Owner) Standbys() []Pairing {
	r := o.roles.Load()
	var out []Pairing
	for _, l := range o.Held() {
		if p, ok := r.mine[l.Num.LGN]; ok && r.epoch == l.Num.Epoch {
			out = append(out, p)
		} else {
			out = append(out, Pairing{Range: l.Range, Lease: l.Num})
		}
	}
	slices.SortFunc(out, func(a, b Pairing) int { return keyspace.Compare(a.Range, b.Range) })
	return slices.CompactFunc(out, func(a, b Pairing) bool { return a == b })
}

// StandbyFor returns the leases this Owner is the standby for, each naming
// its holder (Peer), sorted by range.
func (o *Owner) StandbyFor() []Pairing { return slices.Clone(o.roles.Load().of) }

// HolderOf returns the pairing of the lease covering key that this Owner
// stands by for, if any: Peer is the holder whose writes on key it may
// store.
func (o *Owner) HolderOf(key keyspace.Key) (Pairing, bool) {
	of := o.roles.Load().of
	i := slices.IndexFunc(of, func(p Pairing) bool { return p.Range.Contains(key) })
	if i < 0 {
		return Pairing{}, false
	}
	return of[i], true
}

// CheckStandbyWrite is the standby's fence: it accepts (nil) a write on
// key replicated by holder under its lease and sgn only if it names the
// holder, lease and SGN of the pairing this Owner was last given for a
// lease covering key, and never one on a key this Owner holds itself (once
// promoted, the old holder's late writes are refused). Otherwise it
// returns a *StandbyRefusal wrapping ErrNotStandby. The application checks
// and stores under one lock, so that a write is never stored under a
// pairing already gone.
func (o *Owner) CheckStandbyWrite(key keyspace.Key, holder string, lease LeaseNum, sgn protocol.SGN) error {
	_, held := o.holds(key)
	return checkStandbyWrite(o.roles.Load().of, held, key, holder, lease, sgn)
}

// checkStandbyWrite is Core.CheckStandbyWrite's rule on published roles;
// TestRuntimeFenceIsTheCore's checks that the two agree.
func checkStandbyWrite(of []Pairing, held bool, key keyspace.Key, holder string, lease LeaseNum, sgn protocol.SGN) error {
	refuse := func(why string, cur *Pairing) error {
		return &StandbyRefusal{Key: key, Holder: holder, Lease: lease, SGN: sgn, Reason: why, Current: cur}
	}
	if held {
		return refuse("this Owner holds the key itself", nil)
	}
	if j := slices.IndexFunc(of, func(p Pairing) bool {
		return p.Range.Contains(key) && p.Lease.Epoch == lease.Epoch && p.Lease.LGN > lease.LGN
	}); j >= 0 {
		newer := of[j]
		return refuse(fmt.Sprintf("a later lease, #%d of %s, covers the key", newer.Lease.LGN, newer.Peer), &newer)
	}
	i := slices.IndexFunc(of, func(p Pairing) bool { return p.Lease == lease && p.Range.Contains(key) })
	if i < 0 {
		return refuse("not the standby of that lease for this key", nil)
	}
	p := of[i]
	switch {
	case p.Peer != holder:
		return refuse(fmt.Sprintf("the lease's holder is %s", p.Peer), &p)
	case p.SGN != sgn:
		return refuse(fmt.Sprintf("the pairing's SGN is %d", p.SGN), &p)
	}
	return nil
}

// InSync tells the Manager, in every renewal until it records it, that
// this Owner's copy of the holder's lease under the pairing sgn is filled
// on pieces: it holds every write the holder acknowledged there. Call it
// once the holder's fill is stored, with the ranges the fill covered — the
// pieces of the lease the holder held when it copied them, which the fill
// must name. Only the pieces reported are promoted: a piece the holder had
// dropped before the fill (recalled, then listed again under the lease)
// was not copied, and is freed and reported lost if the holder is (Core
// .InSync). A report for a pairing this Owner does not have is ignored. It
// returns at once.
func (o *Owner) InSync(lease LeaseNum, sgn protocol.SGN, pieces []keyspace.Range) {
	select {
	case o.insync <- inSyncMsg{lease, sgn, slices.Clone(pieces)}:
	case <-o.stopped:
	}
}

type inSyncMsg struct {
	lease  LeaseNum
	sgn    protocol.SGN
	pieces []keyspace.Range
}
