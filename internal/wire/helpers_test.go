package wire

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// Random valid values of the protocol types, for round-trip tests and fuzz
// seeds. Each draws from rng only, so a seed replays.

func randString(rng *rand.Rand, required bool) string {
	switch rng.IntN(8) {
	case 0:
		if !required {
			return ""
		}
	case 1:
		return strings.Repeat("é", MaxStringLen/2) // exactly the limit, multi-byte
	}
	const alphabet = "abcxyz019-_.:/ é☃𝄞"
	runes := []rune(alphabet)
	n := 1 + rng.IntN(24)
	var b strings.Builder
	for range n {
		b.WriteRune(runes[rng.IntN(len(runes))])
	}
	return b.String()
}

func randUint(rng *rand.Rand) uint64 {
	switch rng.IntN(4) {
	case 0:
		return 0
	case 1:
		return ^uint64(0) - rng.Uint64N(3)
	case 2:
		return rng.Uint64N(1000)
	}
	return rng.Uint64()
}

func randRange(rng *rand.Rand) keyspace.Range {
	switch rng.IntN(4) {
	case 0:
		return keyspace.Full
	case 1:
		return keyspace.Range{Start: keyspace.Key(rng.Uint64()), End: 0}
	}
	a, b := rng.Uint64(), rng.Uint64()
	if a > b {
		a, b = b, a
	}
	if a == b {
		b = a + 1 // may wrap to 0: the end of the key space, still valid
	}
	return keyspace.Range{Start: keyspace.Key(a), End: keyspace.Key(b)}
}

func randLGN(rng *rand.Rand) keyspace.LGN {
	return keyspace.LGN(1 + rng.Uint64N(^uint64(0)-1))
}

func randEntry(rng *rand.Rand) leasetable.Entry {
	if rng.IntN(3) == 0 {
		return leasetable.Entry{}
	}
	e := leasetable.Entry{
		Owner:    randString(rng, true),
		Addr:     randString(rng, false),
		LGN:      randLGN(rng),
		Migrated: rng.IntN(2) == 0,
	}
	if e.Migrated && rng.IntN(2) == 0 {
		e.MigratedFrom = randLGN(rng)
		if e.MigratedFrom == e.LGN {
			e.MigratedFrom++
		}
	}
	return e
}

func randLeases(rng *rand.Rand) []protocol.Lease {
	n := rng.IntN(6)
	if n == 0 {
		if rng.IntN(2) == 0 {
			return nil
		}
		return []protocol.Lease{}
	}
	ls := make([]protocol.Lease, n)
	for i := range ls {
		ls[i] = protocol.Lease{
			Range:    randRange(rng),
			LGN:      randLGN(rng),
			Grant:    rng.IntN(2) == 0,
			Migrated: rng.IntN(2) == 0,
		}
	}
	return ls
}

func randDuration(rng *rand.Rand) time.Duration {
	if rng.IntN(3) == 0 {
		return 0
	}
	return time.Duration(rng.Int64())
}

func randLeaseRequest(rng *rand.Rand) *protocol.LeaseRequest {
	r := &protocol.LeaseRequest{
		Namespace:   randString(rng, true),
		Owner:       randString(rng, false),
		Addr:        randString(rng, false),
		Incarnation: randUint(rng),
		Seq:         randUint(rng),
		AckEpoch:    randUint(rng),
		AckSeq:      randUint(rng),
		Held:        randLeases(rng),
		Leaving:     rng.IntN(2) == 0,
		Draining:    rng.IntN(2) == 0,
		Handed:      randHanded(rng),
		Capacity:    float64(rng.IntN(5)) / 2,
		Load:        randLoad(rng),
		HotKeys:     randKeys(rng),
		Window:      randDuration(rng),
	}
	if rng.IntN(4) == 0 {
		r.Held, r.HeldAsAcked = nil, true // the compact form lists nothing
	}
	return r
}

// randID is a non-empty owner ID.
func randID(rng *rand.Rand) string { return "owner-" + strconv.Itoa(rng.IntN(1000)) }

func randHanded(rng *rand.Rand) []protocol.Handed {
	var out []protocol.Handed
	for range rng.IntN(3) {
		out = append(out, protocol.Handed{Range: randRange(rng), LGN: randLGN(rng), To: randID(rng), Incarnation: 1 + randUint(rng)/2})
	}
	return out
}

func randHandovers(rng *rand.Rand) []protocol.Handover {
	var out []protocol.Handover
	for range rng.IntN(3) {
		out = append(out, protocol.Handover{Range: randRange(rng), LGN: randLGN(rng), To: randID(rng),
			Addr: randString(rng, false), Incarnation: 1 + randUint(rng)/2, Within: 1 + randDuration(rng)/2})
	}
	return out
}

func randLoad(rng *rand.Rand) []protocol.RangeLoad {
	var out []protocol.RangeLoad
	for range rng.IntN(3) {
		out = append(out, protocol.RangeLoad{Range: randRange(rng), Requests: randUint(rng)})
	}
	return out
}

func randKeys(rng *rand.Rand) []protocol.KeyLoad {
	var out []protocol.KeyLoad
	for range rng.IntN(3) {
		out = append(out, protocol.KeyLoad{Key: keyspace.Key(randUint(rng)), Requests: randUint(rng)})
	}
	return out
}

func randLeaseResponse(rng *rand.Rand) *protocol.LeaseResponse {
	r := &protocol.LeaseResponse{
		Namespace:   randString(rng, false),
		Owner:       randString(rng, false),
		Incarnation: randUint(rng),
		Epoch:       randUint(rng),
		Seq:         randUint(rng),
		AckSeq:      randUint(rng),
		Leases:      randLeases(rng),
		OwnerLease:  randDuration(rng),
		Renew:       randDuration(rng),
		Handovers:   randHandovers(rng),
		Drain:       protocol.Drain(rng.IntN(3)),
	}
	if rng.IntN(4) == 0 {
		r.Leases, r.RenewHeld = nil, true // the compact form lists nothing
	}
	return r
}

func randSyncRequest(rng *rand.Rand) *protocol.SyncRequest {
	return &protocol.SyncRequest{
		Namespace: randString(rng, true),
		ID:        randUint(rng),
		Epoch:     randUint(rng),
		LSN:       keyspace.LSN(randUint(rng)),
		MaxDrift:  randDrift(rng),
	}
}

// randDrift is a MaxDrift the wire accepts: 0, 0.05 or any in [0, 1).
func randDrift(rng *rand.Rand) float64 {
	switch rng.IntN(3) {
	case 0:
		return 0
	case 1:
		return 0.05
	}
	return rng.Float64()
}

func randUpdate(rng *rand.Rand) leasetable.Update {
	u := leasetable.Update{
		From:     keyspace.LSN(randUint(rng)),
		To:       keyspace.LSN(randUint(rng)),
		Snapshot: rng.IntN(2) == 0,
	}
	n := rng.IntN(8)
	if u.Snapshot {
		u.Segments = make([]leasetable.Segment, n)
		for i := range u.Segments {
			u.Segments[i] = leasetable.Segment{Range: randRange(rng), Entry: randEntry(rng)}
		}
	} else {
		u.Changes = make([]leasetable.Change, n)
		for i := range u.Changes {
			u.Changes[i] = leasetable.Change{
				LSN: keyspace.LSN(randUint(rng)), Range: randRange(rng), Entry: randEntry(rng),
			}
		}
	}
	return u
}

func randSyncResponse(rng *rand.Rand) *protocol.SyncResponse {
	return &protocol.SyncResponse{
		Namespace:   randString(rng, false),
		ID:          randUint(rng),
		Epoch:       randUint(rng),
		Update:      randUpdate(rng),
		Sync:        randDuration(rng),
		SyncTimeout: randDuration(rng),
		MaxDrift:    randDrift(rng),
	}
}

// nilIfEmpty returns nil for an empty slice: FromPB decodes empty lists as
// nil, so expected values are normalized before comparing.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func normLeaseRequest(r *protocol.LeaseRequest) *protocol.LeaseRequest {
	c := *r
	c.Held = nilIfEmpty(c.Held)
	return &c
}

func normLeaseResponse(r *protocol.LeaseResponse) *protocol.LeaseResponse {
	c := *r
	c.Leases = nilIfEmpty(c.Leases)
	return &c
}

func normSyncResponse(r *protocol.SyncResponse) *protocol.SyncResponse {
	c := *r
	c.Update.Changes = nilIfEmpty(c.Update.Changes)
	c.Update.Segments = nilIfEmpty(c.Update.Segments)
	return &c
}

// snapshotResponse is a SyncResponse carrying a snapshot of n segments that
// cover the key space, held by 64 owners with every eighth segment free: the
// shape of a real table.
func snapshotResponse(n int) *protocol.SyncResponse {
	segs := make([]leasetable.Segment, n)
	step := ^uint64(0)/uint64(n) + 1
	for i := range segs {
		r := keyspace.Range{Start: keyspace.Key(uint64(i) * step), End: keyspace.Key(uint64(i+1) * step)}
		if i == n-1 {
			r.End = 0
		}
		segs[i].Range = r
		if i%8 == 7 {
			continue // free
		}
		o := i % 64
		segs[i].Entry = leasetable.Entry{
			Owner: fmt.Sprintf("owner-%02d", o),
			Addr:  fmt.Sprintf("10.0.0.%d:7000", o),
			LGN:   keyspace.LGN(1000 + i),
		}
		if i%5 == 0 {
			segs[i].Entry.Migrated = true
			segs[i].Entry.MigratedFrom = keyspace.LGN(i + 1)
		}
	}
	return &protocol.SyncResponse{
		Namespace: "default",
		ID:        7,
		Epoch:     3,
		Update:    leasetable.Update{From: 12, To: 98765, Snapshot: true, Segments: segs},
		Sync:      5 * time.Second,
	}
}
