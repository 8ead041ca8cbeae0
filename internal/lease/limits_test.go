package lease

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestOwnerLimit: a namespace records at most MaxOwners Owners. One more is
// refused with ErrLimit naming the limit and its flag, before anything is
// recorded; the Owners recorded go on, a restart of one included.
func TestOwnerLimit(t *testing.T) {
	a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, MaxOwners: 2}, a, b)
	now := restartEnd.Add(100 * ms)
	owners := len(h.c.State().Owners(protocol.DefaultNamespace))
	err := h.c.StepLease(now, c.request())
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "--max-owners") {
		t.Fatalf("a third owner past MaxOwners 2: %v, want ErrLimit naming --max-owners", err)
	}
	if n := len(h.c.State().Owners(protocol.DefaultNamespace)); n != owners {
		t.Fatalf("the refused owner was recorded: %d owners, want %d", n, owners)
	}
	h.send(now, a)
	a.restart()
	if err := h.c.StepLease(now.Add(ms), a.request()); err != nil {
		t.Fatalf("a recorded owner's restart at the limit: %v", err)
	}
}

// TestRangeLimit: MaxRanges is counted before the work. Four Owners of
// capacity 100 joining together (6,400 ring points each) are each refused,
// with ErrLimit naming --max-ranges and the limit, and the table stays
// where it was; four of capacity 4 (256 points each) joining in one round
// are counted together, so the fourth, which would take the table past
// 1,000 with the three before it, is refused, and the table never passes
// 1,000. The Owners admitted renew at the limit.
func TestRangeLimit(t *testing.T) {
	const limit = 1000
	a := newPeer("a")
	h := joinedCfg(t, Settings{Policy: assign.ConsistentHash{}, MaxRanges: limit, Handover: -1}, a)
	now := restartEnd.Add(100 * ms)
	segs := h.table().Len()
	if segs != assign.DefaultVNodes {
		t.Fatalf("the table has %d segments, want %d", segs, assign.DefaultVNodes)
	}
	refused := func(p *peer, capacity float64, err error) {
		t.Helper()
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "--max-ranges") ||
			!strings.Contains(err.Error(), fmt.Sprintf("most allowed, %d", limit)) {
			t.Fatalf("owner %s of capacity %g: %v, want ErrLimit naming --max-ranges and %d", p.id, capacity, err, limit)
		}
		if _, ok := h.c.State().Owners(protocol.DefaultNamespace)[p.id]; ok {
			t.Fatalf("the refused owner %s was recorded", p.id)
		}
	}
	join := func(p *peer, capacity float64) error {
		p.capacity = capacity
		err := h.c.StepLease(now, p.request())
		if err == nil {
			h.add(p)
			h.deliver(h.c.Ready())
		} else {
			p.seq--
		}
		now = now.Add(ms)
		return err
	}
	for _, id := range []string{"b", "c", "d", "e"} {
		p := newPeer(id)
		refused(p, 100, join(p, 100))
	}
	var in []*peer
	for i, id := range []string{"f", "g", "h", "i"} {
		p := newPeer(id)
		err := join(p, 4)
		if i < 3 {
			if err != nil {
				t.Fatalf("owner %s, the %d-th of capacity 4: %v, want admitted (%d ranges in all)", id, i+1, err, segs+(i+1)*256)
			}
			in = append(in, p)
			continue
		}
		refused(p, 4, err)
	}
	// The admitted joins are planned and granted; the table never passes
	// the limit on the way.
	peers := append([]*peer{a}, in...)
	for end := now.Add(40 * tm.Renew); now.Before(end); now = now.Add(tm.Renew) {
		h.tick(now)
		for _, p := range peers {
			h.send(now, p)
			if n := h.table().Len(); n > limit {
				t.Fatalf("the table has %d segments, past MaxRanges %d", n, limit)
			}
		}
	}
	want := segs + 3*256
	if n := h.table().Len(); n != want {
		t.Fatalf("the table has %d segments once the joins are granted, want %d", n, want)
	}
	for _, p := range in {
		if len(p.held) == 0 {
			t.Fatalf("admitted owner %s was granted nothing", p.id)
		}
	}
	// At the limit's neighbourhood: a higher capacity that would pass it
	// is refused, a renewal is not.
	a.capacity = 5
	if err := h.c.StepLease(now, a.request()); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "raises its capacity") {
		t.Fatalf("a higher capacity past MaxRanges: %v, want ErrLimit", err)
	}
	a.seq-- // that request was refused: send its Seq again
	a.capacity = 0
	h.send(now.Add(ms), a)
}

// TestRangeLimitCountsThePolicy: under a policy whose joins add no range
// (Fixed), an Owner is admitted at the limit; the limit bounds what the
// work adds, not the Owners.
func TestRangeLimitCountsThePolicy(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, MaxRanges: 4, Handover: -1}, a)
	if n := h.table().Len(); n != 4 {
		t.Fatalf("the table has %d segments, want 4", n)
	}
	h.add(b)
	h.send(restartEnd.Add(100*ms), b)
}

// TestGrantsFitAMessage: an Owner is granted up to maxOwnerLeases leases,
// so no message to it lists more than it accepts (wire.MaxLeases); the
// rest of the key space stays free.
func TestGrantsFitAMessage(t *testing.T) {
	defer func(m int) { maxOwnerLeases = m }(maxOwnerLeases)
	maxOwnerLeases = 5
	a := newPeer("a")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 16}}, a)
	h.renewals(restartEnd, restartEnd.Add(5*tm.Renew), a)
	if n := len(a.held); n != 5 {
		t.Fatalf("a holds %d leases, want maxOwnerLeases (5)", n)
	}
	r := h.send(restartEnd.Add(6*tm.Renew), a)
	if m := h.to(r, "a"); m != nil && len(m.Leases) > 5 {
		t.Fatalf("a message lists %d leases, over maxOwnerLeases", len(m.Leases))
	}
}

// TestCountStarts: the bound counts the distinct starts of the table's
// segments and of an assignment's.
func TestCountStarts(t *testing.T) {
	tab := leasetable.New(time.Minute)
	tab.Set(base, keyspace.Range{Start: 10, End: 20}, leasetable.Entry{Owner: "a", Addr: "a", LGN: 1})
	// The table: [0,10) free, [10,20) a, [20,∞) free.
	a := assign.Assignment{
		{Range: keyspace.Range{Start: 0, End: 5}, Owner: "x"},
		{Range: keyspace.Range{Start: 5, End: 20}, Owner: "y"},
		{Range: keyspace.Range{Start: 20, End: 30}, Owner: "x"},
		{Range: keyspace.Range{Start: 30}, Owner: "y"},
	}
	for _, tc := range []struct {
		a    assign.Assignment
		want int
	}{
		{nil, 3},
		{a, 5}, // 0, 5, 10, 20, 30
		{a[:0], 3},
	} {
		if got := countStarts(tab, assignmentStarts(tc.a)); got != tc.want {
			t.Errorf("countStarts(table, %v) = %d, want %d", tc.a, got, tc.want)
		}
		if got := countStarts(tab, mergeStarts(tc.a, a)); got != 5 {
			t.Errorf("countStarts(table, %v ∪ %v) = %d, want 5", tc.a, a, got)
		}
	}
}

// TestRangeLimitReturningOwner: an Owner that fell silent and returns is
// counted by what its ring points add: its ranges went to another Owner as
// they were, so the table still starts at its points, and it is admitted
// with the table at the limit.
func TestRangeLimitReturningOwner(t *testing.T) {
	ids := []string{"a", "b", "c"}
	slices.SortFunc(ids, func(x, y string) int { return cmp.Compare(assign.VNodeKey(x, 0), assign.VNodeKey(y, 0)) })
	ps := []*peer{newPeer(ids[0]), newPeer(ids[1]), newPeer(ids[2])}
	back := ps[2] // the last point on the ring: its range goes to ps[1]
	h := joinedCfg(t, Settings{Policy: assign.ConsistentHash{VNodes: 1}, MaxRanges: 3, Handover: -1}, ps...)
	if n := h.table().Len(); n != 3 {
		t.Fatalf("the table has %d segments, want 3", n)
	}
	now := restartEnd.Add(100 * ms)
	h.renewals(now, now.Add(3*tm.ManagerLease), ps[0], ps[1]) // back falls silent, and its range moves
	now = now.Add(3*tm.ManagerLease + tm.Renew)
	if got := h.c.Members(protocol.DefaultNamespace); slices.Contains(got, back.id) {
		t.Fatalf("members %v: %s still a member after falling silent", got, back.id)
	}
	if n := h.table().Len(); n != 3 {
		t.Fatalf("the table has %d segments once %s's range moved, want 3", n, back.id)
	}
	back.restart()
	if err := h.c.StepLease(now, back.request()); err != nil {
		t.Fatalf("%s returning, its point a start of the table at MaxRanges: %v, want admitted", back.id, err)
	}
}
