package lease

import (
	"maps"
	"slices"
)

// Read replicas are Manager replicas that receive the log, apply it and
// serve Lookups, but never vote: Raft learners that the leader never
// promotes (docs/operations.md, "Read replicas"). Which replicas are read
// replicas is replicated with their addresses (an OpPeer Change with
// Reader set), so that every leader, a new one included, knows to leave
// them learners; a later OpPeer for the same replica without Reader (an
// operator's explicit promotion) clears it.

// ReadReplica reports whether replica id is a read replica.
func (s *State) ReadReplica(id uint64) bool { return s.readers[id] }

// ReadReplicas returns the read replicas' IDs, sorted.
func (s *State) ReadReplicas() []uint64 {
	return slices.Sorted(maps.Keys(s.readers))
}

func (s *State) setReader(id uint64, on bool) {
	if on {
		s.readers[id] = true
	} else {
		delete(s.readers, id)
	}
}
