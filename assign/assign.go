package assign

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/leasehold/leasehold/keyspace"
)

// Member is an owner the policy may assign ranges to.
type Member struct {
	// ID is the owner's unique ID. A member with the empty ID is ignored by
	// every policy, because "" is how Assignment.Owner says "no owner".
	ID string
	// Capacity is the owner's relative capacity; 0 (or any value that is not
	// positive) means 1. ConsistentHash gives a member round(VNodes*Capacity)
	// virtual nodes, at least 1. Fixed ignores it.
	Capacity float64
}

// Segment is a range of keys and the owner it is assigned to.
type Segment struct {
	Range keyspace.Range
	Owner string
}

func (s Segment) String() string { return s.Range.String() + "→" + s.Owner }

// Assignment is a desired assignment: segments sorted by Range.Start,
// disjoint, exactly covering the whole key space [0, 2^64) when there is at
// least one member; nil when there are none.
//
// Adjacent segments may have the same owner (ConsistentHash makes one segment
// per virtual node) and are not merged, so that a range keeps its identity
// while the owners around it come and go.
type Assignment []Segment

// ErrInvalidAssignment is wrapped by every error that Validate returns.
var ErrInvalidAssignment = errors.New("assign: invalid assignment")

// Owner returns the owner of key k, or "" for an empty assignment. It is a
// binary search over the segments; a must be valid (see Validate).
func (a Assignment) Owner(k keyspace.Key) string {
	// The first segment that starts after k; the one before it holds k.
	i := sort.Search(len(a), func(i int) bool { return a[i].Range.Start > k })
	if i == 0 || !a[i-1].Range.Contains(k) {
		return ""
	}
	return a[i-1].Owner
}

// Validate checks that a is a well-formed assignment: empty, or segments
// that are non-empty, have an owner, and tile [0, 2^64) in key order with no
// gap or overlap. Consumers (the manager's lease table) rely on this: a gap
// would leave keys that no owner serves, an overlap would lease one key to two
// owners. The error names the first offending segment and wraps
// ErrInvalidAssignment.
func (a Assignment) Validate() error {
	if len(a) == 0 {
		return nil
	}
	next := keyspace.Key(0) // the Start the next segment must have
	for i, s := range a {
		switch {
		case s.Owner == "":
			return fmt.Errorf("%w: segment %d %v has no owner", ErrInvalidAssignment, i, s.Range)
		case !s.Range.Valid():
			return fmt.Errorf("%w: segment %d %v (owner %q) is empty", ErrInvalidAssignment, i, s.Range, s.Owner)
		case s.Range.Start != next:
			return fmt.Errorf("%w: segment %d %v (owner %q) starts at %016x, want %016x",
				ErrInvalidAssignment, i, s.Range, s.Owner, uint64(s.Range.Start), uint64(next))
		case s.Range.End == 0 && i != len(a)-1:
			return fmt.Errorf("%w: segment %d %v (owner %q) reaches the end of the key space but %d segments follow it",
				ErrInvalidAssignment, i, s.Range, s.Owner, len(a)-1-i)
		}
		next = s.Range.End
	}
	if last := a[len(a)-1]; last.Range.End != 0 {
		return fmt.Errorf("%w: last segment %d %v (owner %q) ends at %016x, want the end of the key space",
			ErrInvalidAssignment, len(a)-1, last.Range, last.Owner, uint64(last.Range.End))
	}
	return nil
}

// Policy computes the desired assignment for a membership.
//
// It must be deterministic: the same members, in any order, give the same
// Assignment, so that a new manager leader computes what the old one did.
// Implementations are pure: no goroutines, clocks or randomness. Assign must
// not modify members. It returns nil when no member has a non-empty ID.
type Policy interface {
	Assign(members []Member) Assignment
}

// normalize returns the members with a non-empty ID, sorted by ID, with
// every Capacity that is not positive (0, negative, NaN) replaced by 1, and
// duplicate IDs collapsed into one member holding the largest Capacity, so
// that the result does not depend on the order of members.
func normalize(members []Member) []Member {
	out := make([]Member, 0, len(members))
	for _, m := range members {
		if m.ID == "" {
			continue
		}
		if !(m.Capacity > 0) {
			m.Capacity = 1
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int {
		if a.ID != b.ID {
			if a.ID < b.ID {
				return -1
			}
			return 1
		}
		// Largest capacity first, so the first of a run of duplicates wins.
		switch {
		case a.Capacity > b.Capacity:
			return -1
		case a.Capacity < b.Capacity:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(a, b Member) bool { return a.ID == b.ID })
}
