package lease

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// stateOf returns the State of a Manager whose owners Owners hold the key
// space as consistent hashing (64 virtual nodes) assigns it, each segment
// its own grant: the steady state of the scale benchmark.
func stateOf(tb testing.TB, owners int) *State {
	st := NewState(0)
	if err := st.Apply(base, []Change{{Op: OpEpoch, Epoch: epoch}, {Op: OpNamespace, NS: protocol.DefaultNamespace}}); err != nil {
		tb.Fatal(err)
	}
	members := make([]assign.Member, owners)
	var chs []Change
	for i := range members {
		id := fmt.Sprintf("owner-%d", i)
		members[i] = assign.Member{ID: id}
		chs = append(chs, Change{Op: OpOwner, NS: protocol.DefaultNamespace, Owner: id,
			Record: OwnerRecord{Addr: fmt.Sprintf("10.0.%d.%d:7000", i/256, i%256), Incarnation: 1, Member: true}})
	}
	if err := st.Apply(base, chs); err != nil {
		tb.Fatal(err)
	}
	n := st.ns[protocol.DefaultNamespace]
	var segs []leasetable.Segment
	for i, s := range (assign.ConsistentHash{}).Assign(members) {
		segs = append(segs, leasetable.Segment{Range: s.Range,
			Entry: leasetable.Entry{Owner: s.Owner, Addr: n.owners[s.Owner].Addr, LGN: keyspace.LGN(i + 1)}})
	}
	if err := n.table.Restore(keyspace.LSN(len(segs)), segs); err != nil {
		tb.Fatal(err)
	}
	n.lgn = keyspace.LGN(len(segs))
	return st
}

// BenchmarkStateEncode: one Raft snapshot of the State (Replica.Advance
// takes one every SnapshotEntries entries: rounds that change the State,
// not renewals) with 64 segments per Owner.
func BenchmarkStateEncode(b *testing.B) {
	for _, owners := range []int{100, 1000, 2500, 10000} {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			st := stateOf(b, owners)
			b.ReportAllocs()
			var size int
			for b.Loop() {
				size = len(st.Encode())
			}
			b.ReportMetric(float64(size), "bytes")
			b.ReportMetric(float64(st.Table(protocol.DefaultNamespace).Len()), "segments")
		})
	}
}
