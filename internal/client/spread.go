package client

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Spreading Lookups over the replicas (docs/protocol.md, "Read
// replicas"). Every replica that is caught up answers Lookups — the
// leader, its followers and the read replicas — so a Lookup's sync stream
// need not follow the leader as an Owner's must. A Lookup draws a random
// key when it starts and ranks the replicas it was given by rendezvous
// hashing (highest random weight: xxhash64 of the key and the address): it
// starts at the first and, when a replica refuses it, breaks or goes
// unanswered for LookupAnswerWait (rule 19), moves to the next in its own
// ranking, wrapping around. Why rendezvous hashing rather than the least
// loaded replica: it needs no load reports and no coordination, it spreads
// n Lookups over r replicas evenly (each a uniform draw), and the Lookups
// of a replica that fails move to the others evenly too — each to its own
// next choice — instead of all to the same next address, which a plain
// round robin from a hashed start would do; the least-loaded replica, as
// every Lookup saw it, would draw a herd. A refusal's leader hint naming a
// replica in the list is not followed (the next in the ranking serves as
// well, and following it would pile every refused Lookup on the leader);
// a hint naming one outside the list is (the group has grown).

// Rank returns addrs ordered by rendezvous hashing with key: descending
// xxhash64(key, addr), ties by address.
func Rank(key uint64, addrs []string) []string {
	type scored struct {
		addr  string
		score uint64
	}
	s := make([]scored, len(addrs))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], key)
	for i, a := range addrs {
		d := xxhash.New()
		_, _ = d.Write(b[:])
		_, _ = d.WriteString(a)
		s[i] = scored{a, d.Sum64()}
	}
	slices.SortFunc(s, func(x, y scored) int {
		if c := cmp.Compare(y.score, x.score); c != 0 {
			return c
		}
		return cmp.Compare(x.addr, y.addr)
	})
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.addr
	}
	return out
}

// Spread makes Keep's streams start at, and move through, the replicas in
// their rendezvous order for key (Rank), and follow no leader hint naming
// one of them: for Lookups, which any caught-up replica serves. Call it
// before Keep.
func (m *Managers) Spread(key uint64) { m.spread, m.spreadKey = true, key }
