// Package leasetable holds the lease table, its change log, and the deltas
// and snapshots that carry it from the Manager to every Lookup. The Manager
// keeps a Table; each Lookup keeps a View. Citations are to
// papers/centrifuge-nsdi2010.txt (C§) and
// papers/prs-partitioning-and-recovery-service.txt (P§).
//
// # The table
//
// The lease table says, for every key of the flat 64-bit key space, which
// Owner holds the lease, at which address, under which lease generation
// number (LGN), and whether that grant carried the previous holder's state
// (Migrated) (C§2.1.2, P§4.1). It is kept as segments in canonical form:
// sorted, disjoint, together covering the key space, with adjacent segments
// of equal Entry merged. Canonical form makes equal content compare equal,
// which is how tests check that a Lookup has converged on the Manager.
//
// # The change log
//
// Every Table.Set that changes something is a Change with the next log
// sequence number (LSN), stamped with the Manager's clock. Table.Truncate
// drops changes older than the retention (C§2.1.2: 5 minutes). A Lookup
// syncs by sending the LSN it has; Table.Since answers with the changes
// after it (a delta) or, when the log no longer reaches back that far or the
// table is smaller than the change list, with a snapshot of the whole table
// (C§2.2.1, P§4.2). View.Apply takes either.
//
// # The loss rule
//
// The recovery-notification guarantee (P§2, P§4.2) rests on one rule: the
// Manager gives every grant a fresh LGN, so a key has lost its soft state
// exactly when its LGN changes, unless the new grant carried the old state
// along (a migration, C§2.1.2). In code (Lost):
//
//	lost(old, new) = old.LGN != 0 && new.LGN != old.LGN && !excused(new)
//	excused(new)   = new.Migrated && (new.MigratedFrom == 0 || new.MigratedFrom == old.LGN)
//
// A delta is judged change by change, each against the entry it replaces, so
// a key that goes A/5 → free → B/9 is lost once, at the first change, and a
// key that goes free → B/9 is not lost. A snapshot is judged by diffing it
// against the view key by key (P§4.2): a history A/5 → B/9 → A/12 compacted
// into a snapshot still shows A/5 against A/12, and is lost.
//
// What a snapshot cannot show is a loss hidden before a migration:
// A/5 → B/9 (A crashed) → C/12 (migrated from B) diffs as A/5 against a
// migrated C/12. With the papers' bare Migrated flag the Lookup would excuse
// it and miss A's loss. Entry.MigratedFrom closes the gap: C/12 names 9, not
// 5, so the Lookup reports the loss. The cost is a spurious notification for
// a chain of two clean migrations hidden in one snapshot, which the
// guarantee allows (notification is conservative, P§2.1). MigratedFrom == 0
// keeps the papers' behaviour for managers that do not set it.
//
// The rule asks three things of the Manager:
//   - a new grant always gets an LGN the key has never had (P§4.1: a
//     restarted owner is granted anew, never extended);
//   - a migration is one Set from the old entry straight to the new one,
//     with Migrated and MigratedFrom = the old LGN; a range that passes
//     through free on the way is reported lost by every Lookup that sees the
//     delta;
//   - an entry is valid (Entry.Validate): free is exactly Entry{}.
//
// # Representation and cost
//
// Both keep the segments as sorted start keys with a parallel list of
// entries (n = number of segments), and make a change the same way
// (setBounds): find the segments around its range by binary search, drop
// the boundaries inside it and put back at most two, which keeps canonical
// form.
//
// A Table cuts the list into chunks of at most 128 segments, with the
// first key of every chunk in a sorted slice of its own. A change searches
// that slice and then one chunk, and moves the segments of that chunk after
// the change; a chunk that grows past 128 is split in two, and one that
// shrinks below 32 is merged with a neighbour (or takes segments from it).
// Only a split or a merge moves the chunk list itself (n/128 pointers), and
// it takes 32 or more changes to bring one about, amortised. So Set costs
// O(log n + B + k), B = 128, for the k segments it overwrites: in practice
// independent of the table's size, a few µs at 640,000 segments (10,000
// Owners × 64 virtual nodes), and building such a table one grant at a time
// is O(n log n) rather than O(n²).
// Table.Each and Table.EachOverlapping walk the chunks in key order without
// copying them.
//
// A View keeps one flat slice of start keys and one of entries, which its
// Lookup needs: a change there memmoves the segments after it when their
// number changes, O(log n + k) work and an O(n) copy at worst. A View
// stores an entry in 24 bytes with the owner's ID and address interned,
// about 34 bytes per segment in all (C§2.2 estimates 32 B), and keeps a
// small radix index on the top bits of the key so that Lookup touches a
// couple of cache lines instead of log2(n) of them. A snapshot is applied
// and diffed in O(n + s).
//
// # Usage
//
// The Manager's core changes the table and answers syncs:
//
//	t := leasetable.New(0) // 5-minute log
//	t.Set(now, r, leasetable.Entry{Owner: "a", Addr: "10.0.0.1:7000", LGN: 5})
//	t.Truncate(now)        // periodically
//	u := t.Since(lookupLSN) // send u to the Lookup
//
// The Lookup's core applies what it receives and raises loss notifications:
//
//	v := leasetable.NewView()
//	lost, err := v.Apply(u) // on error the view is unchanged: sync again
//	notify(lost)
//	owner, addr, lgn, ok := v.Lookup(key)
//	// when the Manager has been unreachable too long (P§2.1):
//	notify(v.Reset())
//
// Neither Table nor View locks: each is owned by one core. View's read
// methods may run concurrently with each other but not with Apply or Reset.
package leasetable
