package owner

import (
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// Standby Owners (docs/standbys.md). In a namespace with standbys, the
// Manager names for each range, beside its holder, a standby Owner in
// another zone, under a standby generation number (SGN) that it bumps each
// time it names the range's standby anew or promotes it. The library tells
// each side of the pair about the other; the application moves the bytes,
// as it does for planned moves (Config.Handovers):
//
//   - The holder sends every write on a range with a standby to it, tagged
//     with the range, its LeaseNum and the SGN (StandbyOf), and answers the
//     client only once the standby has stored it and CheckReplicated still
//     holds: the lease is unbroken and the pairing unchanged.
//   - The standby stores a write only if CheckStandbyWrite accepts it: it
//     names the holder, LeaseNum and SGN this Owner knows for the key.
//   - A newly named standby is filled by its holder with a copy of the
//     range (like a handover); once it has the whole copy it calls InSync.
//     Only an in-sync standby is promoted.
//   - When a holder's lease ends without a handover, the Manager grants the
//     range to its in-sync standby, marked Promoted, once the old lease has
//     provably ended: the standby serves from its copy, and no loss is
//     reported. A range whose holder and standby were both lost is
//     reported lost, as without standbys.

// Standby is the standby of a range this Owner holds: the Owner ID and
// address to send the range's writes to, and the SGN to tag them with.
type Standby struct {
	Range keyspace.Range
	// Lease is this Owner's lease on Range, to tag the writes with.
	Lease LeaseNum
	ID    string
	Addr  string
	SGN   SGN
	// InSync says the Manager recorded the standby as filled: a crash of
	// this Owner now loses no acknowledged write on Range.
	InSync bool
}

// Holder is the holder of a range this Owner stands by for: the only Owner
// whose writes on Range it may store, under Lease and SGN.
type Holder struct {
	Range keyspace.Range
	ID    string
	Addr  string
	Lease LeaseNum
	SGN   SGN
	// InSync says the Manager recorded this Owner as in sync for Range
	// under SGN: it is the one promoted if the holder's lease ends.
	InSync bool
}

// StandbyChange reports the standby roles after a change: Standbys, of
// the ranges this Owner holds, and Holders, of the ranges it stands by
// for, each whole and sorted by range. It is delivered to
// Config.OnStandbyChange on the upcall goroutine, after the OnChange of
// the same step, so a range promoted to this Owner is reported granted
// (Lease.Promoted) before its Holder is gone.
type StandbyChange struct {
	Standbys []Standby
	Holders  []Holder
}

// roles is the standby roles as published for StandbyOf, HolderOf and
// CheckStandbyWrite: each list sorted by Range.Start and disjoint.
type roles struct {
	standbys []Standby
	holders  []Holder
}

func (r *roles) equal(o *roles) bool {
	return slices.Equal(r.standbys, o.standbys) && slices.Equal(r.holders, o.holders)
}

// StandbyOf returns the standby of key's range as the Manager last named
// it for this Owner's lease on it (Standby.Lease), if there is one. A
// write on key under that lease is durable once the returned Owner stored
// it under Lease and SGN. Compare Lease with CheckLeaseNow's: the roles
// are published before the held set, so a write under a newer lease than
// Lease must wait for the roles to catch up, and one with no role at all
// has no standby: it is lost if this Owner crashes, and the Lookups are
// told. Like CheckLeaseNow, it is a local read.
func (o *Owner) StandbyOf(key keyspace.Key) (Standby, bool) {
	r := o.roles.Load()
	i, ok := findRange(r.standbys, key, func(s Standby) keyspace.Range { return s.Range })
	if !ok {
		return Standby{}, false
	}
	return r.standbys[i], true
}

// HolderOf returns the holder of key's range, if this Owner is its standby.
func (o *Owner) HolderOf(key keyspace.Key) (Holder, bool) {
	r := o.roles.Load()
	i, ok := findRange(r.holders, key, func(h Holder) keyspace.Range { return h.Range })
	if !ok {
		return Holder{}, false
	}
	return r.holders[i], true
}

// Standbys returns the standbys of the ranges this Owner holds.
func (o *Owner) Standbys() []Standby { return slices.Clone(o.roles.Load().standbys) }

// Holders returns the holders of the ranges this Owner stands by for.
func (o *Owner) Holders() []Holder { return slices.Clone(o.roles.Load().holders) }

// StandbyRefusalReason says why a standby refused a replicated write.
type StandbyRefusalReason string

const (
	// NotStandby: this Owner is not the standby of the key's range (it
	// never was, was replaced, or was promoted and holds it now).
	NotStandby StandbyRefusalReason = "not-standby"
	// StaleHolder: the write names another holder, or another lease of
	// it, than the one this Owner stands by for: a holder whose lease
	// ended (a late write after a promotion or a move).
	StaleHolder StandbyRefusalReason = "stale-holder"
	// StaleSGN: the write names another standby generation: the sender
	// does not know of the latest naming of this standby.
	StaleSGN StandbyRefusalReason = "stale-sgn"
)

// ErrNotStandby is what every *StandbyRefusal matches with errors.Is.
var ErrNotStandby = errors.New("owner: not the standby of the write's range under its holder, lease and SGN")

// StandbyRefusal is the error CheckStandbyWrite returns for a replicated
// write the standby must not store.
type StandbyRefusal struct {
	Reason StandbyRefusalReason
	Key    keyspace.Key
	// From, Lease and SGN are what the write named; Want is the role this
	// Owner knows for the key (zero with NotStandby).
	From  string
	Lease LeaseNum
	SGN   SGN
	Want  Holder
}

// Is makes a refusal match ErrNotStandby.
func (e *StandbyRefusal) Is(target error) bool { return target == ErrNotStandby }

func (e *StandbyRefusal) Error() string {
	switch e.Reason {
	case NotStandby:
		return fmt.Sprintf("owner: refused a replicated write on key %v from %s: not the standby of its range", e.Key, e.From)
	case StaleHolder:
		return fmt.Sprintf("owner: refused a replicated write on key %v from %s under lease %d/%d: the holder is %s under lease %d/%d",
			e.Key, e.From, e.Lease.Epoch, e.Lease.LGN, e.Want.ID, e.Want.Lease.Epoch, e.Want.Lease.LGN)
	default:
		return fmt.Sprintf("owner: refused a replicated write on key %v from %s under SGN %d: this standby is at SGN %d",
			e.Key, e.From, e.SGN, e.Want.SGN)
	}
}

// CheckStandbyWrite is the standby's fence: it accepts (nil) a write on key
// sent by the holder from under lease and sgn only if this Owner is the
// standby of key's range, and from, lease and sgn are the holder, its
// lease and the SGN it knows; otherwise it returns a *StandbyRefusal
// saying why. Like CheckLeaseNow it is a local read. The application
// checks and stores under one lock, so that a write is never stored
// under a role that was already gone.
func (o *Owner) CheckStandbyWrite(key keyspace.Key, from string, lease LeaseNum, sgn SGN) error {
	return checkStandbyWrite(o.roles.Load(), key, from, lease, sgn)
}

func checkStandbyWrite(r *roles, key keyspace.Key, from string, lease LeaseNum, sgn SGN) error {
	ref := &StandbyRefusal{Key: key, From: from, Lease: lease, SGN: sgn}
	i, ok := findRange(r.holders, key, func(h Holder) keyspace.Range { return h.Range })
	if !ok {
		ref.Reason = NotStandby
		return ref
	}
	h := r.holders[i]
	ref.Want = h
	switch {
	case h.ID != from || h.Lease != lease:
		ref.Reason = StaleHolder
		return ref
	case h.SGN != sgn:
		ref.Reason = StaleSGN
		return ref
	}
	return nil
}

// CheckReplicated is the holder's check before it acknowledges a write on
// key stored under lease n at its standby under sgn: the lease has covered
// key without a gap until now (CheckLeaseContinuous), and the range's
// standby is still the one of sgn. A pairing renamed meanwhile (a new SGN)
// fails it: the write may predate the new standby's fill (docs/protocol.md,
// "Standby Owners"); the application answers as for a lost lease, and the
// client retries.
func (o *Owner) CheckReplicated(key keyspace.Key, n LeaseNum, sgn SGN) bool {
	if !o.CheckLeaseContinuous(key, n) {
		return false
	}
	sb, ok := o.StandbyOf(key)
	return ok && sb.Lease == n && sb.SGN == sgn
}

// InSync tells the Manager, in the next renewals until it records it,
// that this Owner, standby for h, has the whole copy of h.Range: every
// write its holder acknowledged under h.Lease. Call it once the holder's
// fill is stored; until the Manager records it the standby is not
// promoted. A report for a role this Owner no longer has is ignored. It
// returns at once.
func (o *Owner) InSync(h Holder) {
	select {
	case o.insync <- h:
	case <-o.stopped:
	}
}

// findRange finds the entry of sorted, disjoint list whose range holds key.
func findRange[T any](list []T, key keyspace.Key, rangeOf func(T) keyspace.Range) (int, bool) {
	i, _ := slices.BinarySearchFunc(list, key, func(e T, k keyspace.Key) int {
		if rangeOf(e).Start <= k {
			return -1
		}
		return 1
	})
	if i == 0 || !rangeOf(list[i-1]).Contains(key) {
		return 0, false
	}
	return i - 1, true
}
