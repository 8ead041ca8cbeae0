package leasetable

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/leasehold/leasehold/keyspace"
)

// View is a Lookup's copy of the lease table, built for fast Lookup and for
// finding every loss (C§2.2, P§4.2).
//
// Memory is about 32 bytes per segment, the figure of C§2.2 (100 owners × 64
// ranges × 32 B ≈ 200 KB): a sorted []keyspace.Key of segment starts (8 B)
// and a parallel slice of 24-byte entries (LGN, MigratedFrom, a 4-byte index
// into an interned owner list, the migrated flag). Each owner's ID and
// address are stored once, in that list. A radix index over the top bits of
// the key (one uint32 per 4 to 8 segments, under 1 B per segment) narrows
// Lookup's binary search to a few neighbouring starts; keys are hashes, so
// the buckets are even, and skewed starts only make the search longer, never
// wrong.
//
// Lookup, LSN, Segments, Len and Bytes only read the view, so any number of
// them may run at once; Apply and Reset write it and must not run
// concurrently with anything else. (The Lookup runtime guards a View with a
// sync.RWMutex.)
type View struct {
	lsn  keyspace.LSN
	segs segList[viewEntry]

	// buckets is Lookup's radix index, rebuilt by reindex after every
	// change: bucket b is the keys whose top bits are b (k >> shift == b),
	// buckets[b] is the segment holding the bucket's first key, and
	// buckets[len-1] is the last segment. The segment holding k lies in
	// buckets[b] .. buckets[b+1].
	buckets []uint32
	shift   uint8

	// owners is the interned owner list; owners[0] is the free "owner".
	// ownerIndex maps an owner back to its index. Entries that no segment
	// uses any more are dropped by compactOwners once the list has grown
	// past compactAt.
	owners     []ownerInfo
	ownerIndex map[ownerInfo]uint32
	compactAt  int

	// lostFrom, when set (ApplyByOwner, ResetByOwner), is told of each
	// lost piece with the Owner that held it (view_losses.go).
	lostFrom func(keyspace.Range, ownerInfo)
}

// ownerInfo is one interned (owner ID, address) pair.
type ownerInfo struct{ id, addr string }

// viewEntry is a View's compact Entry: 24 bytes.
type viewEntry struct {
	lgn      keyspace.LGN
	from     keyspace.LGN // Entry.MigratedFrom
	owner    uint32       // index into View.owners; 0 means free
	migrated bool
}

// NewView returns a view of an all-free table at LSN 0.
func NewView() *View {
	v := &View{}
	v.clear()
	return v
}

func (v *View) clear() {
	v.lsn = 0
	v.segs = newSegList(viewEntry{})
	v.owners = []ownerInfo{{}}
	v.ownerIndex = map[ownerInfo]uint32{{}: 0}
	v.compactAt = minCompact
	v.reindex()
}

// reindex rebuilds the radix index over the segment starts: 2^bits buckets
// for n segments, where 2^bits is in (n/8, n/4], at a cost of O(n).
func (v *View) reindex() {
	starts := v.segs.starts
	n := len(starts)
	b := max(bits.Len(uint(n))-3, 0)
	nb := 1 << b
	if cap(v.buckets) >= nb+1 && cap(v.buckets) <= 2*(nb+1) {
		v.buckets = v.buckets[:nb+1]
	} else {
		v.buckets = make([]uint32, nb+1)
	}
	v.shift = uint8(64 - b)
	i := 0
	for bk := range nb {
		first := keyspace.Key(bk) << v.shift // 0 when shift == 64
		for i+1 < n && starts[i+1] <= first {
			i++
		}
		v.buckets[bk] = uint32(i)
	}
	v.buckets[nb] = uint32(n - 1)
}

// minCompact is the smallest owner-list length at which compactOwners runs.
const minCompact = 64

// LSN returns the LSN the view is up to date with.
func (v *View) LSN() keyspace.LSN { return v.lsn }

// Lookup returns the owner of k according to the view: its ID, its address
// and the LGN of its lease. ok is false when k is free. Lookup never
// allocates: it reads the radix bucket of k and binary-searches the few
// segment starts in it.
func (v *View) Lookup(k keyspace.Key) (owner, addr string, lgn keyspace.LGN, ok bool) {
	b := uint64(k) >> v.shift
	// Find the largest i in [lo, hi) with starts[i] <= k; starts[lo] <= k.
	lo, hi := int(v.buckets[b]), int(v.buckets[b+1])+1
	starts := v.segs.starts
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if starts[mid] <= k {
			lo = mid
		} else {
			hi = mid
		}
	}
	e := &v.segs.ents[lo]
	o := &v.owners[e.owner]
	return o.id, o.addr, e.lgn, e.lgn != 0
}

// Segments returns the view's content in canonical form: equal to
// Table.Segments() of a table with the same content.
func (v *View) Segments() []Segment { return v.segs.segments(keyspace.Full, v.entry) }

// Len returns the number of segments.
func (v *View) Len() int { return v.segs.len() }

// Bytes returns the approximate memory the view holds, in bytes: the segment
// slices (by capacity), the owner list with its strings, and the index on
// it.
func (v *View) Bytes() int {
	n := int(unsafe.Sizeof(*v))
	n += cap(v.segs.starts) * int(unsafe.Sizeof(keyspace.Key(0)))
	n += cap(v.segs.ents) * int(unsafe.Sizeof(viewEntry{}))
	n += cap(v.buckets) * int(unsafe.Sizeof(uint32(0)))
	n += cap(v.owners) * int(unsafe.Sizeof(ownerInfo{}))
	for _, o := range v.owners {
		n += len(o.id) + len(o.addr) // shared with the index's keys
	}
	// A map entry holds the key, the value and about one control byte, in
	// tables kept at most 7/8 full.
	n += len(v.ownerIndex) * (int(unsafe.Sizeof(ownerInfo{})) + 4 + 1) * 8 / 7
	return n
}

// Apply brings the view up to date with u and returns the ranges whose soft
// state was lost, sorted and coalesced (adjacent and overlapping ranges
// merged). A key is lost when its old entry was owned and its new entry has
// a different LGN that is not a migration of the old one (Lost; doc.go, "The
// loss rule").
//
// A delta must continue from the view: u.From == LSN() and the changes
// numbered From+1..To in order. Each change is applied in order and judged
// against the entry it replaces, so A/5 → free → B/9 loses the range once,
// at the first change.
//
// A snapshot replaces the content; it is diffed against the old content key
// by key. It must be sorted, disjoint and cover the whole key space (adjacent
// equal entries are merged), and u.To must not be below LSN().
//
// On error the view is unchanged and lost is nil. The error wraps
// ErrLSNMismatch, ErrStaleSnapshot or ErrMalformed and says what was wrong.
// Apply never panics, whatever u holds.
//
// Cost: a delta of m changes costs O(m·(log n + k)) plus a memmove of up to n
// segments per change that adds or removes segments; a snapshot of s
// segments costs O(n + s).
func (v *View) Apply(u Update) (lost []keyspace.Range, err error) {
	if u.Snapshot {
		return v.applySnapshot(u)
	}
	return v.applyDelta(u)
}

func (v *View) applyDelta(u Update) ([]keyspace.Range, error) {
	if len(u.Segments) != 0 {
		return nil, fmt.Errorf("%w: delta %d..%d carries %d snapshot segments", ErrMalformed, u.From, u.To, len(u.Segments))
	}
	if u.From != v.lsn {
		return nil, fmt.Errorf("%w: delta starts after LSN %d but the view is at LSN %d", ErrLSNMismatch, u.From, v.lsn)
	}
	if err := checkLSNs(u); err != nil {
		return nil, err
	}
	// Check everything before changing anything, so a bad update leaves
	// the view as it was.
	u, err := v.fromCopy(u)
	if err != nil {
		return nil, err
	}
	for _, c := range u.Changes {
		if err := validateChange(c); err != nil {
			return nil, err
		}
	}

	var lost []keyspace.Range
	var chunks *chunkList[viewEntry] // a burst of changes is made in chunks (view_burst.go)
	if v.segs.burst(len(u.Changes)) {
		c := v.segs.chunked()
		chunks = &c
	}
	for _, c := range u.Changes {
		ne := v.intern(c.Entry)
		visit := func(piece keyspace.Range, old viewEntry) {
			// A change via free is the change to free (lost if the old
			// entry was owned) and then the change from free (never lost).
			if c.ViaFree && old.lgn != 0 || !c.ViaFree && lostOnChange(old.lgn, ne.lgn, ne.migrated, ne.from) {
				lost = append(lost, piece)
				if v.lostFrom != nil {
					v.lostFrom(piece, v.owners[old.owner])
				}
			}
		}
		if chunks != nil {
			chunks.setVisit(c.Range, ne, visit)
		} else {
			v.segs.set(c.Range, ne, visit)
		}
	}
	if chunks != nil {
		v.segs = flatten(chunks)
	}
	v.lsn = u.To
	if len(v.owners) > v.compactAt {
		v.compactOwners()
	}
	if len(u.Changes) > 0 {
		v.reindex()
	}
	return coalesce(lost), nil
}

// Resolve returns the delta u, which must start at the view's LSN, with
// what a compact delta leaves to the copy filled in from the view: the End
// of each FromCopy change and the Owner and Addr of each OwnerFromCopy one
// (fromCopy). Apply does the same; Resolve gives the changes as applied,
// for a Lookup's OnUpdate. It returns an error wrapping ErrLSNMismatch or
// ErrNoFit when u does not fit the view.
func (v *View) Resolve(u Update) (Update, error) {
	if u.Snapshot {
		return u, nil
	}
	if u.From != v.lsn {
		return u, fmt.Errorf("%w: delta starts after LSN %d but the view is at LSN %d", ErrLSNMismatch, u.From, v.lsn)
	}
	return v.fromCopy(u)
}

// fromCopy returns u with the End of each FromCopy change taken from the
// view, which is at u.From: the end of the segment that starts at the
// change's Range.Start; and the Owner and Addr of each OwnerFromCopy change:
// those of the key before its Range.Start. It refuses, with ErrNoFit, a
// change for which no segment starts there, or whose End is given (not 0)
// and is not that segment's, or whose key before is free or held by
// another Owner than one given. u is not changed.
func (v *View) fromCopy(u Update) (Update, error) {
	copied := false
	for i, c := range u.Changes {
		if c.OwnerFromCopy {
			if c.Range.Start == 0 {
				return u, fmt.Errorf("%w: change at LSN %d takes its owner from the key before key 0", ErrNoFit, c.LSN)
			}
			prev := v.segs.ents[v.segs.find(c.Range.Start-1)]
			o := v.owners[prev.owner]
			if prev.owner == 0 || c.Entry.Owner != "" && (c.Entry.Owner != o.id || c.Entry.Addr != o.addr) {
				return u, fmt.Errorf("%w: change at LSN %d on %v takes the owner of the key before it, which the copy at LSN %d has %s",
					ErrNoFit, c.LSN, c.Range, v.lsn, v.entry(prev))
			}
			if !copied {
				u.Changes, copied = slices.Clone(u.Changes), true
			}
			u.Changes[i].Entry.Owner, u.Changes[i].Entry.Addr = o.id, o.addr
		}
		if !c.FromCopy {
			continue
		}
		j := v.segs.find(c.Range.Start)
		if v.segs.starts[j] != c.Range.Start {
			return u, fmt.Errorf("%w: change at LSN %d names the segment starting at %016x; the copy at LSN %d has none",
				ErrNoFit, c.LSN, uint64(c.Range.Start), v.lsn)
		}
		end := v.segs.end(j)
		if c.Range.End != 0 && c.Range.End != end {
			return u, fmt.Errorf("%w: change at LSN %d on %v; the copy's segment at LSN %d is %v",
				ErrNoFit, c.LSN, c.Range, v.lsn, v.segs.rangeOf(j))
		}
		if !copied {
			u.Changes, copied = slices.Clone(u.Changes), true
		}
		u.Changes[i].Range.End = end
	}
	return u, nil
}

func (v *View) applySnapshot(u Update) ([]keyspace.Range, error) {
	if len(u.Changes) != 0 {
		return nil, fmt.Errorf("%w: snapshot at LSN %d carries %d delta changes", ErrMalformed, u.To, len(u.Changes))
	}
	if u.To < v.lsn {
		return nil, fmt.Errorf("%w: snapshot at LSN %d, view at LSN %d", ErrStaleSnapshot, u.To, v.lsn)
	}
	if err := validateSegments(u.Segments); err != nil {
		return nil, err
	}
	if uint64(len(u.Segments)) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: snapshot has %d segments; a view holds at most 2^32", ErrMalformed, len(u.Segments))
	}

	// Build the new content beside the old, interning owners afresh (which
	// also forgets owners no longer in the table).
	nv := View{
		lsn: u.To,
		segs: segList[viewEntry]{
			starts: make([]keyspace.Key, 0, len(u.Segments)),
			ents:   make([]viewEntry, 0, len(u.Segments)),
		},
		owners:     []ownerInfo{{}},
		ownerIndex: map[ownerInfo]uint32{{}: 0},
	}
	for _, s := range u.Segments {
		e := nv.intern(s.Entry)
		if n := len(nv.segs.ents); n > 0 && nv.segs.ents[n-1] == e {
			continue
		}
		nv.segs.starts = append(nv.segs.starts, s.Range.Start)
		nv.segs.ents = append(nv.segs.ents, e)
	}
	nv.compactAt = max(minCompact, 2*len(nv.owners))

	var from func(keyspace.Range, viewEntry)
	if v.lostFrom != nil {
		from = func(r keyspace.Range, e viewEntry) { v.lostFrom(r, v.owners[e.owner]) }
	}
	lost := diffLost(&v.segs, &nv.segs, from)
	nv.lostFrom = v.lostFrom
	nv.buckets = v.buckets // reused if the size suits
	*v = nv
	v.reindex()
	return lost, nil
}

// diffLost walks two partitions of the key space together and returns,
// coalesced, the keys whose change from old to new is a loss; from, if
// set, is told of each lost piece with its old entry.
func diffLost(old, new *segList[viewEntry], from func(keyspace.Range, viewEntry)) []keyspace.Range {
	var lost []keyspace.Range
	i, j := 0, 0
	for {
		// The piece where old segment i and new segment j overlap.
		start := max(old.starts[i], new.starts[j])
		oe, ne := old.end(i), new.end(j)
		end := oe // the smaller end, where 0 is 2^64
		if oe == 0 || (ne != 0 && ne < oe) {
			end = ne
		}
		o, n := old.ents[i], new.ents[j]
		if lostOnChange(o.lgn, n.lgn, n.migrated, n.from) {
			r := keyspace.Range{Start: start, End: end}
			if from != nil {
				from(r, o)
			}
			if k := len(lost) - 1; k >= 0 && lost[k].End == start {
				lost[k].End = end // adjacent to the last lost piece
			} else {
				lost = append(lost, r)
			}
		}
		if end == 0 {
			return lost
		}
		if oe == end {
			i++
		}
		if ne == end {
			j++
		}
	}
}

// Reset forgets everything, as when the manager restarted or has been
// unreachable for longer than the notification bound (P§2.1): every owned
// range is reported lost, coalesced, and the view becomes all free at LSN 0.
func (v *View) Reset() (lost []keyspace.Range) {
	for i, e := range v.segs.ents {
		if e.lgn == 0 {
			continue
		}
		r := v.segs.rangeOf(i)
		if v.lostFrom != nil {
			v.lostFrom(r, v.owners[e.owner])
		}
		if k := len(lost) - 1; k >= 0 && lost[k].End == r.Start {
			lost[k].End = r.End
		} else {
			lost = append(lost, r)
		}
	}
	v.clear()
	return lost
}

// intern returns the compact form of a valid entry, adding its owner to the
// owner list if new.
func (v *View) intern(e Entry) viewEntry {
	o := ownerInfo{e.Owner, e.Addr}
	idx, ok := v.ownerIndex[o]
	if !ok {
		idx = uint32(len(v.owners))
		v.owners = append(v.owners, o)
		v.ownerIndex[o] = idx
	}
	return viewEntry{lgn: e.LGN, from: e.MigratedFrom, owner: idx, migrated: e.Migrated}
}

// entry expands a compact entry.
func (v *View) entry(e viewEntry) Entry {
	o := v.owners[e.owner]
	return Entry{Owner: o.id, Addr: o.addr, LGN: e.lgn, Migrated: e.migrated, MigratedFrom: e.from}
}

// compactOwners drops owners that no segment uses and renumbers the rest.
// It runs when the list has doubled since the last compaction, so its O(n)
// cost is spread over the changes that grew the list.
func (v *View) compactOwners() {
	remap := make([]uint32, len(v.owners))
	owners := []ownerInfo{{}}
	index := map[ownerInfo]uint32{{}: 0}
	for i := range v.segs.ents {
		e := &v.segs.ents[i]
		if e.owner == 0 {
			continue
		}
		if remap[e.owner] == 0 {
			o := v.owners[e.owner]
			remap[e.owner] = uint32(len(owners))
			index[o] = uint32(len(owners))
			owners = append(owners, o)
		}
		e.owner = remap[e.owner]
	}
	v.owners, v.ownerIndex = owners, index
	v.compactAt = max(minCompact, 2*len(owners))
}

// check reports a broken invariant of the view (an assertion error), or nil.
func (v *View) check() error {
	if err := v.segs.check(); err != nil {
		return err
	}
	if len(v.owners) == 0 || v.owners[0] != (ownerInfo{}) {
		return fmt.Errorf("leasetable: internal error: owner list does not start with the free owner")
	}
	if len(v.ownerIndex) != len(v.owners) {
		return fmt.Errorf("leasetable: internal error: %d owners but %d in the index", len(v.owners), len(v.ownerIndex))
	}
	for i, o := range v.owners {
		if idx, ok := v.ownerIndex[o]; !ok || int(idx) != i {
			return fmt.Errorf("leasetable: internal error: owner %d %q indexed as %d (%v)", i, o.id, idx, ok)
		}
	}
	if len(v.buckets) != 1<<(64-int(v.shift))+1 {
		return fmt.Errorf("leasetable: internal error: %d buckets for shift %d", len(v.buckets), v.shift)
	}
	for b, i := range v.buckets {
		want := v.segs.len() - 1
		if b+1 < len(v.buckets) {
			want = v.segs.find(keyspace.Key(b) << v.shift)
		}
		if int(i) != want {
			return fmt.Errorf("leasetable: internal error: bucket %d says segment %d, want %d", b, i, want)
		}
	}
	for i, e := range v.segs.ents {
		if int(e.owner) >= len(v.owners) {
			return fmt.Errorf("leasetable: internal error: segment %d refers to owner %d of %d", i, e.owner, len(v.owners))
		}
		if err := v.entry(e).Validate(); err != nil {
			return fmt.Errorf("leasetable: internal error: segment %d: %v", i, err)
		}
	}
	return nil
}

// checkLSNs checks that a delta's changes are those of LSNs From+1..To:
// each of them, in order, or, in a merged delta, some of them in order,
// ending with To.
func checkLSNs(u Update) error {
	if !u.Merged {
		if u.To < u.From || uint64(u.To-u.From) != uint64(len(u.Changes)) {
			return fmt.Errorf("%w: delta %d..%d carries %d changes; want LSNs %d..%d",
				ErrLSNMismatch, u.From, u.To, len(u.Changes), u.From+1, u.To)
		}
		for i, c := range u.Changes {
			if want := u.From + keyspace.LSN(i) + 1; c.LSN != want {
				return fmt.Errorf("%w: change %d of delta %d..%d has LSN %d; want %d",
					ErrLSNMismatch, i, u.From, u.To, c.LSN, want)
			}
		}
		return nil
	}
	if u.To < u.From {
		return fmt.Errorf("%w: merged delta %d..%d ends before it starts", ErrLSNMismatch, u.From, u.To)
	}
	prev := u.From
	for i, c := range u.Changes {
		if c.LSN <= prev || c.LSN > u.To {
			return fmt.Errorf("%w: change %d of merged delta %d..%d has LSN %d after %d",
				ErrLSNMismatch, i, u.From, u.To, c.LSN, prev)
		}
		prev = c.LSN
	}
	if prev != u.To {
		return fmt.Errorf("%w: merged delta %d..%d ends with LSN %d", ErrLSNMismatch, u.From, u.To, prev)
	}
	return nil
}
