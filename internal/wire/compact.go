package wire

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// Compact deltas (docs/protocol.md, "Compact deltas").
//
// A push after an Owner's crash carries one change per range the Owner
// held. In the full form each is a Change message of about 40 bytes: an
// LSN, two 8-byte keys, an Entry with its LGN and owner number, and the
// headers of three nested messages. The compact form (Update.compact)
// sends the same changes as columns of packed values: a kind byte, the
// range's start, the owner's number and the LGN's difference from the
// previous change's, about 11 bytes. It leaves out:
//   - the range's End when the change is FromCopy (leasetable.MarkFromCopy):
//     the range is a whole segment of the table at the delta's From, and a
//     Lookup whose copy is at From takes the End from it, or refuses the
//     delta (leasetable.ErrNoFit) and polls;
//   - the LSN when it follows the previous change's (or From): only the
//     skips of a merged delta travel;
//   - the owner, when the change is OwnerFromCopy: the Owner of the key
//     before its range at From, which the Lookup reads from its copy (after
//     a crash, each range goes to the Owner of the range before it);
//   - the headers of the nested messages, and repeated owner names (each
//     owner once per delta, or once per stream with stream_refs).
//
// Decoding needs no copy: CompactFromPB rebuilds the changes with End 0
// for FromCopy ones, and leasetable.View fills it in when it applies them.

// Kind bits of CompactChanges.kinds.
const (
	kindFromCopy      = 1 << iota // End left out: the copy's segment at Start
	kindViaFree                   // Change.via_free
	kindMigrated                  // Entry.migrated
	kindLSNSkip                   // an lsn_skips value follows
	kindMigratedFrom              // a migrated_from value follows
	kindOwnerFromCopy             // owned by the copy's owner of the key before Start
	kindAll           = 1<<iota - 1
)

// CompactUpdateToPB converts a delta to its compact wire form, its owners
// named in full in names (stream_refs unset). A snapshot, or a delta with
// no changes, is converted as UpdateToPB does. It returns nil for nil.
func CompactUpdateToPB(u *leasetable.Update) *leaseholdv1.Update {
	if u == nil || u.Snapshot || len(u.Changes) == 0 {
		return UpdateToPB(u)
	}
	n := len(u.Changes)
	c := &leaseholdv1.CompactChanges{
		Kinds:  make([]uint32, n),
		Starts: make([]uint64, n),
		Owners: make([]uint32, 0, n),
		Lgns:   make([]int64, 0, n),
	}
	names := map[ownerAddr]uint32{}
	prevLSN, prevLGN := u.From, keyspace.LGN(0)
	for i := range u.Changes {
		ch := &u.Changes[i]
		var k uint32
		c.Starts[i] = uint64(ch.Range.Start)
		if ch.FromCopy {
			k |= kindFromCopy
		} else {
			c.Ends = append(c.Ends, uint64(ch.Range.End))
		}
		if ch.ViaFree {
			k |= kindViaFree
		}
		if skip := uint64(ch.LSN - prevLSN - 1); skip != 0 {
			k |= kindLSNSkip
			c.LsnSkips = append(c.LsnSkips, skip)
		}
		prevLSN = ch.LSN
		e := &ch.Entry
		if e.Migrated {
			k |= kindMigrated
			if e.MigratedFrom != 0 {
				k |= kindMigratedFrom
				c.MigratedFrom = append(c.MigratedFrom, uint64(e.MigratedFrom))
			}
		}
		switch {
		case ch.OwnerFromCopy:
			k |= kindOwnerFromCopy
			c.Lgns = append(c.Lgns, int64(e.LGN-prevLGN))
			prevLGN = e.LGN
		case e.Owner != "":
			key := ownerAddr{e.Owner, e.Addr}
			ref, ok := names[key]
			if !ok {
				c.Names = append(c.Names, &leaseholdv1.Entry{Owner: e.Owner, Addr: e.Addr})
				ref = uint32(len(c.Names))
				names[key] = ref
			}
			c.Owners = append(c.Owners, ref)
			c.Lgns = append(c.Lgns, int64(e.LGN-prevLGN))
			prevLGN = e.LGN
		default:
			c.Owners = append(c.Owners, 0)
		}
		c.Kinds[i] = k
	}
	return &leaseholdv1.Update{From: uint64(u.From), To: uint64(u.To), Merged: u.Merged, Compact: c}
}

// compactFromPB decodes the changes of a compact delta: every column as
// long as the kinds and owners call for, every owner named, every range
// and entry valid. A FromCopy change has End 0, for the View to fill in.
func compactFromPB(where string, u *leasetable.Update, c *leaseholdv1.CompactChanges) error {
	where += ".compact"
	if c.GetStreamRefs() {
		return fmt.Errorf("%w: %s: owner numbers of the stream not resolved", ErrInvalid, where)
	}
	kinds, starts, owners := c.GetKinds(), c.GetStarts(), c.GetOwners()
	n := len(kinds)
	if n > MaxUpdateItems {
		return fmt.Errorf("%w: %s: %d changes; at most %d allowed", ErrInvalid, where, n, MaxUpdateItems)
	}
	if len(starts) != n || len(owners) > n {
		return fmt.Errorf("%w: %s: %d kinds, %d starts and %d owners; want a start per change and at most one owner",
			ErrInvalid, where, n, len(starts), len(owners))
	}
	names := c.GetNames()
	if len(names) > n {
		return fmt.Errorf("%w: %s: %d names for %d changes", ErrInvalid, where, len(names), n)
	}
	for i, nm := range names {
		if err := checkString(nm.GetOwner(), true); err != nil {
			return fmt.Errorf("%w: %s.names[%d].owner: %v", ErrInvalid, where, i, err)
		}
		if err := checkString(nm.GetAddr(), false); err != nil {
			return fmt.Errorf("%w: %s.names[%d].addr: %v", ErrInvalid, where, i, err)
		}
	}
	ends, lgns, skips, froms := c.GetEnds(), c.GetLgns(), c.GetLsnSkips(), c.GetMigratedFrom()
	// column returns an error when a column has run out.
	column := func(col string, left int) error {
		if left == 0 {
			return fmt.Errorf("%w: %s.%s: too few values for the changes", ErrInvalid, where, col)
		}
		return nil
	}
	if n == 0 {
		return nil
	}
	u.Changes = make([]leasetable.Change, n)
	prevLSN, prevLGN := u.From, keyspace.LGN(0)
	for i, k := range kinds {
		if k&^kindAll != 0 || k&kindMigratedFrom != 0 && k&kindMigrated == 0 {
			return fmt.Errorf("%w: %s.kinds[%d]: bad kind %#x", ErrInvalid, where, i, k)
		}
		ch := &u.Changes[i]
		ch.Range.Start = keyspace.Key(starts[i])
		if k&kindFromCopy != 0 {
			ch.FromCopy = true
		} else {
			if err := column("ends", len(ends)); err != nil {
				return err
			}
			ch.Range.End, ends = keyspace.Key(ends[0]), ends[1:]
			if !ch.Range.Valid() {
				return fmt.Errorf("%w: %s: change %d: empty range %v: start must be below end (end 0 is the end of the key space)",
					ErrInvalid, where, i, ch.Range)
			}
		}
		ch.LSN = prevLSN + 1
		if k&kindLSNSkip != 0 {
			if err := column("lsn_skips", len(skips)); err != nil {
				return err
			}
			ch.LSN, skips = ch.LSN+keyspace.LSN(skips[0]), skips[1:]
		}
		prevLSN = ch.LSN
		e := &ch.Entry
		e.Migrated = k&kindMigrated != 0
		if k&kindMigratedFrom != 0 {
			if err := column("migrated_from", len(froms)); err != nil {
				return err
			}
			e.MigratedFrom, froms = keyspace.LGN(froms[0]), froms[1:]
		}
		var o uint32
		if k&kindOwnerFromCopy != 0 {
			ch.OwnerFromCopy = true
		} else {
			if err := column("owners", len(owners)); err != nil {
				return err
			}
			o, owners = owners[0], owners[1:]
		}
		if o != 0 {
			if int64(o) > int64(len(names)) {
				return fmt.Errorf("%w: %s: change %d: owner %d; %d named", ErrInvalid, where, i, o, len(names))
			}
			e.Owner, e.Addr = names[o-1].GetOwner(), names[o-1].GetAddr()
		}
		if o != 0 || ch.OwnerFromCopy {
			if err := column("lgns", len(lgns)); err != nil {
				return err
			}
			e.LGN, lgns = prevLGN+keyspace.LGN(lgns[0]), lgns[1:]
			prevLGN = e.LGN
		}
		check := *e
		if ch.OwnerFromCopy {
			check.Owner = "-" // the copy names it; the View checks the entry again
		}
		if err := check.Validate(); err != nil {
			return fmt.Errorf("%w: %s: change %d at %016x: %v", ErrInvalid, where, i, starts[i], err)
		}
		ch.ViaFree = k&kindViaFree != 0
		if ch.ViaFree && (!u.Merged || check.Owner == "") {
			return fmt.Errorf("%w: %s: change %d at %016x: via_free needs a merged delta and an owner",
				ErrInvalid, where, i, starts[i])
		}
	}
	if len(ends)+len(owners)+len(lgns)+len(skips)+len(froms) != 0 {
		return fmt.Errorf("%w: %s: %d ends, %d owners, %d lgns, %d lsn_skips and %d migrated_from more than the changes call for",
			ErrInvalid, where, len(ends), len(owners), len(lgns), len(skips), len(froms))
	}
	return nil
}

var errCompactAndChanges = errors.New("a delta carries changes or compact changes, not both")
