package owner

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// hotSample is how often CheckLeaseNow samples its key for the hot-key
// report: one call in 64, so the count costs one atomic add per call.
const hotSample = 64

// hotSlots is how many keys the hot-key sketch follows, and hotReport how
// many it reports.
const (
	hotSlots  = 32
	hotReport = 8
)

// loadMeter gathers the request counts of published lease sets that are no
// longer current, and a space-saving sketch of the sampled keys (Metwally
// et al.), until the next report.
type loadMeter struct {
	mu     sync.Mutex
	ranges map[keyspace.Range]uint64
	keys   map[keyspace.Key]uint64
	since  time.Time
}

// fold moves the counts of a published set into the meter.
func (m *loadMeter) fold(h *published) {
	if h == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range h.hits {
		if n := h.hits[i].Swap(0); n > 0 {
			if m.ranges == nil {
				m.ranges = map[keyspace.Range]uint64{}
			}
			m.ranges[h.leases[i].Range] += n
		}
	}
}

// sample counts one sampled call on key.
func (m *loadMeter) sample(key keyspace.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[keyspace.Key]uint64{}
	}
	if _, ok := m.keys[key]; ok || len(m.keys) < hotSlots {
		m.keys[key]++
		return
	}
	// Space-saving: the new key replaces the least counted one and
	// inherits its count, so a key's count is never under its true count.
	var minK keyspace.Key
	minN := ^uint64(0)
	for k, n := range m.keys {
		if n < minN || (n == minN && k < minK) {
			minK, minN = k, n
		}
	}
	delete(m.keys, minK)
	m.keys[key] = minN + 1
}

// take returns the counts since the last call and starts anew.
func (m *loadMeter) take(now time.Time) ([]protocol.RangeLoad, []protocol.KeyLoad, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.since) < protocol.MinLoadWindow {
		return nil, nil, 0 // too soon to report: the counts go with the next request
	}
	var ranges []protocol.RangeLoad
	for r, n := range m.ranges {
		ranges = append(ranges, protocol.RangeLoad{Range: r, Requests: n})
	}
	slices.SortFunc(ranges, func(a, b protocol.RangeLoad) int { return keyspace.Compare(a.Range, b.Range) })
	var keys []protocol.KeyLoad
	for k, n := range m.keys {
		keys = append(keys, protocol.KeyLoad{Key: k, Requests: n * hotSample})
	}
	slices.SortFunc(keys, func(a, b protocol.KeyLoad) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	keys = keys[:min(len(keys), hotReport)]
	window := now.Sub(m.since)
	m.ranges, m.keys, m.since = nil, nil, now
	return ranges, keys, window
}
