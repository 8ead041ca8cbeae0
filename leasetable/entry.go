package leasetable

import (
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// Errors returned by View.Apply and Table.Restore. Each error wraps one of
// these with a description of what was wrong, so callers can branch with
// errors.Is and log the rest.
var (
	// ErrLSNMismatch: a delta does not continue from the view's LSN, or its
	// changes are not numbered From+1..To in order. The Lookup should ask
	// again with its own LSN (the manager then sends a delta or a snapshot).
	ErrLSNMismatch = errors.New("leasetable: update does not follow the view's LSN")
	// ErrStaleSnapshot: a snapshot older than the view. Applying it would
	// step the view back in time, so it is refused.
	ErrStaleSnapshot = errors.New("leasetable: snapshot older than the view")
	// ErrMalformed: an update or snapshot that no correct manager sends: an
	// invalid range, an invalid entry, or segments that are unsorted,
	// overlapping or do not cover the key space.
	ErrMalformed = errors.New("leasetable: malformed update")
	// ErrNoFit: a change that takes its range from the view (FromCopy)
	// names a segment the view does not have. The view is not the one the
	// delta was made for; the Lookup should ask again with its own LSN.
	ErrNoFit = errors.New("leasetable: delta does not fit the view")
)

// Entry is what the table says about a range.
//
// A free entry is exactly Entry{}: no owner, no address, LGN 0, not migrated.
// An owned entry has a non-empty Owner and a non-zero LGN. Validate enforces
// this; the loss rule and Lookup's ok result depend on it.
type Entry struct {
	Owner    string       // owner ID; "" = no owner (free)
	Addr     string       // the owner's address, for lookups
	LGN      keyspace.LGN // lease generation number; 0 when Owner == ""
	Migrated bool         // this grant carried the previous holder's state (no loss notification)

	// MigratedFrom optionally names the LGN of the grant whose state this
	// grant carried (Migrated must be set). When it is non-zero, a Lookup
	// excuses a change only from exactly that LGN; when it is zero, any
	// change to a Migrated entry is excused (the papers' rule). Set it: a
	// snapshot can hide an unmigrated change that happened just before the
	// migration, and only MigratedFrom lets the Lookup see it. See doc.go,
	// "The loss rule".
	MigratedFrom keyspace.LGN
}

// Free reports whether e is the free entry (no owner).
func (e Entry) Free() bool { return e.Owner == "" }

// Validate reports why e is not a valid entry, or nil.
func (e Entry) Validate() error {
	switch {
	case e.Owner == "" && e.LGN != 0:
		return fmt.Errorf("free entry (no Owner) has LGN %d; want 0", e.LGN)
	case e.Owner != "" && e.LGN == 0:
		return fmt.Errorf("entry for owner %q has LGN 0; an owned range needs a non-zero LGN", e.Owner)
	case e.Owner == "" && e.Addr != "":
		return fmt.Errorf("free entry (no Owner) has Addr %q; want empty", e.Addr)
	case e.Owner == "" && (e.Migrated || e.MigratedFrom != 0):
		// A migrated free entry would excuse the loss of the previous
		// owner's state without anyone holding it.
		return errors.New("free entry (no Owner) is marked Migrated; only a grant can carry state")
	case e.MigratedFrom != 0 && !e.Migrated:
		return fmt.Errorf("entry for owner %q has MigratedFrom %d but Migrated is false", e.Owner, e.MigratedFrom)
	case e.MigratedFrom != 0 && e.MigratedFrom == e.LGN:
		return fmt.Errorf("entry for owner %q has MigratedFrom equal to its own LGN %d", e.Owner, e.LGN)
	}
	return nil
}

func (e Entry) String() string {
	if e.Free() {
		return "free"
	}
	s := fmt.Sprintf("%s/%d", e.Owner, e.LGN)
	if e.Addr != "" {
		s += "@" + e.Addr
	}
	if e.Migrated {
		s += " migrated"
		if e.MigratedFrom != 0 {
			s += fmt.Sprintf(" from %d", e.MigratedFrom)
		}
	}
	return s
}

// Segment is a range and what the table says about it.
type Segment struct {
	Range keyspace.Range
	Entry Entry
}

func (s Segment) String() string { return s.Range.String() + " " + s.Entry.String() }

// Change is one logged change: Entry set on Range at LSN.
type Change struct {
	LSN   keyspace.LSN
	Range keyspace.Range
	Entry Entry
	// ViaFree says the range was freed, by a change of the same delta that
	// it leaves out, just before this entry (Merge): a view applies it as
	// the two changes, a key lost if its old entry was owned.
	ViaFree bool
	// Whole says Range was exactly one segment of the table just before
	// this change: Table.Set records it in the log, and MarkFromCopy reads
	// it. A View ignores it.
	Whole bool
	// FromCopy says Range is exactly one segment of the table at the
	// delta's From (MarkFromCopy), so a Lookup whose copy is at From can
	// take Range.End from its copy, and a compact delta leaves it out. A
	// View applies such a change only when it has a segment starting at
	// Range.Start, and takes its End from there; an End given (not 0)
	// must be that one. See docs/protocol.md, "Compact deltas".
	FromCopy bool
	// LeftOwner says the key before Range was held, just before this
	// change, by Entry's Owner at Entry's Addr: Table.Set records it, and
	// MarkFromCopy reads it. A View ignores it.
	LeftOwner bool
	// OwnerFromCopy says Entry's Owner and Addr are those of the key
	// before Range.Start in the table at the delta's From (MarkFromCopy),
	// so a compact delta leaves them out and a Lookup whose copy is at
	// From reads them there. A View applies such a change only when that
	// key is owned in its copy; an Owner given must be that one.
	OwnerFromCopy bool
}

// Update answers a lookup's sync: either a delta (Changes, contiguous LSNs
// From+1..To) or a Snapshot (Segments, whole table at LSN To).
//
// In a snapshot From is the LSN the Lookup asked with; the View ignores it.
type Update struct {
	From, To keyspace.LSN
	Snapshot bool
	Changes  []Change
	Segments []Segment
	// Merged marks a delta from which Merge left changes out: its LSNs
	// increase, and the last is To, but they may skip.
	Merged bool
}

// lostOnChange is the loss rule (P§4.2, C§2.2) for one key: the key's soft
// state is lost when its old entry was owned and its new entry has another
// LGN that did not migrate the old holder's state. A migration names the LGN
// it came from when MigratedFrom is set; otherwise it is taken on trust.
func lostOnChange(oldLGN, newLGN keyspace.LGN, newMigrated bool, newFrom keyspace.LGN) bool {
	if oldLGN == 0 || newLGN == oldLGN {
		return false
	}
	return !newMigrated || (newFrom != 0 && newFrom != oldLGN)
}

// Lost reports whether a key whose entry goes from old to new has lost its
// soft state: the loss rule of doc.go. Both entries must be valid.
func Lost(old, new Entry) bool {
	return lostOnChange(old.LGN, new.LGN, new.Migrated, new.MigratedFrom)
}

// validateChange reports why c cannot be part of a delta.
func validateChange(c Change) error {
	if !c.Range.Valid() {
		return fmt.Errorf("%w: change at LSN %d has empty range %v", ErrMalformed, c.LSN, c.Range)
	}
	if err := c.Entry.Validate(); err != nil {
		return fmt.Errorf("%w: change at LSN %d on %v: %s", ErrMalformed, c.LSN, c.Range, err)
	}
	return nil
}

// validateSegments reports why segs is not a snapshot of a whole table:
// every range valid, sorted, disjoint and contiguous from key 0 to the end of
// the key space, and every entry valid. Adjacent equal entries are allowed;
// the receiver merges them.
func validateSegments(segs []Segment) error {
	if len(segs) == 0 {
		return fmt.Errorf("%w: snapshot has no segments; it must cover the whole key space", ErrMalformed)
	}
	next := keyspace.Key(0) // the Start the next segment must have
	for i, s := range segs {
		if !s.Range.Valid() {
			return fmt.Errorf("%w: snapshot segment %d has empty range %v", ErrMalformed, i, s.Range)
		}
		if s.Range.Start != next {
			kind := "a gap before it"
			if s.Range.Start < next {
				kind = "overlaps the one before it"
			}
			if i == 0 {
				kind = "does not start at key 0"
			}
			return fmt.Errorf("%w: snapshot segment %d %v %s (want Start %016x)",
				ErrMalformed, i, s.Range, kind, uint64(next))
		}
		if err := s.Entry.Validate(); err != nil {
			return fmt.Errorf("%w: snapshot segment %d %v: %s", ErrMalformed, i, s.Range, err)
		}
		if s.Range.End == 0 {
			if i != len(segs)-1 {
				return fmt.Errorf("%w: snapshot segment %d %v reaches the end of the key space but %d more follow",
					ErrMalformed, i, s.Range, len(segs)-1-i)
			}
			return nil
		}
		next = s.Range.End
	}
	return fmt.Errorf("%w: snapshot ends at %016x; it must cover the key space to its end", ErrMalformed, uint64(next))
}

// coalesce sorts rs and merges overlapping and adjacent ranges. It reuses
// rs's storage. All ranges must be valid.
func coalesce(rs []keyspace.Range) []keyspace.Range {
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, keyspace.Compare)
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if last.End == 0 {
			break // last already reaches the end of the key space
		}
		if r.Start <= last.End { // overlapping or adjacent
			if r.End == 0 || r.End > last.End {
				last.End = r.End
			}
			continue
		}
		out = append(out, r)
	}
	return out
}
