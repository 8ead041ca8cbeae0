package dashboard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
)

// fakeSource is a Source with a table of its own: owners Owners of
// perOwner ranges each, dealt out at random (seeded), and a status to
// match. It counts the calls the Manager would have answered.
type fakeSource struct {
	mu       sync.Mutex
	segs     []leasetable.Segment // guarded by mu
	lsn      keyspace.LSN         // guarded by mu
	status   Status               // guarded by mu
	statuses int                  // guarded by mu; Status calls
	drains   []string             // guarded by mu; Drain calls, "ns/owner"
	refuse   error                // guarded by mu; what Drain answers, if set
}

var _ Source = (*fakeSource)(nil)

func newFakeSource(seed uint64, owners, perOwner int) *fakeSource {
	r := rand.New(rand.NewPCG(seed, 1))
	n := owners * perOwner
	deal := r.Perm(n)
	width := ^uint64(0)/uint64(n) + 1
	f := &fakeSource{lsn: keyspace.LSN(n)}
	ns := NamespaceStatus{Name: "default", LSN: uint64(n), Ranges: uint32(n), Lookups: 12}
	for i := range owners {
		o := Owner{ID: fmt.Sprintf("owner-%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250+1),
			Incarnation: uint64(1 + r.IntN(5)), Member: true, Ranges: uint32(perOwner),
			Share: float64(perOwner) / float64(n), Load: 50 + 100*r.Float64(), Capacity: 1}
		if i%97 == 0 {
			o.HotKeys = []HotKey{{Key: keyspace.Key(r.Uint64()), Rate: 200 + 300*r.Float64()}}
		}
		ns.Owners = append(ns.Owners, o)
	}
	for i := range n {
		start := keyspace.Key(uint64(i) * width)
		end := keyspace.Key(uint64(i+1) * width)
		if i == n-1 {
			end = 0
		}
		o := ns.Owners[deal[i]%owners]
		f.segs = append(f.segs, leasetable.Segment{Range: keyspace.Range{Start: start, End: end},
			Entry: leasetable.Entry{Owner: o.ID, Addr: o.Addr, LGN: keyspace.LGN(i + 1)}})
	}
	f.status = Status{Epoch: 3, Leader: 2, Namespaces: []NamespaceStatus{ns}, Managers: []Manager{
		{ID: 1, Addr: "10.0.9.1:7400", Role: "follower", Term: 4, Commit: uint64(n) + 40, Applied: uint64(n) + 40},
		{ID: 2, Addr: "10.0.9.2:7400", Role: "leader", Term: 4, Commit: uint64(n) + 40, Applied: uint64(n) + 40},
		{ID: 3, Addr: "10.0.9.3:7400", Role: "follower", Term: 4, Commit: uint64(n) + 38, Applied: uint64(n) + 38},
	}}
	return f
}

func (f *fakeSource) Namespaces() []string { return []string{"default"} }

func (f *fakeSource) Segments(ns string) ([]leasetable.Segment, keyspace.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ns != "default" {
		return nil, 0
	}
	return f.segs, f.lsn
}

func (f *fakeSource) Status(context.Context) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	return f.status, nil
}

func (f *fakeSource) Drain(_ context.Context, ns, owner string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drains = append(f.drains, ns+"/"+owner)
	if f.refuse != nil {
		return "", f.refuse
	}
	return "draining " + owner, nil
}

// set replaces the table, as a Lookup's copy changes.
func (f *fakeSource) set(segs []leasetable.Segment, lsn keyspace.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.segs, f.lsn = segs, lsn
}
