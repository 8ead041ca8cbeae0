// A delta of many changes applied to a View in chunks.

package leasetable

import "github.com/leasehold/leasehold/keyspace"

// burstChanges is the number of changes in one delta from which a View
// applies them in chunks rather than to its flat segments. A change that
// adds or removes a segment shifts every segment after it in the flat
// slices, O(n); a delta of k such changes in no particular key order so
// cost O(k·n), quadratic in the table when a whole table's worth arrives
// at once. A Manager's observer met exactly that when a leader's start-up
// reservation ended and it granted every range in one round: 128,000
// changes, one per range, in the order of their Owners, took its View
// about 9 s at 2,000 Owners and 2 minutes at 5,000 (320,000 segments), on
// the loop that answers the Owners (docs/results.md, "The ladder with read
// replicas carrying the Lookups"). In chunks, the same delta costs two
// copies of the segments and O(log n + chunk) per change. A delta of a few
// changes, the usual one, stays on the flat slices, which it shifts once.
const burstChanges = 32

// burst reports whether a delta of k changes is applied in chunks.
func (s *segList[E]) burst(k int) bool { return k >= burstChanges }

// chunked returns the segments as a chunkList, in chunks of defaultChunk.
func (s *segList[E]) chunked() chunkList[E] {
	c := emptyChunkList[E](defaultChunk)
	for i, st := range s.starts {
		c.push(st, s.ents[i])
	}
	c.finish()
	return c
}

// flatten returns the segments of c as a segList.
func flatten[E comparable](c *chunkList[E]) segList[E] {
	s := segList[E]{starts: make([]keyspace.Key, 0, c.len()), ents: make([]E, 0, c.len())}
	for _, ch := range c.chunks {
		s.starts = append(s.starts, ch.starts...)
		s.ents = append(s.ents, ch.ents...)
	}
	return s
}

// setVisit is segList.set on chunks: it overwrites r with e and, if
// anything changes, first calls visit with each piece of r and the entry
// the piece had, in key order.
func (s *chunkList[E]) setVisit(r keyspace.Range, e E, visit func(piece keyspace.Range, old E)) {
	if s.covered(r, e) {
		return
	}
	s.each(r, func(seg keyspace.Range, old E) bool {
		piece, _ := seg.Intersect(r)
		visit(piece, old)
		return true
	})
	s.set(r, e)
}
