package leasetable

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// DefaultRetention is how long the change log keeps a change: C§2.1.2
// truncates entries older than 5 minutes.
const DefaultRetention = 5 * time.Minute

// Table is the manager's lease table. It always covers the whole key space
// with segments in canonical form: sorted, disjoint, contiguous, and adjacent
// segments with identical Entry merged (so two tables with the same content
// have identical Segments()). Starts as one free segment {Full, Entry{}} at
// LSN 0.
//
// Every change is appended to a change log under the next LSN, stamped with
// the caller's clock; Since answers a Lookup's sync from it (C§2.2.1, P§4.2).
//
// A Table is not safe for concurrent use: the manager's core owns it and
// calls it from one goroutine. The Updates it returns are immutable and may
// be read from any goroutine while the table goes on changing.
type Table struct {
	segs      chunkList[Entry]
	lsn       keyspace.LSN // LSN of the latest change; 0 for none
	retention time.Duration
	// log holds the retained changes, LSNs lsn-len(log)+1 .. lsn in order,
	// and stamps[i] the manager's clock when log[i] was made. (Parallel
	// slices, so that the changes of a delta are one block of log.)
	//
	// Since hands out subslices of log without copying, so an element of
	// log's backing array is written once, by append, and never again:
	// Truncate reslices rather than shifting, and Restore drops the array.
	log    []Change
	stamps []time.Time
	// snap is the snapshot of the table at LSN lsn, made by the first
	// Snapshot since the last change and shared by every Update that
	// carries it; nil when not made yet.
	snap []Segment
	// owned indexes the owned segments by owner: the start keys of the
	// segments whose Entry.Owner is the map's key (Owned). Owners with no
	// segment have no entry.
	owned map[string]map[keyspace.Key]struct{}
	// ownedMemo keeps Owned's answers until the next change (nil after
	// one): a Manager asks for an Owner's segments twice per lease request,
	// and between changes — renewals change nothing — the answer is the
	// same.
	ownedMemo map[string][]Segment
	// free counts the free segments (HasFree), kept with the owner index.
	free int
}

// New returns an empty table (all free, LSN 0) whose change log keeps
// changes for retention (0 means DefaultRetention). It panics if retention
// is negative.
func New(retention time.Duration) *Table {
	if retention < 0 {
		panic(fmt.Sprintf("leasetable: negative retention %v", retention))
	}
	if retention == 0 {
		retention = DefaultRetention
	}
	return newTable(retention, defaultChunk)
}

// newTable is New with chunks of at most chunk segments; tests use small
// chunks to split and merge them often.
func newTable(retention time.Duration, chunk int) *Table {
	return &Table{segs: newChunkList(Entry{}, chunk), retention: retention, owned: map[string]map[keyspace.Key]struct{}{}, free: 1}
}

// Set overwrites r with e. If r already has e throughout, Set is a no-op and
// returns the current LSN without logging anything. Otherwise it appends
// Change{LSN: t.LSN()+1, Range: r, Entry: e} to the log, stamped with now (the
// manager's local clock), and returns the new LSN. The change is marked
// Whole when r was exactly one segment before it, and LeftOwner when the
// key before r was held by e's Owner at e's Addr.
//
// Set panics if r is not a valid range or e is not a valid entry
// (Entry.Validate): both are programmer errors in the manager, and a bad
// entry logged here would be refused by every Lookup.
//
// Cost: O(log n + B + k), n = Len(): binary searches for the ends of r,
// moving up to B = 128 segments within a chunk, and O(1) for each of the k
// segments r overwrites (and for its entry in the owner index). When a
// chunk splits or merges (amortised, at most about once per B/4 changes),
// the n/B chunk pointers after it move too. See doc.go, "Representation and
// cost".
func (t *Table) Set(now time.Time, r keyspace.Range, e Entry) keyspace.LSN {
	if !r.Valid() {
		panic(fmt.Sprintf("leasetable: Set on invalid range %v", r))
	}
	if err := e.Validate(); err != nil {
		panic(fmt.Sprintf("leasetable: Set %v on %v: %v", e, r, err))
	}
	if t.segs.covered(r, e) {
		return t.lsn
	}
	// set replaces the segments that start in [r.Start, r.End], so those
	// are the ones to take out of the owner index and to put back.
	was, _ := t.segs.at(r.Start)
	left := false
	if r.Start > 0 && e.Owner != "" {
		_, prev := t.segs.at(r.Start - 1)
		left = prev.Owner == e.Owner && prev.Addr == e.Addr
	}
	t.indexBounds(r, false)
	t.segs.set(r, e)
	t.indexBounds(r, true)
	t.snap, t.ownedMemo = nil, nil
	t.lsn++
	t.log = append(t.log, Change{LSN: t.lsn, Range: r, Entry: e, Whole: was == r, LeftOwner: left})
	t.stamps = append(t.stamps, now)
	return t.lsn
}

// At returns the segment containing k.
func (t *Table) At(k keyspace.Key) Segment {
	r, e := t.segs.at(k)
	return Segment{Range: r, Entry: e}
}

// Overlapping returns the segments intersecting r, clipped to r, in key
// order. It returns nil if r is not a valid range.
func (t *Table) Overlapping(r keyspace.Range) []Segment {
	return t.segs.segments(r, identity)
}

// Segments returns a copy of all segments, in key order.
func (t *Table) Segments() []Segment { return t.segs.segments(keyspace.Full, identity) }

// Len returns the number of segments.
func (t *Table) Len() int { return t.segs.len() }

// LSN returns the LSN of the latest change (0 for none).
func (t *Table) LSN() keyspace.LSN { return t.lsn }

// FirstLSN returns the LSN of the oldest retained change, or LSN()+1 when the
// log is empty. Since can send a delta to a Lookup at any LSN from
// FirstLSN()-1 to LSN().
func (t *Table) FirstLSN() keyspace.LSN { return t.lsn - keyspace.LSN(len(t.log)) + 1 }

// Truncate drops the changes stamped before now minus the retention (C§2.1.2:
// 5 minutes). It drops only a prefix of the log, so if the clock stepped back
// a newer change stamped earlier than an older one stays until the older one
// goes.
//
// Truncate never moves or overwrites a change it keeps, since Updates
// returned by Since may share them: it reslices the log, and moves what is
// left to a new, smaller array once that is under a quarter of the old
// one's capacity. The old array is freed when no Update holds it.
func (t *Table) Truncate(now time.Time) {
	cutoff := now.Add(-t.retention)
	n := 0
	for n < len(t.stamps) && t.stamps[n].Before(cutoff) {
		n++
	}
	if n == 0 {
		return
	}
	t.log, t.stamps = t.log[n:], t.stamps[n:]
	if len(t.log) < cap(t.log)/4 {
		t.log, t.stamps = slices.Clone(t.log), slices.Clone(t.stamps)
	}
}

// Since answers a Lookup that has the table up to lsn (C§2.2.1, P§4.2):
//   - lsn == LSN(): an empty delta {From: lsn, To: lsn};
//   - the retained changes after lsn as a delta, when none is missing and
//     there are no more of them than segments;
//   - otherwise (log truncated past lsn, lsn > LSN(), or the snapshot is
//     smaller) a Snapshot of the whole table with From: lsn, To: LSN().
//
// The result is read-only: its Changes or Segments are shared with the
// table and with every other result that carries them, so a Manager that
// answers thousands of Lookups at one LSN holds one copy of a delta or a
// snapshot, not one per Lookup. Nothing the table does later changes a
// result already returned, so it may be read (sent, encoded, applied) while
// the table goes on changing. A caller must not modify it; appending to its
// Changes or Segments makes a copy.
//
// Cost: O(1) for a delta; a snapshot copies the table's n segments (O(n))
// the first time it is asked for at an LSN, and costs O(1) after that.
func (t *Table) Since(lsn keyspace.LSN) Update {
	if lsn == t.lsn {
		return Update{From: lsn, To: lsn}
	}
	if t.HasDelta(lsn) {
		n := len(t.log)
		return Update{From: lsn, To: t.lsn, Changes: t.log[n-int(t.lsn-lsn) : n : n]}
	}
	u := t.Snapshot()
	u.From = lsn
	return u
}

// HasDelta reports whether Since(lsn) answers with changes rather than a
// snapshot for lsn < LSN(): the log reaches back to lsn, and there are no
// more changes after it than the table has segments.
func (t *Table) HasDelta(lsn keyspace.LSN) bool {
	return lsn < t.lsn && lsn >= t.FirstLSN()-1 && uint64(t.lsn-lsn) <= uint64(t.Len())
}

// Snapshot returns the whole table as a snapshot Update at LSN() (From 0).
// Like Since's, the result is read-only and shared: every Snapshot between
// two changes returns the same segments.
func (t *Table) Snapshot() Update {
	if t.snap == nil {
		t.snap = t.Segments()
	}
	n := len(t.snap)
	return Update{To: t.lsn, Snapshot: true, Segments: t.snap[:n:n]}
}

// Restore replaces the table's content with a snapshot taken at lsn, and
// empties the log (FirstLSN() becomes lsn+1). segs must be sorted, disjoint,
// cover the whole key space and hold valid entries; adjacent equal entries
// are merged. On error the table is unchanged.
func (t *Table) Restore(lsn keyspace.LSN, segs []Segment) error {
	if err := validateSegments(segs); err != nil {
		return err
	}
	t.load(segs)
	t.lsn, t.log, t.stamps, t.snap = lsn, nil, nil, nil
	return nil
}

// load replaces the segments with segs, which must be valid, merging
// adjacent equal entries, and rebuilds the owner index.
func (t *Table) load(segs []Segment) {
	s := emptyChunkList[Entry](t.segs.max)
	for _, sg := range segs {
		s.push(sg.Range.Start, sg.Entry)
	}
	s.finish()
	t.segs = s
	t.owned = map[string]map[keyspace.Key]struct{}{}
	t.ownedMemo, t.free = nil, 0
	t.indexBounds(keyspace.Full, true)
}

// indexBounds adds to the owner index (add) or removes from it the
// segments that start in [r.Start, r.End] (to the end of the key space when
// r.End == 0). r must be valid.
func (t *Table) indexBounds(r keyspace.Range, add bool) {
	w := keyspace.Range{Start: r.Start} // the keys up to and including r.End
	if r.End != 0 {
		w.End = r.End + 1 // 0, the end of the key space, for MaxKey
	}
	t.segs.each(w, func(seg keyspace.Range, e Entry) bool {
		switch {
		case seg.Start < r.Start:
			return true
		case e.Owner == "" && add:
			t.free++
			return true
		case e.Owner == "":
			t.free--
			return true
		}
		m := t.owned[e.Owner]
		if add {
			if m == nil {
				m = map[keyspace.Key]struct{}{}
				t.owned[e.Owner] = m
			}
			m[seg.Start] = struct{}{}
		} else {
			delete(m, seg.Start)
			if len(m) == 0 {
				delete(t.owned, e.Owner)
			}
		}
		return true
	})
}

func identity(e Entry) Entry { return e }
