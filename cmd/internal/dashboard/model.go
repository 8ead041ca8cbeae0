package dashboard

import (
	"context"
	"math"
	"slices"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// Source is where the dashboard's data comes from. The leasehold dashboard
// command implements it with one Lookup per namespace and the Manager's
// Status and Drain calls; a test implements it with a table of its own.
// Its methods may be called from several goroutines at once.
type Source interface {
	// Namespaces names the namespaces whose tables Segments serves.
	Namespaces() []string
	// Segments returns the current copy of namespace ns's lease table,
	// sorted by key, and its LSN. The dashboard only reads the slice.
	Segments(ns string) ([]leasetable.Segment, keyspace.LSN)
	// Status asks the Manager for the Owners, their load and its replicas.
	Status(ctx context.Context) (Status, error)
	// Drain asks the Manager to drain Owner owner of namespace ns and
	// returns its answer in words: the drain started, or why the
	// maintenance gate (or anything else) refused it, as an error.
	Drain(ctx context.Context, ns, owner string) (string, error)
}

// Status is what the Manager says of itself and its Owners.
type Status struct {
	Epoch      uint64
	Leader     uint64 // the leading replica's ID; 0 if none is known
	Managers   []Manager
	Namespaces []NamespaceStatus
}

// Manager is one Manager replica as Status found it.
type Manager struct {
	ID      uint64 `json:"id"`
	Addr    string `json:"addr"`
	Role    string `json:"role"` // leader, follower, read-replica, candidate … or unreachable
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	Lookups uint32 `json:"lookups"` // the Lookups it serves
	Error   string `json:"error,omitempty"`
	// Ready is the replica's readiness by the rule of its /readyz (what
	// leasehold status shows), and Reason why it is not.
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// NamespaceStatus is one namespace as the Manager's Status describes it.
type NamespaceStatus struct {
	Name       string
	LSN        uint64
	Ranges     uint32
	FreeRanges uint32
	Lookups    uint32
	// Standbys is the namespace's standby Owners per range (0 or 1).
	Standbys uint32
	Owners   []Owner
}

// Owner is one Owner as the Manager's Status describes it.
type Owner struct {
	ID          string  `json:"id"`
	Addr        string  `json:"addr"`
	Incarnation uint64  `json:"incarnation"`
	Member      bool    `json:"member"`
	Ranges      uint32  `json:"ranges"`
	Share       float64 `json:"share"`
	Load        float64 `json:"load"`     // requests per second, as its last report measured
	Capacity    float64 `json:"capacity"` // its weight; 1 unless it set another
	Draining    bool    `json:"draining"`
	// Zone is the Owner's failure domain; StandbyRanges the leases it
	// stands by for, StandbyInSync how many of those are filled.
	Zone          string   `json:"zone"`
	StandbyRanges uint32   `json:"standbyRanges"`
	StandbyInSync uint32   `json:"standbyInSync"`
	HotKeys       []HotKey `json:"-"`
}

// HotKey is one of an Owner's busiest keys.
type HotKey struct {
	Key  keyspace.Key
	Rate float64 // requests per second, estimated from a sample
}

// Band is the key space drawn as Buckets equal arcs: Holder[i] is the index
// (into the namespace's owner list) of the Owner that holds the most of arc
// i, or -1 when most of it is free. It is how 10,000 Owners × 64 ranges
// reach a browser as a few kilobytes: the page draws the arcs, never the
// ranges, and asks for a range's details on hover.
type Band struct {
	Holder []int32
}

// bandOf aggregates segs (sorted, covering the key space) into buckets
// arcs, buckets a power of two. An Owner's index is its position in owners;
// an Owner missing from owners counts as free. It runs in
// O(len(segs) + buckets).
func bandOf(segs []leasetable.Segment, owners map[string]int32, buckets int) Band {
	b := Band{Holder: make([]int32, buckets)}
	for i := range b.Holder {
		b.Holder[i] = -1
	}
	if buckets <= 0 || len(segs) == 0 {
		return b
	}
	shift := 64 - uint(math.Log2(float64(buckets)))
	width := uint64(1) << shift // keys per bucket
	cover := map[int32]uint64{} // the current bucket's coverage by holder
	cur := -1
	flush := func() {
		if cur < 0 {
			return
		}
		best, most := int32(-1), uint64(0)
		for h, n := range cover {
			if n > most || (n == most && h < best) {
				best, most = h, n
			}
		}
		b.Holder[cur] = best
		clear(cover)
	}
	for _, s := range segs {
		h := int32(-1)
		if !s.Entry.Free() {
			if i, ok := owners[s.Entry.Owner]; ok {
				h = i
			}
		}
		start, last := uint64(s.Range.Start), uint64(s.Range.Last())
		for k := start; ; {
			bi := int(k >> shift)
			if bi != cur {
				flush()
				cur = bi
			}
			end := (uint64(bi) << shift) + (width - 1) // the bucket's last key
			if end > last {
				end = last
			}
			cover[h] += end - k + 1
			if end == last {
				break
			}
			k = end + 1
		}
	}
	flush()
	return b
}

// segmentAt returns the segment of segs (sorted by start) holding key k.
func segmentAt(segs []leasetable.Segment, k keyspace.Key) (leasetable.Segment, bool) {
	i, found := slices.BinarySearchFunc(segs, k, func(s leasetable.Segment, k keyspace.Key) int {
		switch {
		case s.Range.Start > k:
			return 1
		case s.Range.Start < k:
			return -1
		}
		return 0
	})
	if !found {
		i--
	}
	if i < 0 || i >= len(segs) || !segs[i].Range.Contains(k) {
		return leasetable.Segment{}, false
	}
	return segs[i], true
}

// holdersOf returns the IDs of the Owners holding a range in segs, sorted.
func holdersOf(segs []leasetable.Segment) []string {
	seen := map[string]bool{}
	var ids []string
	for _, s := range segs {
		if id := s.Entry.Owner; id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// hexKey writes a key as 0x and 16 hex digits, as the CLI does.
func hexKey(k keyspace.Key) string {
	const digits = "0123456789abcdef"
	var b [18]byte
	b[0], b[1] = '0', 'x'
	for i := 17; i >= 2; i-- {
		b[i] = digits[k&0xf]
		k >>= 4
	}
	return string(b[:])
}

// hexEnd writes a range's end; the end of the key space is 2^64.
func hexEnd(r keyspace.Range) string {
	if r.End == 0 {
		return "0x10000000000000000"
	}
	return hexKey(r.End)
}
