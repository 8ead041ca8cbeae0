package lease

import (
	"errors"
	"github.com/leasehold/leasehold/protocol"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
)

// TestKilledOwnerForgotten: an Owner that stops answering (kill -9) is a
// member for one ManagerLease, then no member; its ranges go free when
// their reservations end, and its record is forgotten ForgetAfter after
// it was last heard, within one pass of the timers (Renew/4), not before.
func TestKilledOwnerForgotten(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joined(t, 4, a, b)
	last := restartEnd.Add(300 * ms)
	h.send(last, b) // b's last request
	bound := last.Add(ForgetAfter(tm.ManagerLease) + tm.Renew/4)
	var gone time.Time
	for now := last; !now.After(bound.Add(tm.Renew)); now = now.Add(10 * ms) {
		if now.Sub(last)%(tm.Renew) == 0 {
			h.send(now, a)
		}
		if !h.c.NextDeadline().After(now) {
			h.tick(now)
		}
		if _, ok := h.c.State().Owners(protocol.DefaultNamespace)["b"]; !ok && gone.IsZero() {
			gone = now
		}
	}
	switch {
	case gone.IsZero():
		t.Fatalf("b is still recorded %v after its last request (bound %v)", bound.Add(tm.Renew).Sub(last), bound.Sub(last))
	case gone.Before(last.Add(ForgetAfter(tm.ManagerLease))):
		t.Fatalf("b forgotten %v after its last request, before ForgetAfter %v", gone.Sub(last), ForgetAfter(tm.ManagerLease))
	case gone.After(bound):
		t.Fatalf("b forgotten %v after its last request, past the bound %v", gone.Sub(last), bound.Sub(last))
	}
	if got := h.table().Owned("b"); len(got) != 0 {
		t.Fatalf("b forgotten while the table names it on %v", got)
	}
}

// TestForgetRefusedWhileOwed: leasehold forget is refused for a member and
// for an Owner the table still names (an orphan's holder, among others),
// with the reason; it is accepted once the entries have gone free. With
// the rule broken (faults.ForgetHolder) the Owner is forgotten while the
// table names it, and a new run of it, whose session no longer knows the
// old run's entries for orphans, frees them with its first request, before
// their reservations end: the range can be granted while the old process
// still holds it.
func TestForgetRefusedWhileOwed(t *testing.T) {
	for _, broken := range []bool{false, true} {
		a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
		h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: -1, MembershipEvery: -1}, a, b, c)
		h.c.broken.ForgetHolder = broken
		last := restartEnd.Add(300 * ms)
		h.send(last, a)
		h.send(last, b)
		if err := h.c.Forget(last, protocol.DefaultNamespace, "b"); !errors.Is(err, ErrOwnerOwed) || !strings.Contains(err.Error(), "it is a member") {
			t.Fatalf("forget of a member: %v, want ErrOwnerOwed saying it is a member", err)
		}
		// b is killed after its last request. c leaves, and b, still a
		// member, is granted part of c's share: reserved for a ManagerLease
		// from then, past the time b stops being a member.
		leave := c.request()
		leave.Leaving, leave.Held = true, nil
		h.stepLease(last.Add(tm.Renew), leave)
		h.send(last.Add(tm.Renew+ms), a)
		old := h.table().Owned("b")
		silent := last.Add(tm.ManagerLease)
		for now := last.Add(2 * tm.Renew); now.Before(silent); now = now.Add(tm.Renew) {
			h.tick(now)
			h.send(now, a)
		}
		h.tick(silent)
		if len(h.table().Owned("b")) == 0 {
			t.Fatalf("b's entries went free at once; the test needs them reserved")
		}
		err := h.c.Forget(silent, protocol.DefaultNamespace, "b")
		if broken {
			if _, ok := h.c.State().Owners(protocol.DefaultNamespace)["b"]; ok {
				t.Fatalf("broken rule: b still recorded once no member (forget: %v)", err)
			}
			// A new run of b starts a session with no record of the old
			// run's entries: its first request, which lists none, releases
			// them at once, before their reservations end, while the old
			// process may still hold them (b/... was granted at last+Renew,
			// its lease runs to last+Renew+OwnerLease).
			b.restart()
			h.send(silent.Add(ms), b)
			for _, s := range old {
				if e := h.entry(s.Range); e.Owner != "b" || e.LGN != s.Entry.LGN {
					return // the broken rule shows
				}
			}
			t.Fatalf("broken rule: the old run's entries %v survived the new run's first request", old)
		}
		if !errors.Is(err, ErrOwnerOwed) || !strings.Contains(err.Error(), "the lease table still names it") {
			t.Fatalf("forget while the table names b: %v, want ErrOwnerOwed naming the table", err)
		}
		// The reservations end within another ManagerLease; then forget
		// is accepted, and a second one says there is no such Owner.
		end := last.Add(2*tm.Renew + tm.ManagerLease) // before ForgetAfter
		for now := silent.Add(tm.Renew); !now.After(end); now = now.Add(tm.Renew) {
			h.tick(now)
			h.send(now, a)
		}
		if err := h.c.Forget(end, protocol.DefaultNamespace, "b"); err != nil {
			t.Fatalf("forget once b is owed nothing: %v", err)
		}
		if err := h.c.Forget(end, protocol.DefaultNamespace, "b"); !errors.Is(err, ErrUnknownOwner) {
			t.Fatalf("forget of a forgotten owner: %v, want ErrUnknownOwner", err)
		}
	}
}

// TestUndrainFreesGate: a drained Owner holds the maintenance gate while it
// keeps running; the refusal names it and the way out, drain --cancel
// (Undrain) frees the gate, and the Owner is granted its share again.
func TestUndrainFreesGate(t *testing.T) {
	a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 3}, Handover: -1, MembershipEvery: -1}, a, b, c)
	now := restartEnd.Add(100 * ms)
	if err := h.c.Drain(now, protocol.DefaultNamespace, "a"); err != nil {
		t.Fatal(err)
	}
	h.deliver(h.c.Ready())
	for i := range 8 { // a gives its ranges up, the others take them
		now = now.Add(tm.Renew)
		h.tick(now)
		for _, p := range []*peer{a, b, c} {
			h.send(now.Add(time.Duration(i)), p)
		}
	}
	if len(a.held) != 0 || len(h.table().Owned("a")) != 0 {
		t.Fatalf("drained a holds %v", a.held)
	}
	err := h.c.Drain(now, protocol.DefaultNamespace, "b")
	if !errors.Is(err, ErrGateFull) || !strings.Contains(err.Error(), "(a)") || !strings.Contains(err.Error(), "leasehold drain --cancel a") {
		t.Fatalf("drain with the gate full: %v, want ErrGateFull naming a and 'leasehold drain --cancel a'", err)
	}
	if err := h.c.Undrain(now, protocol.DefaultNamespace, "a"); err != nil {
		t.Fatal(err)
	}
	if rec := h.c.State().Owners(protocol.DefaultNamespace)["a"]; rec.Draining || !rec.Member {
		t.Fatalf("a's record after the cancel: %+v, want a member not draining", rec)
	}
	h.deliver(h.c.Ready())
	for i := range 8 {
		now = now.Add(tm.Renew)
		h.tick(now)
		for _, p := range []*peer{a, b, c} {
			h.send(now.Add(time.Duration(i)), p)
		}
	}
	if got, want := keyspace.NewRangeSet(ranges(a.held)...), keyspace.NewRangeSet(piece(0, 3)); !got.Equal(want) {
		t.Fatalf("a holds %v after the cancel, want its share %v", got, want)
	}
	if err := h.c.Drain(now, protocol.DefaultNamespace, "b"); err != nil {
		t.Fatalf("drain of b once the gate is free: %v", err)
	}
	if err := h.c.Undrain(now, protocol.DefaultNamespace, "nobody"); !errors.Is(err, ErrUnknownOwner) {
		t.Fatalf("undrain of an unknown owner: %v", err)
	}
}
