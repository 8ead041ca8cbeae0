// A sorted set for the Core's timers and reservations.

package lease

import (
	"fmt"
	"slices"
)

// ordered is a sorted set of distinct elements (by cmp), kept as a list of
// chunks of at most maxChunk elements each: a B-tree of height two. Finding
// an element is two binary searches; inserting or deleting one moves at
// most maxChunk elements, plus the list of chunks when a chunk splits or
// empties, which happens once per about maxChunk/2 changes. At the 640,000
// reservation segments of 10,000 Owners with 64 virtual nodes each, that is
// a few kilobytes moved per change instead of the megabytes a flat sorted
// slice moves.
//
// Positions (pos) name an element; any insert or delete invalidates them.
type ordered[E any] struct {
	cmp    func(a, b E) int
	chunks [][]E // none empty; sorted within and across
	n      int
}

// maxChunk bounds a chunk: a full one splits in two halves. (A variable
// only so that tests can make chunks tiny, and every path common.)
var maxChunk = 256

// pos is the position of an element: chunk c, index i in it. c ==
// len(chunks) is the end.
type pos struct{ c, i int }

func newOrdered[E any](cmp func(a, b E) int) *ordered[E] { return &ordered[E]{cmp: cmp} }

// Len returns the number of elements.
func (o *ordered[E]) Len() int { return o.n }

// search returns the position of the first element not less than e, and
// whether that element equals e.
func (o *ordered[E]) search(e E) (pos, bool) {
	// The first chunk whose last element is not less than e, then the
	// first such element in it. (Loops rather than slices.BinarySearchFunc:
	// one call of cmp a step instead of two, on every request's path.)
	lo, hi := 0, len(o.chunks)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ch := o.chunks[mid]; o.cmp(ch[len(ch)-1], e) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(o.chunks) {
		return pos{lo, 0}, false
	}
	ch := o.chunks[lo]
	i, j := 0, len(ch)
	for i < j {
		mid := int(uint(i+j) >> 1)
		if o.cmp(ch[mid], e) < 0 {
			i = mid + 1
		} else {
			j = mid
		}
	}
	return pos{lo, i}, o.cmp(ch[i], e) == 0
}

// end reports whether p is past the last element.
func (o *ordered[E]) end(p pos) bool { return p.c >= len(o.chunks) }

// at returns the element at p, which must not be the end. The pointer is
// valid until the next insert or delete; changing the element must not
// change its order.
func (o *ordered[E]) at(p pos) *E { return &o.chunks[p.c][p.i] }

// next returns the position after p.
func (o *ordered[E]) next(p pos) pos {
	if p.i++; p.i == len(o.chunks[p.c]) {
		p.c, p.i = p.c+1, 0
	}
	return p
}

// prev returns the position before p, which may be the end; false at the
// first element.
func (o *ordered[E]) prev(p pos) (pos, bool) {
	if p.i > 0 {
		return pos{p.c, p.i - 1}, true
	}
	if p.c == 0 {
		return p, false
	}
	return pos{p.c - 1, len(o.chunks[p.c-1]) - 1}, true
}

// first returns the smallest element; false if there is none.
func (o *ordered[E]) first() (E, bool) {
	if o.n == 0 {
		var zero E
		return zero, false
	}
	return o.chunks[0][0], true
}

// insert adds e, replacing an equal element.
func (o *ordered[E]) insert(e E) {
	if l := len(o.chunks) - 1; l >= 0 {
		if last := o.chunks[l]; o.cmp(last[len(last)-1], e) < 0 {
			// After the last element, as the ends of reservations made
			// from a clock that moves forward mostly are: one comparison,
			// no search, and a full last chunk starts a new one rather
			// than splitting in half, so that chunks filled in order stay
			// full.
			o.n++
			if len(last) < maxChunk {
				o.chunks[l] = append(last, e)
			} else {
				o.chunks = append(o.chunks, append(make([]E, 0, maxChunk), e))
			}
			return
		}
	}
	p, found := o.search(e)
	if found {
		*o.at(p) = e
		return
	}
	o.n++
	switch {
	case len(o.chunks) == 0:
		o.chunks = [][]E{append(make([]E, 0, maxChunk), e)}
		return
	case p.c == len(o.chunks): // after the last element: append to the last chunk
		p = pos{p.c - 1, len(o.chunks[p.c-1])}
	}
	ch := slices.Insert(o.chunks[p.c], p.i, e)
	if len(ch) <= maxChunk {
		o.chunks[p.c] = ch
		return
	}
	half := len(ch) / 2
	right := append(make([]E, 0, maxChunk), ch[half:]...)
	clear(ch[half:])
	o.chunks[p.c] = ch[:half]
	o.chunks = slices.Insert(o.chunks, p.c+1, right)
}

// delete removes the element equal to e, if any, and reports whether there
// was one.
func (o *ordered[E]) delete(e E) bool {
	p, found := o.search(e)
	if found {
		o.deleteAt(p)
	}
	return found
}

// deleteAt removes the element at p.
func (o *ordered[E]) deleteAt(p pos) {
	o.deleteSpan(p, 1)
}

// deleteRange removes the elements from lo on for which below holds,
// stopping at the first for which it does not, and returns how many it
// removed.
func (o *ordered[E]) deleteRange(lo E, below func(E) bool) int {
	removed := 0
	for {
		p, _ := o.search(lo)
		if o.end(p) {
			return removed
		}
		ch := o.chunks[p.c]
		j := p.i
		for j < len(ch) && below(ch[j]) {
			j++
		}
		if j == p.i {
			return removed
		}
		o.deleteSpan(p, j-p.i)
		removed += j - p.i
	}
}

// deleteSpan removes k elements from p, all in p's chunk, and keeps the
// chunks from emptying or shrinking below a quarter while a neighbour can
// take them.
func (o *ordered[E]) deleteSpan(p pos, k int) {
	ch := slices.Delete(o.chunks[p.c], p.i, p.i+k)
	o.n -= k
	if len(ch) == 0 {
		o.chunks = slices.Delete(o.chunks, p.c, p.c+1)
		return
	}
	o.chunks[p.c] = ch
	if len(ch) >= maxChunk/4 {
		return
	}
	// Merge a small chunk into a neighbour that has room.
	if p.c+1 < len(o.chunks) && len(ch)+len(o.chunks[p.c+1]) <= maxChunk {
		o.chunks[p.c] = append(ch, o.chunks[p.c+1]...)
		o.chunks = slices.Delete(o.chunks, p.c+1, p.c+2)
	} else if p.c > 0 && len(ch)+len(o.chunks[p.c-1]) <= maxChunk {
		o.chunks[p.c-1] = append(o.chunks[p.c-1], ch...)
		o.chunks = slices.Delete(o.chunks, p.c, p.c+1)
	}
}

// all calls fn for every element in order until it returns false. fn must
// not change the set.
func (o *ordered[E]) all(fn func(E) bool) {
	for _, ch := range o.chunks {
		for _, e := range ch {
			if !fn(e) {
				return
			}
		}
	}
}

// check reports where the set breaks its invariants, or nil: no empty or
// oversized chunk, elements strictly increasing, n their number.
func (o *ordered[E]) check() error {
	n := 0
	var last E
	for c, ch := range o.chunks {
		if len(ch) == 0 || len(ch) > maxChunk {
			return fmt.Errorf("chunk %d of %d has %d elements", c, len(o.chunks), len(ch))
		}
		for i, e := range ch {
			if n > 0 && o.cmp(last, e) >= 0 {
				return fmt.Errorf("element %d (chunk %d, index %d) is not above the one before it", n, c, i)
			}
			last = e
			n++
		}
	}
	if n != o.n {
		return fmt.Errorf("%d elements counted, %d recorded", n, o.n)
	}
	return nil
}
