package leasetable

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
)

// defaultChunk is the most segments a Table keeps in one chunk. A change
// moves up to about this many segments within their chunk (a few KB of
// Entry), and a chunk split or merge moves a pointer and a key for each of
// the n/defaultChunk or so chunks: at 640,000 segments both are a couple of
// µs or less.
const defaultChunk = 128

// chunkList is a partition of the whole key space into segments in canonical
// form, like segList, cut into chunks so that a change that adds or removes
// segments moves O(max) of them instead of every segment after it. Chunk c
// holds a run of consecutive segments, as parallel slices of starts and
// entries; the segment after a chunk's last is the next chunk's first, and
// firsts[c] is chunk c's first start, so that finding a key is a binary
// search of firsts and then of one chunk.
//
// Invariants (checked by check): at least one chunk; len(firsts) ==
// len(chunks); every chunk holds between 1 and max segments, and at least
// minLen() when there is more than one chunk; firsts[c] is chunk c's first
// start; taken in order, the chunks' starts begin at 0 and strictly
// increase, and adjacent entries differ, across chunk edges too; n is the
// number of segments; a chunk's entries past its length are zero, holding
// no owner's strings.
//
// Cost of set: O(log n) to find r, O(max) to rewrite the chunks holding its
// ends, O(k) to drop the k segments it covers, and, when a chunk splits,
// merges or empties, O(n/max) to move the chunk pointers after it. A chunk
// splits only after about max/2 segments were added to it, and merges only
// after about max/4 were removed, so that last term is amortised O(n/max²)
// per change.
type chunkList[E comparable] struct {
	firsts []keyspace.Key
	chunks []*chunk[E]
	n      int // number of segments
	max    int // most segments in a chunk; at least 4
}

// chunk is a run of consecutive segments. Its slices have capacity max+2,
// the most a chunk holds for a moment before a split, so that set never
// reallocates them.
type chunk[E comparable] struct {
	starts []keyspace.Key
	ents   []E
}

// newChunkList returns a partition of one segment, the whole key space with
// entry free, in chunks of at most size segments. It panics if size < 4.
func newChunkList[E comparable](free E, size int) chunkList[E] {
	s := emptyChunkList[E](size)
	s.push(0, free)
	return s
}

// emptyChunkList returns a chunkList with no segments, to fill with push
// and finish.
func emptyChunkList[E comparable](size int) chunkList[E] {
	if size < 4 {
		panic(fmt.Sprintf("leasetable: chunk size %d; want at least 4", size))
	}
	return chunkList[E]{max: size}
}

func (s *chunkList[E]) newChunk() *chunk[E] {
	return &chunk[E]{
		starts: make([]keyspace.Key, 0, s.max+2),
		ents:   make([]E, 0, s.max+2),
	}
}

// minLen is the fewest segments a chunk holds when there are several.
func (s *chunkList[E]) minLen() int { return max(s.max/4, 1) }

// push appends the segment (start, e) after the last one, merging it into
// the last one if e is its entry. Chunks are filled to 3/4 of max, leaving
// room for changes before they split. Call finish when done.
func (s *chunkList[E]) push(start keyspace.Key, e E) {
	if k := len(s.chunks) - 1; k >= 0 {
		last := s.chunks[k]
		if last.ents[len(last.ents)-1] == e {
			return
		}
		if len(last.starts) < max(s.max*3/4, 1) {
			last.starts = append(last.starts, start)
			last.ents = append(last.ents, e)
			s.n++
			return
		}
	}
	c := s.newChunk()
	c.starts = append(c.starts, start)
	c.ents = append(c.ents, e)
	s.chunks = append(s.chunks, c)
	s.firsts = append(s.firsts, start)
	s.n++
}

// finish restores the invariants after a series of push: the last chunk may
// be short.
func (s *chunkList[E]) finish() { s.fix(len(s.chunks) - 1) }

func (s *chunkList[E]) len() int { return s.n }

// find returns the chunk c and the index i in it of the segment containing
// k. It never allocates.
func (s *chunkList[E]) find(k keyspace.Key) (c, i int) {
	c = search(s.firsts, k)
	return c, search(s.chunks[c].starts, k)
}

// end returns the exclusive end of segment i of chunk c (0 for the end of
// the key space).
func (s *chunkList[E]) end(c, i int) keyspace.Key {
	if ch := s.chunks[c]; i+1 < len(ch.starts) {
		return ch.starts[i+1]
	}
	if c+1 < len(s.chunks) {
		return s.firsts[c+1]
	}
	return 0
}

// at returns the segment containing k and its entry.
func (s *chunkList[E]) at(k keyspace.Key) (keyspace.Range, E) {
	c, i := s.find(k)
	ch := s.chunks[c]
	return keyspace.Range{Start: ch.starts[i], End: s.end(c, i)}, ch.ents[i]
}

// each calls fn with every segment that intersects r, whole (not clipped to
// r), in key order, until fn returns false. r must be valid. It does not
// allocate; fn must not change s.
func (s *chunkList[E]) each(r keyspace.Range, fn func(seg keyspace.Range, e E) bool) {
	c, i := s.find(r.Start)
	for ; c < len(s.chunks); c, i = c+1, 0 {
		ch := s.chunks[c]
		for ; i < len(ch.starts); i++ {
			start := ch.starts[i]
			if r.End != 0 && start >= r.End {
				return
			}
			if !fn(keyspace.Range{Start: start, End: s.end(c, i)}, ch.ents[i]) {
				return
			}
		}
	}
}

// covered reports whether every key of r already carries e. r must be valid.
func (s *chunkList[E]) covered(r keyspace.Range, e E) bool {
	c, i := s.find(r.Start)
	if s.chunks[c].ents[i] != e {
		return false
	}
	end := s.end(c, i)
	return end == 0 || (r.End != 0 && r.End <= end)
}

// set overwrites r with e, keeping canonical form. Like segList.set it
// replaces exactly the segments that start in [r.Start, r.End] (to the end
// of the key space when r.End == 0) by those setBounds returns; every other
// segment keeps its start and entry. (If r carries e throughout already,
// those are the segments it had: nothing changes.) r must be valid.
func (s *chunkList[E]) set(r keyspace.Range, e E) {
	// Replace the segments from position (ac, ai), the first that starts at
	// or after r.Start, up to (bc, bi), the first that starts after r.End.
	// A position may be one past the end of its chunk.
	var prev, next E
	ac, ai := 0, 0
	if r.Start > 0 {
		pc, pi := s.find(r.Start - 1)
		prev, ac, ai = s.chunks[pc].ents[pi], pc, pi+1
	}
	bc := len(s.chunks) - 1
	bi := len(s.chunks[bc].starts)
	if r.End != 0 {
		qc, qi := s.find(r.End)
		next, bc, bi = s.chunks[qc].ents[qi], qc, qi+1
	}
	starts, ents, n := setBounds(r, e, prev, next)
	s.splice(ac, ai, bc, bi, starts[:n], ents[:n])
}

// splice replaces the segments from position (ac, ai) up to, not including,
// (bc, bi) with the segments starts/ents (at most two), and restores the
// chunk invariants. The result must be a partition in canonical form.
func (s *chunkList[E]) splice(ac, ai, bc, bi int, starts []keyspace.Key, ents []E) {
	if ac == bc {
		ch := s.chunks[ac]
		s.n += len(starts) - (bi - ai)
		ch.starts = slices.Replace(ch.starts, ai, bi, starts...)
		ch.ents = slices.Replace(ch.ents, ai, bi, ents...)
		s.fix(ac)
		return
	}
	// The change spans chunks: keep the head of chunk ac and the tail of
	// chunk bc, drop the chunks between, and put the new segments at the
	// end of the head.
	ca, cb := s.chunks[ac], s.chunks[bc]
	s.n -= len(ca.starts) - ai + bi
	for _, c := range s.chunks[ac+1 : bc] {
		s.n -= len(c.starts)
	}
	s.n += len(starts)
	clear(ca.ents[ai:]) // no stale references to owners' strings
	ca.starts = append(ca.starts[:ai], starts...)
	ca.ents = append(ca.ents[:ai], ents...)
	cb.starts = slices.Delete(cb.starts, 0, bi)
	cb.ents = slices.Delete(cb.ents, 0, bi)
	s.chunks = slices.Delete(s.chunks, ac+1, bc)
	s.firsts = slices.Delete(s.firsts, ac+1, bc)
	// Chunk bc is now ac+1. Fix it first: that never moves chunk ac.
	s.fix(ac + 1)
	s.fix(ac)
}

// fix restores the invariants for chunk c after a change to it, given that
// they hold for every other chunk: it drops c if empty, splits it if over
// max, joins it with a neighbour if short, and updates firsts. It is also
// right when the chunk before c holds anything from 1 to max+2 segments, as
// splice leaves it: join then merges the two or leaves both at half their
// total, at most max.
func (s *chunkList[E]) fix(c int) {
	ch := s.chunks[c]
	n := len(ch.starts)
	switch {
	case n == 0:
		s.chunks = slices.Delete(s.chunks, c, c+1)
		s.firsts = slices.Delete(s.firsts, c, c+1)
	case n > s.max:
		h := n / 2
		nc := s.newChunk()
		nc.starts = append(nc.starts, ch.starts[h:]...)
		nc.ents = append(nc.ents, ch.ents[h:]...)
		clear(ch.ents[h:])
		ch.starts, ch.ents = ch.starts[:h], ch.ents[:h]
		s.firsts[c] = ch.starts[0]
		s.chunks = slices.Insert(s.chunks, c+1, nc)
		s.firsts = slices.Insert(s.firsts, c+1, nc.starts[0])
	case n < s.minLen() && len(s.chunks) > 1:
		s.firsts[c] = ch.starts[0]
		if c+1 < len(s.chunks) {
			s.join(c)
		} else {
			s.join(c - 1)
		}
	default:
		s.firsts[c] = ch.starts[0]
	}
}

// join rebalances chunks l and l+1, one of them short: it merges them into
// chunk l if they fit in one, and otherwise moves segments from the longer
// to the shorter until they hold half each.
func (s *chunkList[E]) join(l int) {
	a, b := s.chunks[l], s.chunks[l+1]
	total := len(a.starts) + len(b.starts)
	if total <= s.max {
		a.starts = append(a.starts, b.starts...)
		a.ents = append(a.ents, b.ents...)
		s.chunks = slices.Delete(s.chunks, l+1, l+2)
		s.firsts = slices.Delete(s.firsts, l+1, l+2)
		return
	}
	h := total / 2
	if k := h - len(a.starts); k > 0 { // move b's first k segments to a
		a.starts = append(a.starts, b.starts[:k]...)
		a.ents = append(a.ents, b.ents[:k]...)
		b.starts = slices.Delete(b.starts, 0, k)
		b.ents = slices.Delete(b.ents, 0, k)
	} else { // move a's segments from h on to the front of b
		b.starts = slices.Insert(b.starts, 0, a.starts[h:]...)
		b.ents = slices.Insert(b.ents, 0, a.ents[h:]...)
		clear(a.ents[h:])
		a.starts, a.ents = a.starts[:h], a.ents[:h]
	}
	s.firsts[l+1] = b.starts[0]
}

// segments returns the segments clipped to r, converting entries with conv.
func (s *chunkList[E]) segments(r keyspace.Range, conv func(E) Entry) []Segment {
	if !r.Valid() {
		return nil
	}
	var out []Segment
	if r == keyspace.Full {
		out = make([]Segment, 0, s.n)
	}
	s.each(r, func(seg keyspace.Range, e E) bool {
		piece, _ := seg.Intersect(r)
		out = append(out, Segment{Range: piece, Entry: conv(e)})
		return true
	})
	return out
}

// check reports a broken invariant (an assertion error), or nil.
func (s *chunkList[E]) check() error {
	if s.max < 4 {
		return fmt.Errorf("leasetable: internal error: chunk size %d", s.max)
	}
	if len(s.chunks) == 0 || len(s.firsts) != len(s.chunks) {
		return fmt.Errorf("leasetable: internal error: %d chunks, %d first keys", len(s.chunks), len(s.firsts))
	}
	var (
		total   int
		lastKey keyspace.Key
		lastEnt E
		lo, hi  = s.minLen(), s.max
	)
	if len(s.chunks) == 1 {
		lo = 1
	}
	for c, ch := range s.chunks {
		n := len(ch.starts)
		if n != len(ch.ents) {
			return fmt.Errorf("leasetable: internal error: chunk %d has %d starts, %d entries", c, n, len(ch.ents))
		}
		if n < lo || n > hi {
			return fmt.Errorf("leasetable: internal error: chunk %d of %d holds %d segments; want %d to %d",
				c, len(s.chunks), n, lo, hi)
		}
		var zero E
		for _, e := range ch.ents[n:cap(ch.ents)] {
			if e != zero {
				return fmt.Errorf("leasetable: internal error: chunk %d keeps an entry %v past its end", c, e)
			}
		}
		if s.firsts[c] != ch.starts[0] {
			return fmt.Errorf("leasetable: internal error: chunk %d starts at %016x but its first key says %016x",
				c, uint64(ch.starts[0]), uint64(s.firsts[c]))
		}
		for i, k := range ch.starts {
			switch {
			case total == 0 && k != 0:
				return fmt.Errorf("leasetable: internal error: first segment starts at %016x, not 0", uint64(k))
			case total > 0 && k <= lastKey:
				return fmt.Errorf("leasetable: internal error: segment %d (chunk %d, %d) starts at %016x, not after %016x",
					total, c, i, uint64(k), uint64(lastKey))
			case total > 0 && ch.ents[i] == lastEnt:
				return fmt.Errorf("leasetable: internal error: segments %d and %d (chunk %d, %d) have equal entries %v",
					total-1, total, c, i, lastEnt)
			}
			lastKey, lastEnt = k, ch.ents[i]
			total++
		}
	}
	if total != s.n {
		return fmt.Errorf("leasetable: internal error: %d segments counted as %d", total, s.n)
	}
	return nil
}
