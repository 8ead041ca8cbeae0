package lease

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// desiredOwners lists the owners the desired assignment names, sorted.
func desiredOwners(c *Core) []string {
	var out []string
	for _, s := range c.Desired(protocol.DefaultNamespace) {
		if !slices.Contains(out, s.Owner) {
			out = append(out, s.Owner)
		}
	}
	slices.Sort(out)
	return out
}

// TestMembershipPacing: a membership change is planned at once when none
// was planned in the last MembershipEvery (the leading edge: a lone join is
// served at once), and otherwise at the end of that interval, with every
// change that came meanwhile (the trailing edge), when the driver ticks at
// NextDeadline.
func TestMembershipPacing(t *testing.T) {
	every := 500 * ms // all of it well within a ManagerLease: no Owner falls silent
	ps := []*peer{newPeer("a"), newPeer("b"), newPeer("c"), newPeer("d")}
	h := newHarnessCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: -1, MembershipEvery: every}, ps...)
	a, b, c, d := ps[0], ps[1], ps[2], ps[3]
	check := func(when string, want ...string) {
		t.Helper()
		if got := desiredOwners(h.c); !slices.Equal(got, want) {
			t.Fatalf("%s: the desired assignment names %v, want %v", when, got, want)
		}
	}
	// tickUntil runs the Manager's timers as a driver would, at every
	// NextDeadline up to and including end.
	last := base
	tickUntil := func(end time.Time) {
		t.Helper()
		for d := h.c.NextDeadline(); !d.After(end); d = h.c.NextDeadline() {
			if !d.After(last) {
				t.Fatalf("NextDeadline %v does not advance past the last tick %v", d.Sub(base), last.Sub(base))
			}
			h.tick(d)
			last = d
		}
		h.tick(end)
		last = end
	}

	h.send(at(0), a)
	check("a's join, the first", "a")
	h.send(at(100*ms), b)
	h.send(at(300*ms), c)
	check("b's and c's joins within MembershipEvery of a's", "a")
	tickUntil(at(every - ms))
	check("just before the end of the interval", "a")
	if dl := h.c.NextDeadline(); dl.After(at(every)) {
		t.Fatalf("NextDeadline is %v with a membership change waiting for %v", dl.Sub(base), every)
	}
	tickUntil(at(every))
	check("at the end of the interval", "a", "b", "c")

	// Quiet for a whole interval: the next change is planned at once.
	tickUntil(at(2*every + 250*ms))
	h.send(at(2*every+250*ms), d)
	check("d's join after a quiet interval", "a", "b", "c", "d")
	// A leave right after is paced again.
	req := c.request()
	req.Leaving = true
	h.stepLease(at(2*every+300*ms), req)
	check("c's leave within MembershipEvery of d's join", "a", "b", "c", "d")
	tickUntil(at(3*every + 250*ms - ms))
	check("just before the end of that interval", "a", "b", "c", "d")
	tickUntil(at(3*every + 250*ms))
	check("at the end of that interval", "a", "b", "d")
}

// TestMembershipPacingGrants: the timing seen by Owners. A lone join after
// the restart reservation is granted its ranges in the answer to its first
// request. An Owner joining within MembershipEvery of it gets nothing yet,
// and nothing is recalled for it; at the end of the interval the holder is
// told at once to give the newcomer's share up, and once it has, the
// newcomer is granted it at once. With MembershipEvery negative the join is
// planned, and the recall sent, at once.
func TestMembershipPacingGrants(t *testing.T) {
	for _, every := range []time.Duration{time.Second, -1} {
		a, b := newPeer("a"), newPeer("b")
		h := newHarnessCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: -1, MembershipEvery: every}, a, b)
		join := restartEnd.Add(300 * ms)
		h.tick(join)
		r := h.send(join, a)
		checkGrants(t, h.to(r, "a").Leases, []keyspace.Range{piece(0, 4), piece(1, 4), piece(2, 4), piece(3, 4)}, 0)
		h.send(join.Add(50*ms), a) // acknowledges the grants
		r = h.send(join.Add(100*ms), b)
		recall := join.Add(100 * ms) // when a is told to give b's share up
		if every > 0 {
			if m := h.to(r, "b"); len(m.Leases) != 0 {
				t.Fatalf("b was granted %v before its join was planned", m.Leases)
			}
			for _, m := range r.Owners {
				if m.To == "a" {
					t.Fatalf("a was sent %v before b's join was planned", m.Msg.Leases)
				}
			}
			recall = join.Add(every)
			last := join.Add(100 * ms)
			for now := h.c.NextDeadline(); now.Before(recall); now = h.c.NextDeadline() {
				if !now.After(last) {
					t.Fatalf("NextDeadline %v does not advance past the last step %v", now.Sub(base), last.Sub(base))
				}
				last = now
				if r := h.tick(now); len(r.Owners) != 0 {
					t.Fatalf("every %v: a message at %v, before b's join is planned: %+v", every, now.Sub(base), r.Owners[0])
				}
			}
			if dl := h.c.NextDeadline(); !dl.Equal(recall) {
				t.Fatalf("every %v: NextDeadline %v, want the end of the interval %v", every, dl.Sub(base), recall.Sub(base))
			}
			r = h.tick(recall)
		}
		// a keeps pieces 0 and 2 (Fixed alternates by ID), gives 1 and 3 up.
		if m := h.to(r, "a"); !slices.Equal(ranges(m.Leases), []keyspace.Range{piece(0, 4), piece(2, 4)}) {
			t.Fatalf("every %v: a was sent %v at %v, want pieces 0 and 2 only", every, ranges(m.Leases), recall.Sub(base))
		}
		r = h.send(recall.Add(10*ms), a) // a gives pieces 1 and 3 up
		checkGrants(t, h.to(r, "b").Leases, []keyspace.Range{piece(1, 4), piece(3, 4)}, 4)
	}
}

// TestMembershipEveryDefault: 1 s, or a quarter of Renew when that is
// shorter.
func TestMembershipEveryDefault(t *testing.T) {
	for _, tc := range []struct {
		timing protocol.Timing
		every  time.Duration
		want   time.Duration
	}{
		{protocol.Production(), 0, time.Second},
		{protocol.Fast(), 0, protocol.Fast().Renew / 4},
		{protocol.Fast(), 3 * time.Second, 3 * time.Second},
		{protocol.Fast(), -1, -1},
	} {
		c := NewCore(Settings{Timing: tc.timing, MembershipEvery: tc.every}, base)
		if got := c.membershipEvery(); got != tc.want {
			t.Errorf("MembershipEvery %v with Renew %v: %v, want %v", tc.every, tc.timing.Renew, got, tc.want)
		}
	}
}

// TestDrainingGetsNothingNew: while an Owner's drain waits to be planned
// (a membership change came within MembershipEvery), the desired
// assignment still names it, but a range it gives up is not granted back
// to it; at the end of the interval it goes to the others.
func TestDrainingGetsNothingNew(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: -1, MembershipEvery: time.Second}, a, b)
	// A membership change that moves nothing (Fixed ignores capacities),
	// planned at once: the next one waits until change + 1 s.
	change := restartEnd.Add(50 * ms)
	req := b.request()
	req.Capacity = 2
	h.stepLease(change, req)
	// a asks to drain and gives piece 0 up in the same request.
	req = a.request()
	req.Draining = true
	req.Held = slices.DeleteFunc(req.Held, func(l protocol.Lease) bool { return l.Range == piece(0, 4) })
	r := h.stepLease(change.Add(50*ms), req)
	if m := h.to(r, "a"); !slices.Equal(ranges(m.Leases), []keyspace.Range{piece(2, 4)}) || m.Drain != protocol.DrainActive {
		t.Fatalf("a, draining, was sent %v (drain %v), want piece 2 only, draining", ranges(m.Leases), m.Drain)
	}
	if e := h.entry(piece(0, 4)); e.Owner != "" {
		t.Fatalf("piece 0 is %v while its holder's drain waits to be planned, want free", e)
	}
	r = h.tick(change.Add(time.Second))
	if e := h.entry(piece(0, 4)); e.Owner != "b" {
		t.Fatalf("piece 0 is %v once the drain is planned, want b's", e)
	}
	if m := h.to(r, "a"); len(m.Leases) != 0 {
		t.Fatalf("a was sent %v once its drain is planned, want everything recalled", ranges(m.Leases))
	}
}
