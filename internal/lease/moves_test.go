package lease

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// planned is a core with planned moves on (a Handover of one OwnerLease, the
// default) and four fixed pieces, joined by the peers.
func planned(t *testing.T, ps ...*peer) *harness {
	t.Helper()
	return joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}}, ps...)
}

// handed is the report of a handover of lease l (as held) to p.
func handed(l protocol.Lease, p *peer) protocol.Handed {
	return protocol.Handed{Range: l.Range, LGN: l.LGN, To: p.id, Incarnation: p.inc}
}

// TestPlannedMoveHandsOver: when b joins, a is asked to hand pieces 1 and 3
// over to b instead of having them recalled; it keeps (and renews) them
// meanwhile. A piece a reports handed goes straight to b, marked migrated
// from a's LGN, so no Lookup reports a loss (C§2.1.2).
func TestPlannedMoveHandsOver(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := planned(t, a)
	lsn := h.mark()
	h.add(b)
	now := restartEnd.Add(100 * ms)
	r := h.send(now, b)
	if m := h.to(r, "b"); len(m.Leases) != 0 {
		t.Fatalf("b granted %v while a holds everything", m.Leases)
	}
	m := h.to(r, "a")
	if len(m.Leases) != 4 {
		t.Fatalf("a was sent %v, want its four pieces kept while it hands two over", m.Leases)
	}
	var want []keyspace.Range
	for _, ho := range m.Handovers {
		want = append(want, ho.Range)
		if ho.To != "b" || ho.Addr != b.addr() || ho.Incarnation != b.inc || ho.Within != tm.OwnerLease {
			t.Fatalf("handover %+v, want to b (%s, incarnation %d) within %v", ho, b.addr(), b.inc, tm.OwnerLease)
		}
	}
	if !slices.Equal(want, []keyspace.Range{piece(1, 4), piece(3, 4)}) {
		t.Fatalf("handovers of %v, want pieces 1 and 3", want)
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("asking for a handover changed the table: lost %v", got)
	}

	// a hands piece 1 over and gives it up.
	var p1 protocol.Lease
	var kept []protocol.Lease
	for _, l := range a.held {
		if l.Range == piece(1, 4) {
			p1 = l
		} else {
			kept = append(kept, l)
		}
	}
	req := a.request()
	req.Held, req.Handed = kept, []protocol.Handed{handed(p1, b)}
	r = h.stepLease(now.Add(100*ms), req)
	e := h.entry(piece(1, 4))
	if e.Owner != "b" || !e.Migrated || e.MigratedFrom != p1.LGN {
		t.Fatalf("table on piece 1 = %v, want b, migrated from %d", e, p1.LGN)
	}
	mb := h.to(r, "b")
	if len(mb.Leases) != 1 || mb.Leases[0].Range != piece(1, 4) || !mb.Leases[0].Grant || !mb.Leases[0].Migrated {
		t.Fatalf("b was sent %+v, want a migrated grant of piece 1", mb.Leases)
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a Lookup reports %v lost after a handover", got)
	}

	// a never hands piece 3 over: at the deadline it is recalled, and its
	// loss is reported when it is granted to b.
	deadline := now.Add(tm.OwnerLease)
	h.renewals(now.Add(tm.Renew), deadline.Add(-ms), a, b)
	if e := h.entry(piece(3, 4)); e.Owner != "a" {
		t.Fatalf("piece 3 is %v before the deadline, want still a's", e)
	}
	h.renewals(deadline, deadline.Add(2*tm.Renew), a, b)
	if e := h.entry(piece(3, 4)); e.Owner != "b" || e.Migrated {
		t.Fatalf("piece 3 is %v after the deadline, want b's, not migrated", e)
	}
	if got := h.lostSince(lsn); !slices.Equal(got, []keyspace.Range{piece(3, 4)}) {
		t.Fatalf("a Lookup reports %v lost, want piece 3 only", got)
	}
}

// TestHandedToAnotherRunIsLost: state handed to a run of b that has since
// restarted is gone; the piece is freed, not marked migrated, and Lookups
// report it lost. A report for another LGN than the table's is ignored too.
func TestHandedToAnotherRunIsLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*protocol.Handed)
	}{
		{"an earlier run of the target", func(ho *protocol.Handed) { ho.Incarnation-- }},
		{"another LGN", func(ho *protocol.Handed) { ho.LGN += 100 }},
		{"an owner that is not a member", func(ho *protocol.Handed) { ho.To = "nobody" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPeer("a"), newPeer("b")
			b.inc = 5
			h := planned(t, a)
			h.add(b)
			now := restartEnd.Add(100 * ms)
			h.send(now, b)
			lsn := h.mark()
			var p1 protocol.Lease
			var kept []protocol.Lease
			for _, l := range a.held {
				if l.Range == piece(1, 4) {
					p1 = l
				} else {
					kept = append(kept, l)
				}
			}
			req := a.request()
			ho := handed(p1, b)
			tc.mutate(&ho)
			req.Held, req.Handed = kept, []protocol.Handed{ho}
			h.stepLease(now.Add(100*ms), req)
			if e := h.entry(piece(1, 4)); e.Migrated {
				t.Fatalf("piece 1 is %v: a handover to %s/%d was trusted", e, ho.To, ho.Incarnation)
			}
			if got := h.lostSince(lsn); !slices.Contains(got, piece(1, 4)) {
				t.Fatalf("a Lookup reports %v lost, want piece 1 among them", got)
			}
		})
	}
}

// TestDrainGate: an Owner that asks to drain is excluded from the desired
// assignment and hands everything over; while DrainGate Owners drain, the
// next is told to wait, and an operator's drain is refused with an error
// naming the draining Owners.
func TestDrainGate(t *testing.T) {
	a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 6}, DrainGate: 1}, a, b, c)
	now := restartEnd.Add(100 * ms)
	req := a.request()
	req.Draining = true
	r := h.stepLease(now, req)
	ma := h.to(r, "a")
	if ma.Drain != protocol.DrainActive {
		t.Fatalf("a's drain answered %v, want active", ma.Drain)
	}
	if len(ma.Handovers) != len(a.held) || len(a.held) == 0 {
		t.Fatalf("draining a holds %v and was asked to hand over %v, want all of it", a.held, ma.Handovers)
	}
	for _, ho := range ma.Handovers {
		if ho.To != "b" && ho.To != "c" {
			t.Fatalf("handover %+v to a non-draining owner expected", ho)
		}
	}
	if got := h.c.Members(protocol.DefaultNamespace); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("members %v: a draining Owner is still a member (it is alive)", got)
	}

	req = b.request()
	req.Draining = true
	if mb := h.to(h.stepLease(now.Add(10*ms), req), "b"); mb.Drain != protocol.DrainWaiting || len(mb.Leases) == 0 {
		t.Fatalf("b's drain with the gate full answered %v, leases %v; want waiting, b keeps a share", mb.Drain, mb.Leases)
	}
	err := h.c.Drain(now.Add(20*ms), protocol.DefaultNamespace, "c")
	if !errors.Is(err, ErrGateFull) || !strings.Contains(err.Error(), "(a)") || !strings.Contains(err.Error(), "at most 1") {
		t.Fatalf("Drain(c) = %v, want ErrGateFull naming a and the gate of 1", err)
	}
	if err := h.c.Drain(now, protocol.DefaultNamespace, "nobody"); err == nil || errors.Is(err, ErrGateFull) {
		t.Fatalf("Drain(nobody) = %v, want an unknown-owner error", err)
	}

	// a hands everything over; then the gate lets b through.
	var handedAll []protocol.Handed
	for _, ho := range ma.Handovers {
		to := h.peers[ho.To]
		handedAll = append(handedAll, protocol.Handed{Range: ho.Range, LGN: ho.LGN, To: ho.To, Incarnation: to.inc})
	}
	lsn := h.mark()
	req = a.request()
	req.Held, req.Handed, req.Draining = nil, handedAll, true
	h.stepLease(now.Add(100*ms), req)
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a drained with its state handed over, yet a Lookup reports %v lost", got)
	}
	h.table().Each(func(s leasetable.Segment) bool {
		if s.Entry.Owner == "a" {
			t.Fatalf("a still holds %v after handing everything over", s.Range)
		}
		return true
	})
	// a leaves; b's next request is let through the gate.
	req = a.request()
	req.Leaving = true
	h.stepLease(now.Add(200*ms), req)
	req = b.request()
	req.Draining = true
	if mb := h.to(h.stepLease(now.Add(300*ms), req), "b"); mb.Drain != protocol.DrainActive {
		t.Fatalf("b's drain after a left answered %v, want active", mb.Drain)
	}
}

// TestRacedRequestFreesNothing: the out-of-order path never frees a range
// or clears a reservation. A request that raced a Manager message frees
// nothing by omission or by a goodbye (which names no lease, and could free
// a range the crossing message granted); the Owner repeats its goodbye,
// and the next request in order acts on it. A handover it reports is acted
// on as a migration only — it names the lease handed, and the range goes
// straight to the next Owner — and one that cannot migrate frees nothing.
func TestRacedRequestFreesNothing(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := planned(t, a)
	h.add(b)
	now := restartEnd.Add(100 * ms)
	h.send(now, b) // a is asked to hand pieces 1 and 3 to b
	lsn := h.mark()
	var p1, p3 protocol.Lease
	var kept []protocol.Lease
	for _, l := range a.held {
		switch l.Range {
		case piece(1, 4):
			p1 = l
		case piece(3, 4):
			p3 = l
		case piece(0, 4): // omitted: an omission of a raced request
		default:
			kept = append(kept, l)
		}
	}
	held := func() (n int) {
		h.table().Each(func(s leasetable.Segment) bool {
			if s.Entry.Owner == "a" {
				n++
			}
			return true
		})
		return n
	}
	req := a.request()
	req.AckSeq-- // raced: sent before a heard the Manager's latest message
	toNobody := handed(p3, b)
	toNobody.To = "nobody"
	req.Held, req.Handed = kept, []protocol.Handed{handed(p1, b), toNobody}
	h.stepLease(now.Add(100*ms), req)
	if e := h.entry(piece(1, 4)); e.Owner != "b" || !e.Migrated || e.MigratedFrom != p1.LGN {
		t.Fatalf("piece 1 = %v after a raced handover report, want b's, migrated from %d", e, p1.LGN)
	}
	if e := h.entry(piece(3, 4)); e.Owner != "a" {
		t.Fatalf("piece 3 = %v: a raced handover that cannot migrate freed it", e)
	}
	if e := h.entry(piece(0, 4)); e.Owner != "a" {
		t.Fatalf("piece 0 = %v: a raced request's omission released it", e)
	}
	aHeld := held()
	req = a.request()
	req.AckSeq--
	req.Held, req.Leaving = nil, true
	h.stepLease(now.Add(200*ms), req)
	if n := held(); n != aHeld {
		t.Fatalf("a holds %d segments after a raced goodbye, want the %d it held", n, aHeld)
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a Lookup reports %v lost", got)
	}
	// In order, the goodbye acts.
	req = a.request()
	req.Held, req.Leaving = nil, true
	h.stepLease(now.Add(300*ms), req)
	if n := held(); n != 0 {
		t.Fatalf("a holds %d segments after its goodbye in order", n)
	}
}

// TestFreshSessionHandedActs: after a failover, an Owner's first request
// in the new leader's session releases nothing by omission (it may predate
// the Owner's last message from the old leader), but what it reports handed
// still goes through, migrated. A draining Owner gets no takeover message
// (it should hold nothing), so its first request is such a fresh one.
func TestFreshSessionHandedActs(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := planned(t, a, b)
	now := restartEnd.Add(100 * ms)
	req := a.request()
	req.Draining = true
	ma := h.to(h.stepLease(now, req), "a")
	if len(ma.Handovers) == 0 {
		t.Fatal("a draining owner was asked to hand nothing over")
	}
	// The old leader dies before it hears a's report; a new one takes over.
	h.c = Resume(Settings{Timing: tm, Policy: assign.Fixed{Pieces: 4}, Epoch: epoch, Seed: 1}, h.c.State(), 5<<32, now.Add(time.Second))
	if r := h.ready(); slices.ContainsFunc(r.Owners, func(m OwnerMessage) bool { return m.To == "a" }) {
		t.Fatalf("the takeover sent the draining owner %+v; the test needs its first request to be fresh", r.Owners)
	}
	lsn := h.mark()
	var handedAll []protocol.Handed
	for _, ho := range ma.Handovers {
		handedAll = append(handedAll, protocol.Handed{Range: ho.Range, LGN: ho.LGN, To: "b", Incarnation: b.inc})
	}
	req = a.request()
	req.Held, req.Handed, req.Draining = nil, handedAll, true
	h.stepLease(now.Add(time.Second+100*ms), req)
	for _, ho := range ma.Handovers {
		if e := h.entry(ho.Range); e.Owner != "b" || !e.Migrated || e.MigratedFrom != ho.LGN {
			t.Fatalf("%v = %v after a handover reported in a fresh session, want b's, migrated from %d", ho.Range, e, ho.LGN)
		}
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a Lookup reports %v lost", got)
	}
}

// TestHandoverPastDeadlineStaysRecalled: a piece not handed over by the
// deadline is recalled, and every later message recalls it too. When the
// recall is lost and the Owner's next request races with it, the resend
// must not ask for the handover again with a new deadline: an Owner that
// never hears the recall would keep the lease for good.
func TestHandoverPastDeadlineStaysRecalled(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := planned(t, a)
	h.add(b)
	now := restartEnd.Add(100 * ms)
	r := h.send(now, b)
	if m := h.to(r, "a"); len(m.Handovers) != 2 {
		t.Fatalf("a was asked for handovers %v, want pieces 1 and 3", m.Handovers)
	}
	deadline := now.Add(tm.OwnerLease)
	h.renewals(now.Add(tm.Renew), deadline.Add(-ms), a, b)

	// At the deadline a's renewal is answered with the recall, which is
	// lost.
	if err := h.c.StepLease(deadline, a.request()); err != nil {
		t.Fatal(err)
	}
	lost := h.c.Ready()
	recalls := func(m *protocol.LeaseResponse, when string) {
		t.Helper()
		if len(m.Handovers) != 0 {
			t.Fatalf("%s: a was asked again for handovers %v", when, m.Handovers)
		}
		for _, l := range m.Leases {
			if l.Range == piece(1, 4) || l.Range == piece(3, 4) {
				t.Fatalf("%s: a was sent %v, want pieces 1 and 3 recalled", when, m.Leases)
			}
		}
	}
	recalls(h.to(round{Owners: lost.Owners}, "a"), "the recall at the deadline")

	// a's next request, sent before it heard the recall, races with it: the
	// Manager drops it and resends after a backoff.
	h.stepLease(deadline.Add(10*ms), a.request())
	r = h.tick(deadline.Add(tm.BackoffMax + 10*ms))
	recalls(h.to(r, "a"), "the resend")
	if e := h.entry(piece(3, 4)); e.Owner != "a" {
		t.Fatalf("piece 3 is %v, want still a's until a lets it go", e)
	}
	// Once a has let the pieces go, b gets them.
	h.renewals(deadline.Add(tm.Renew), deadline.Add(3*tm.Renew), a, b)
	for _, i := range []int{1, 3} {
		if e := h.entry(piece(i, 4)); e.Owner != "b" || e.Migrated {
			t.Fatalf("piece %d is %v, want b's, not migrated", i, e)
		}
	}
}
