package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// BenchmarkCoreRenewTicked: BenchmarkCoreRenew with the Core's ticks at its
// deadlines, as a Manager runs it: each reservation's end comes due once a
// ManagerLease after its last renewal and is looked at then, so the cost of
// keeping the ends in order is counted whether it is paid per renewal or
// when an end comes due.
func BenchmarkCoreRenewTicked(b *testing.B) {
	for _, owners := range append([]int{50}, benchOwnerCounts...) {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			c, now, fleet := benchCore(b, owners, Settings{Handover: -1})
			every := protocol.Production().Renew / time.Duration(owners)
			i := 0
			for b.Loop() {
				now = now.Add(every)
				if d := c.NextDeadline(); !d.After(now) {
					c.Tick(now)
					fleet.take(c.Ready())
				}
				fleet.renew(b, c, now, fmt.Sprintf("owner-%d", i%owners))
				i++
			}
		})
	}
}
