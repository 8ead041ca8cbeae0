package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/protocol"
)

// benchOwnerCounts are the sizes the benchmarks run at: 64 segments per
// Owner.
var benchOwnerCounts = []int{1000, 10000}

// benchCore resumes a Core over stateOf(owners) — every Owner a member
// holding what consistent hashing gives it — with production timings, and
// has every Owner renew once, over one Renew. It returns the Core and the
// time of the last renewal.
func benchCore(b *testing.B, owners int, cfg Settings) (*Core, time.Time, *benchOwners) {
	b.Helper()
	cfg.Timing, cfg.Epoch, cfg.Policy = protocol.Production(), epoch, assign.ConsistentHash{}
	c := Resume(cfg, stateOf(b, owners), 1<<32, base)
	fleet := &benchOwners{seq: map[string]uint64{}, ack: map[string]uint64{}}
	fleet.take(c.Ready())
	now := base
	for i := range owners {
		now = base.Add(time.Duration(i+1) * cfg.Timing.Renew / time.Duration(owners))
		fleet.renew(b, c, now, fmt.Sprintf("owner-%d", i))
	}
	return c, now, fleet
}

// benchOwners keeps the sequence numbers of the Owners of a benchmark, who
// take every lease they are sent.
type benchOwners struct {
	seq, ack map[string]uint64
}

func (f *benchOwners) take(r Round) {
	for _, m := range r.Owners {
		if m.Msg.Seq > f.ack[m.To] {
			f.ack[m.To] = m.Msg.Seq
		}
	}
}

// renew sends id's renewal of what the table says it holds.
func (f *benchOwners) renew(b *testing.B, c *Core, now time.Time, id string) {
	f.seq[id]++
	req := &protocol.LeaseRequest{Namespace: protocol.DefaultNamespace, Owner: id, Addr: id + ":7000", Incarnation: 1,
		Seq: f.seq[id], AckEpoch: epoch, AckSeq: f.ack[id]}
	for _, s := range c.Table(protocol.DefaultNamespace).Owned(id) {
		req.Held = append(req.Held, protocol.Lease{Range: s.Range, LGN: s.Entry.LGN})
	}
	if err := c.StepLease(now, req); err != nil {
		b.Fatal(err)
	}
	f.take(c.Ready())
}

// BenchmarkCoreJoin: one Owner joins a Manager whose members hold the key
// space, and the join is planned at once: the desired assignment is
// recomputed, and the ranges it moves are recalled from their holders.
func BenchmarkCoreJoin(b *testing.B) {
	for _, owners := range benchOwnerCounts {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			c, now, fleet := benchCore(b, owners, Settings{Handover: -1, MembershipEvery: -1, MaxOwners: 1 << 30, MaxRanges: 1 << 30})
			i, sent := 0, 0
			for b.Loop() {
				now = now.Add(time.Millisecond)
				id := fmt.Sprintf("join-%d", i)
				if err := c.StepLease(now, &protocol.LeaseRequest{Namespace: protocol.DefaultNamespace, Owner: id, Addr: id + ":7000",
					Incarnation: 1, Seq: 1}); err != nil {
					b.Fatal(err)
				}
				r := c.Ready()
				sent += len(r.Owners)
				fleet.take(r)
				i++
			}
			b.ReportMetric(float64(sent)/float64(i), "msgs/join")
		})
	}
}

// BenchmarkCoreJoinBurst: 100 Owners join within a second, as when a
// cluster starts, with membership planning paced (the default) and not;
// the time is per join.
func BenchmarkCoreJoinBurst(b *testing.B) {
	for _, owners := range benchOwnerCounts {
		for _, every := range []time.Duration{0, -1} {
			b.Run(fmt.Sprintf("owners=%d/every=%v", owners, every), func(b *testing.B) {
				c, now, fleet := benchCore(b, owners, Settings{Handover: -1, MembershipEvery: every, MaxOwners: 1 << 30, MaxRanges: 1 << 30})
				i := 0
				for b.Loop() {
					now = now.Add(10 * time.Millisecond)
					id := fmt.Sprintf("join-%d", i)
					if err := c.StepLease(now, &protocol.LeaseRequest{Namespace: protocol.DefaultNamespace, Owner: id, Addr: id + ":7000",
						Incarnation: 1, Seq: 1}); err != nil {
						b.Fatal(err)
					}
					if d := c.NextDeadline(); !d.After(now) {
						c.Tick(now)
					}
					fleet.take(c.Ready())
					i++
				}
			})
		}
	}
}

// BenchmarkCoreRenew: one renewal by one of many Owners, each renewing
// every Renew: the Manager's steady work per lease request (also at 50
// Owners, the size of the etcd comparison, docs/peers.md).
func BenchmarkCoreRenew(b *testing.B) { benchRenew(b, false) }

// BenchmarkCoreRenewTicked: BenchmarkCoreRenew with the Core's ticks at its
// deadlines, as a Manager runs it: each reservation's end comes due once a
// ManagerLease after its last renewal and is looked at then, so the cost of
// keeping the ends in order is counted whether it is paid per renewal or
// when an end comes due.
func BenchmarkCoreRenewTicked(b *testing.B) { benchRenew(b, true) }

// benchRenew runs the renewal benchmarks, with the Core ticked at its
// deadlines or not.
func benchRenew(b *testing.B, ticked bool) {
	for _, owners := range append([]int{50}, benchOwnerCounts...) {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			c, now, fleet := benchCore(b, owners, Settings{Handover: -1})
			every := protocol.Production().Renew / time.Duration(owners)
			i := 0
			for b.Loop() {
				now = now.Add(every)
				if ticked && !c.NextDeadline().After(now) {
					c.Tick(now)
					fleet.take(c.Ready())
				}
				fleet.renew(b, c, now, fmt.Sprintf("owner-%d", i%owners))
				i++
			}
		})
	}
}

// BenchmarkRangeLimitCheck: the MaxRanges check of one join, which a
// Manager makes before admitting it: by a sum while the table is well
// below the limit, by a walk of the table when near it (10,000 Owners,
// 640,000 ranges of the default 1,048,576).
func BenchmarkRangeLimitCheck(b *testing.B) {
	for _, owners := range benchOwnerCounts {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			c, _, _ := benchCore(b, owners, Settings{Handover: -1, MaxOwners: 2 * owners})
			n := c.ns[protocol.DefaultNamespace]
			req := &protocol.LeaseRequest{Namespace: protocol.DefaultNamespace, Owner: "join", Addr: "join:7000", Incarnation: 1, Seq: 1}
			for b.Loop() {
				if err := c.checkLimits(n, nil, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
