package sim

import (
	"unsafe"

	"github.com/leasehold/leasehold/protocol"
)

// sizes caches the wire size of large SyncResponses. A push round sends
// one shared Update (a delta or a snapshot of the whole table) to every
// Lookup at one LSN, and wireSize walks it: with 100,000 Lookups and a
// table of 640,000 segments the walks would cost more than the Manager
// they measure. The key is the Update's slices (their first element and
// length), which a shared Update has in common and a different one cannot
// (a Table never rewrites a slice it handed out), so the cache changes no
// result, only how often it is computed.
type sizes struct {
	m map[sizeKey]int
}

type sizeKey struct {
	changes, segments unsafe.Pointer
	nc, ns            int
}

// sizeCacheMin is the number of entries from which a response's size is
// cached; sizeCacheMax bounds the cache (it is emptied when full). The
// keys keep their Updates alive, so the cache is small: the messages of a
// push round, which share one Update, are sent one after the other.
const (
	sizeCacheMin = 64
	sizeCacheMax = 8
)

func (c *sizes) of(msg any) int {
	m, ok := msg.(*protocol.SyncResponse)
	if !ok || len(m.Update.Changes)+len(m.Update.Segments) < sizeCacheMin {
		return wireSize(msg)
	}
	k := sizeKey{nc: len(m.Update.Changes), ns: len(m.Update.Segments)}
	if k.nc > 0 {
		k.changes = unsafe.Pointer(&m.Update.Changes[0])
	}
	if k.ns > 0 {
		k.segments = unsafe.Pointer(&m.Update.Segments[0])
	}
	if n, ok := c.m[k]; ok {
		return n + len(m.Namespace)
	}
	if c.m == nil || len(c.m) >= sizeCacheMax {
		c.m = map[sizeKey]int{}
	}
	n := wireSize(msg)
	c.m[k] = n - len(m.Namespace)
	return n
}
