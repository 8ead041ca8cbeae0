package sim

import (
	"fmt"
	"unsafe"

	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// compactPushes turns the pushes that reach a full Lookup into what a real
// Lookup reads from the compact form the Manager pushes to it
// (manager.syncResponseToPB, docs/protocol.md "Compact deltas"): the delta
// marked and merged, converted to the compact wire form and decoded, each
// range that is a whole segment at the delta's From with its End left to
// the Lookup's copy. Answers to polls keep the full form, as the Manager
// sends them. The simulation delivers pushes late, twice or never, and
// out of order: the Lookup must refuse each one that does not fit its
// copy and repair by a poll, and the checkers see any copy it misapplies.
//
// A push round sends one Update to many Lookups: its conversion is cached
// by the Update's storage, as sizes does. (A run breaks one rule or none,
// so the cache never mixes a broken conversion with a sound one.)
type compactPushes struct {
	m map[sizeKey]leasetable.Update
}

func (c *compactPushes) of(m *protocol.SyncResponse, blind bool) *protocol.SyncResponse {
	u := &m.Update
	if m.ID != 0 || u.Snapshot || len(u.Changes) == 0 {
		return m
	}
	k := sizeKey{changes: unsafe.Pointer(&u.Changes[0]), nc: len(u.Changes)}
	d, ok := c.m[k]
	if !ok || d.From != u.From || d.To != u.To {
		marked := leasetable.MarkFromCopy(*u)
		if blind { // faults.Set.MarkFromCopyBlind
			for i := range marked.Changes {
				c := &marked.Changes[i]
				c.FromCopy, c.OwnerFromCopy = c.Whole, c.LeftOwner && c.Range.Start > 0
			}
		}
		mu := leasetable.Merge(marked)
		var err error
		d, err = wire.UpdateFromPB(wire.CompactUpdateToPB(&mu))
		if err != nil {
			panic(fmt.Sprintf("sim: the compact form of a delta does not decode: %v", err))
		}
		if c.m == nil || len(c.m) >= sizeCacheMax {
			c.m = map[sizeKey]leasetable.Update{}
		}
		c.m[k] = d
	}
	out := *m
	out.Update = d
	return &out
}
