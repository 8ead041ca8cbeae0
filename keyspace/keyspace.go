// Package keyspace defines leasehold's flat 64-bit key space: keys, half-open
// ranges of keys, sets of ranges, and the lease and log numbers that name
// versions of ownership (papers/prs-partitioning-and-recovery-service.txt §2.1).
//
// Every process maps an application name to a key with KeyOf, which uses
// xxhash64 so that a frontend and an owner on different machines, builds or Go
// versions always agree on the key.
package keyspace

import (
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Key is a point in the flat key space [0, 2^64).
type Key uint64

// MaxKey is the largest key.
const MaxKey Key = math.MaxUint64

// KeyOf maps an application name (a user, a topic, a conference) to its key.
// It is stable across processes and releases: xxhash64 with seed 0.
func KeyOf(name string) Key { return Key(xxhash.Sum64String(name)) }

// LGN is a lease generation number. Every grant of a lease on a range gets a
// fresh LGN; renewals keep it. A range whose LGN changes without the migrated
// flag has lost its soft state (C§2.2, P§4.1). Zero means "never leased".
type LGN uint64

// LSN is a log sequence number: the position of a change in the manager's
// lease-table change log (C§2.2.1). Zero is the empty table.
type LSN uint64

// Range is the half-open interval of keys [Start, End). End == 0 stands for
// 2^64, the end of the key space, so Range{0, 0} is the whole key space.
// A Range with Start == End (other than {0,0}) is empty and invalid.
type Range struct {
	Start Key
	End   Key // exclusive; 0 means 2^64
}

// Full is the whole key space.
var Full = Range{0, 0}

// Contains reports whether k lies in r.
func (r Range) Contains(k Key) bool {
	return k >= r.Start && (r.End == 0 || k < r.End)
}

// Valid reports whether r is a non-empty range.
func (r Range) Valid() bool { return r.End == 0 || r.Start < r.End }

// Last returns the largest key in r. r must be valid.
func (r Range) Last() Key { return r.End - 1 } // End==0 wraps to MaxKey

// Size returns the number of keys in r as a float (2^64 does not fit a uint64).
func (r Range) Size() float64 {
	if r.End == 0 {
		return float64(math.MaxUint64-uint64(r.Start)) + 1
	}
	return float64(r.End - r.Start)
}

// Overlaps reports whether r and o share a key.
func (r Range) Overlaps(o Range) bool {
	return r.Start <= o.Last() && o.Start <= r.Last()
}

// Covers reports whether every key of o is in r.
func (r Range) Covers(o Range) bool {
	return r.Start <= o.Start && o.Last() <= r.Last()
}

// Intersect returns the keys common to r and o, and whether there are any.
func (r Range) Intersect(o Range) (Range, bool) {
	if !r.Overlaps(o) {
		return Range{}, false
	}
	out := Range{Start: max(r.Start, o.Start)}
	last := min(r.Last(), o.Last())
	out.End = last + 1 // MaxKey+1 wraps to 0: the end of the key space
	return out, true
}

func (r Range) String() string {
	if r.End == 0 {
		return fmt.Sprintf("[%016x, end)", uint64(r.Start))
	}
	return fmt.Sprintf("[%016x, %016x)", uint64(r.Start), uint64(r.End))
}

// Compare orders ranges by Start, then by Last.
func Compare(a, b Range) int {
	switch {
	case a.Start < b.Start:
		return -1
	case a.Start > b.Start:
		return 1
	case a.Last() < b.Last():
		return -1
	case a.Last() > b.Last():
		return 1
	}
	return 0
}
