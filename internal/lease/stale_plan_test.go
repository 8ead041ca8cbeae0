package lease

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// TestNoRecallForDeadTarget (rule 13): b joins and a is asked to hand two
// pieces over to it; b dies before doing anything, and the membership
// round that places its pieces anew is MembershipEvery away. Meanwhile the
// plan still names b, which cannot take them: a keeps renewing them, and
// nothing is lost. (Recalling them would free them with their state lost,
// to be granted to a again: in a namespace with standbys, ranges their
// holder kept in sync elsewhere — the zone whose first dead Owner's ranges
// were planned onto the second, dead too.)
func TestNoRecallForDeadTarget(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: 10 * time.Second,
		MembershipEvery: 3 * time.Second}, a)
	h.add(b)
	join := at(3*time.Second + 100*ms) // past the first round's MembershipEvery
	h.renewals(restartEnd.Add(tm.Renew), join.Add(-tm.Renew), a)
	r := h.send(join, b)
	if m := h.to(r, "a"); len(m.Handovers) != 2 {
		t.Fatalf("a was asked for handovers %v, want two to b", m.Handovers)
	}
	lsn := h.mark()
	all := keyspace.NewRangeSet(keyspace.Range{}) // End 0: the whole key space
	dead := join.Add(tm.ManagerLease)
	window := false
	for now := join.Add(tm.Renew); now.Before(join.Add(5 * time.Second)); now = now.Add(tm.Renew) {
		h.tick(now)
		h.send(now, a)
		o := h.c.ns[protocol.DefaultNamespace].owners["b"]
		if !now.Before(dead) && now.Before(join.Add(3*time.Second)) {
			if o.member {
				t.Fatalf("%v: b is still a member, past its ManagerLease", now.Sub(base))
			}
			window = true
		}
		var held keyspace.RangeSet
		for _, l := range a.held {
			held = held.Add(l.Range)
		}
		if !held.Equal(all) {
			t.Fatalf("%v: a holds %v, not everything: a piece planned for dead b was recalled", now.Sub(base), held.Ranges())
		}
	}
	if !window {
		t.Fatal("no request of a fell between b's death and the next membership round")
	}
	if lost := h.lostSince(lsn); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
}
