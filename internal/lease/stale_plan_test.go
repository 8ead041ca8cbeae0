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

// TestLastOwnerDrainedGivesUp (rule 13): a plan that names no Owner — the
// namespace's last one drained — is not a stale plan: there is nobody to
// wait for, and the drained Owner's ranges are recalled so that it can say
// goodbye. (Keeping them renewed, as for a plan naming a dead Owner, would
// hold a departing Owner forever.)
func TestLastOwnerDrainedGivesUp(t *testing.T) {
	a := newPeer("a")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 2}, Handover: -1, MembershipEvery: -1}, a)
	now := restartEnd.Add(100 * ms)
	if err := h.c.Drain(now, protocol.DefaultNamespace, "a"); err != nil {
		t.Fatal(err)
	}
	h.deliver(h.c.Ready())
	for i := range 8 {
		now = now.Add(tm.Renew)
		h.tick(now)
		h.send(now.Add(time.Duration(i)), a)
	}
	if len(a.held) != 0 || len(h.table().Owned("a")) != 0 {
		t.Fatalf("the last Owner, drained, still holds %v", a.held)
	}
}
