package lease

import (
	"reflect"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// compactRequest is p's next request in the compact form: p holds exactly
// what the message it acknowledges listed. The caller knows it does.
func compactRequest(p *peer) *protocol.LeaseRequest {
	req := p.request()
	req.Held, req.HeldAsAcked = nil, true
	return req
}

// raw returns the single message r holds for owner id, as sent.
func raw(t *testing.T, r round, id string) *protocol.LeaseResponse {
	t.Helper()
	var out []*protocol.LeaseResponse
	for _, m := range r.Owners {
		if m.To == id {
			out = append(out, m.Msg)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d messages to %q, want 1", len(out), id)
	}
	return out[0]
}

// fullList fails t unless m lists its leases in full.
func fullList(t *testing.T, m *protocol.LeaseResponse, why string) {
	t.Helper()
	if m.RenewHeld || len(m.Leases) == 0 {
		t.Fatalf("%s: RenewHeld %v with %d leases, want the list in full", why, m.RenewHeld, len(m.Leases))
	}
}

// renewsHeld fails t unless m is the compact renewal of request ack.
func renewsHeldOf(t *testing.T, m *protocol.LeaseResponse, ack uint64) {
	t.Helper()
	if !m.RenewHeld || len(m.Leases) != 0 || m.AckSeq != ack {
		t.Fatalf("answer RenewHeld %v, %d leases, AckSeq %d; want the compact renewal of request %d",
			m.RenewHeld, len(m.Leases), m.AckSeq, ack)
	}
}

// TestCompactSteadyState: once the Owner holds what the last message listed,
// its renewals say so by HeldAsAcked, and an answer that renews exactly
// what it held says so by RenewHeld. Each renews as the full form would:
// the table does not change and the leases stay reserved.
func TestCompactSteadyState(t *testing.T) {
	a := newPeer("a")
	h := granted(t, Settings{Policy: fixed4, Handover: -1}, a)
	lsn, held := h.table().LSN(), slices.Clone(a.held)

	// The answer to the grants' acknowledgement renews exactly what the
	// request held: compact, though the request listed the set in full.
	now := restartEnd.Add(100 * ms)
	renewsHeldOf(t, raw(t, h.send(now, a), "a"), a.seq)

	// From then on both sides are compact, for several ManagerLeases.
	for end := now.Add(3 * tm.ManagerLease); now.Before(end); {
		now = now.Add(tm.Renew)
		h.tick(now)
		req := compactRequest(a)
		renewsHeldOf(t, raw(t, h.stepLease(now, req), "a"), req.Seq)
		if !slices.Equal(a.held, held) {
			t.Fatalf("at %v a holds %v, want %v", now, a.held, held)
		}
	}
	if got := h.table().LSN(); got != lsn {
		t.Fatalf("the table changed under compact renewals: LSN %d → %d", lsn, got)
	}
	for _, l := range held {
		if e := h.entry(l.Range); e.Owner != "a" || e.LGN != l.LGN {
			t.Fatalf("table on %v = %+v, want a/%d: the reservation was not extended", l.Range, e, l.LGN)
		}
	}
}

var fixed4 = assign.Fixed{Pieces: 4}

// TestCompactFallsBackToFull: a message lists its leases in full whenever
// the list is not exactly the renewal of what the request held: grants
// (until acknowledged), a recall, and answers to a request whose Held the
// Manager does not know.
func TestCompactFallsBackToFull(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := newHarnessCfg(t, Settings{Policy: fixed4, Handover: -1}, a)
	h.renewals(base, restartEnd.Add(-1), a)
	grants := raw(t, h.tick(restartEnd), "a")
	fullList(t, grants, "grants")

	// a's next request raced the grants, yet lists them (an Owner takes up
	// the grants of a raced message): the resend repeats them as grants,
	// though the list equals what the request held.
	req := a.request()
	req.AckSeq = grants.Seq - 1
	h.stepLease(restartEnd.Add(50*ms), req)
	resend := raw(t, h.tick(restartEnd.Add(50*ms+tm.BackoffMax)), "a")
	fullList(t, resend, "a repeat of unacknowledged grants")
	if slices.ContainsFunc(resend.Leases, func(l protocol.Lease) bool { return !l.Grant }) {
		t.Fatalf("repeat %+v lists a renewal, want only grants", resend.Leases)
	}

	now := restartEnd.Add(100 * ms)
	h.send(now, a)
	h.add(b)
	// b joins: the push to a recalls pieces 1 and 3, listing the rest.
	r := h.send(now.Add(100*ms), b)
	fullList(t, raw(t, r, "a"), "a recall")

	// a acknowledges the recall in the compact form; the answer renews
	// what it holds, compactly again.
	req = compactRequest(a)
	r = h.stepLease(now.Add(200*ms), req)
	renewsHeldOf(t, raw(t, r, "a"), req.Seq)
	fullList(t, raw(t, r, "b"), "b's grants")

	// A raced compact request (it acknowledges an older message) says
	// nothing the Manager can expand: the resend lists the set in full.
	req = compactRequest(a)
	req.AckSeq--
	if r := h.stepLease(now.Add(300*ms), req); len(r.Owners) != 0 {
		t.Fatalf("a raced request was answered: %+v", r.Owners)
	}
	resend = raw(t, h.tick(now.Add(300*ms+tm.BackoffMax)), "a")
	if resend.AckSeq != req.Seq {
		t.Fatalf("resend acknowledges %d, want %d", resend.AckSeq, req.Seq)
	}
	if resend.RenewHeld {
		t.Fatalf("resend after a raced compact request says RenewHeld: the Manager does not know what it held")
	}
}

// TestCompactReleasesAsFull: an acknowledgement of a recall in the compact
// form releases exactly what the same acknowledgement in full does, and
// the next Owner is granted the same.
func TestCompactReleasesAsFull(t *testing.T) {
	run := func(compact bool) (round, []keyspace.Range) {
		a, b := newPeer("a"), newPeer("b")
		h := joined(t, 4, a)
		h.add(b)
		h.send(restartEnd.Add(300*ms), a)
		h.send(restartEnd.Add(400*ms), b) // recalls pieces 1 and 3 from a
		if got, want := ranges(a.held), []keyspace.Range{piece(0, 4), piece(2, 4)}; !slices.Equal(got, want) {
			t.Fatalf("a holds %v after the recall, want %v", got, want)
		}
		req := a.request()
		if compact {
			req.Held, req.HeldAsAcked = nil, true
		}
		r := h.stepLease(restartEnd.Add(500*ms), req)
		var freed []keyspace.Range
		for _, s := range h.table().Segments() {
			if s.Entry.Owner != "a" {
				freed = append(freed, s.Range)
			}
		}
		return r, freed
	}
	fullRound, fullOwned := run(false)
	compactRound, compactOwned := run(true)
	checkGrants(t, raw(t, compactRound, "b").Leases, []keyspace.Range{piece(1, 4), piece(3, 4)}, 4)
	if !reflect.DeepEqual(raw(t, compactRound, "b"), raw(t, fullRound, "b")) {
		t.Fatalf("b is told %+v after the compact acknowledgement, %+v after the full one",
			raw(t, compactRound, "b"), raw(t, fullRound, "b"))
	}
	if !slices.Equal(compactOwned, fullOwned) {
		t.Fatalf("not a's after the compact acknowledgement: %v; after the full one: %v", compactOwned, fullOwned)
	}
	if !reflect.DeepEqual(compactRound.Changes, fullRound.Changes) {
		t.Fatalf("the table changes %+v after the compact acknowledgement, %+v after the full one",
			compactRound.Changes, fullRound.Changes)
	}
}

// TestCompactUnknownReleasesNothing: a compact request the Manager cannot
// expand — it acknowledges a message this session did not send — releases
// nothing, even when it is heard: not releasing is always safe, and the
// answer lists the set in full, which the next request can acknowledge.
func TestCompactUnknownReleasesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  func(a *peer) uint64
	}{
		{"acknowledges the forgotten session's message", func(a *peer) uint64 { return a.ack }},
		{"acknowledges no message", func(*peer) uint64 { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newPeer("a")
			h := joined(t, 4, a)
			now := restartEnd.Add(300 * ms)
			h.send(now, a)
			lsn := h.table().LSN()
			// The session goes — forgotten while the table still names a,
			// which no real run has, so that a wrong expansion would
			// release a's ranges — and a's next request is the first of
			// a fresh session: heard, whatever it acknowledges.
			delete(h.c.ns[protocol.DefaultNamespace].owners, "a")
			req := compactRequest(a)
			req.AckSeq = tc.ack(a)
			r := h.stepLease(now.Add(100*ms), req)
			if got := h.table().LSN(); got != lsn {
				t.Fatalf("the table changed on an unexpandable compact request: LSN %d → %d", lsn, got)
			}
			m := raw(t, r, "a")
			fullList(t, m, "the answer to an unexpandable compact request")
			if got, want := ranges(m.Leases), ranges(a.held); !slices.Equal(got, want) {
				t.Fatalf("answer lists %v, want %v renewed", got, want)
			}
		})
	}
	t.Run("new leader", func(t *testing.T) {
		a := newPeer("a")
		h := joined(t, 4, a)
		now := restartEnd.Add(300 * ms)
		h.send(now, a)
		// A new leader resumes the state; a's first request to it
		// acknowledges the old leader's message.
		// Its first push to a is lost.
		h.c = Resume(h.c.cfg, h.c.State(), 1<<32, now.Add(50*ms))
		h.c.Ready()
		lsn := h.table().LSN()
		if r := h.stepLease(now.Add(100*ms), compactRequest(a)); len(r.Owners) != 0 {
			t.Fatalf("a request that raced the new leader's push was answered: %+v", r.Owners)
		}
		if got := h.table().LSN(); got != lsn {
			t.Fatalf("the table changed on a compact request to a new leader: LSN %d → %d", lsn, got)
		}
		fullList(t, raw(t, h.tick(now.Add(100*ms+tm.BackoffMax)), "a"), "the new leader's resend")
		// a heard the resend: its compact form is known now.
		req := compactRequest(a)
		renewsHeldOf(t, raw(t, h.stepLease(now.Add(200*ms), req), "a"), req.Seq)
		if got := h.table().LSN(); got != lsn {
			t.Fatalf("the table changed: LSN %d → %d", lsn, got)
		}
	})
}
