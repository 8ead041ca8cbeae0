package assign

import (
	"math/bits"

	"github.com/leasehold/leasehold/keyspace"
)

// DefaultPieces is the number of pieces of a zero Fixed.
const DefaultPieces = 16

// Fixed divides the key space into Pieces equal ranges assigned round-robin
// to members sorted by ID: piece i goes to the i%len(members)'th member. It is
// the fixed-assignment policy for tests (P§4.1): which owner holds which range
// is easy to predict. When there are more members than pieces, the members
// last in ID order get nothing.
type Fixed struct {
	// Pieces is the number of ranges; 0 (or a negative value) means
	// DefaultPieces. Piece i is [floor(i·2^64/Pieces), floor((i+1)·2^64/Pieces)).
	Pieces int
}

var _ Policy = Fixed{}

// Assign implements Policy.
func (f Fixed) Assign(members []Member) Assignment {
	ms := normalize(members)
	if len(ms) == 0 {
		return nil
	}
	n := f.Pieces
	if n <= 0 {
		n = DefaultPieces
	}
	out := make(Assignment, n)
	for i := range n {
		out[i] = Segment{
			Range: keyspace.Range{Start: pieceStart(i, n), End: pieceStart(i+1, n)},
			Owner: ms[i%len(ms)].ID,
		}
	}
	return out
}

// pieceStart returns floor(i·2^64/n), with pieceStart(n, n) = 0 standing for
// 2^64. It needs 0 ≤ i ≤ n.
func pieceStart(i, n int) keyspace.Key {
	if i == n {
		return 0
	}
	q, _ := bits.Div64(uint64(i), 0, uint64(n)) // (i·2^64)/n; i < n so no overflow
	return keyspace.Key(q)
}
