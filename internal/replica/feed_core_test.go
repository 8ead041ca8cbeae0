package replica

// The Feed's tests against a live Core: a Manager core with a few
// well-behaved Owners (the harness of internal/lease's core tests, with a
// Feed beside it) whose table changes the Feed pushes to its Lookups.

import (
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/internal/lease"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// base is the fixed start of every test clock: the Manager starts here.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

const ms = time.Millisecond

// tm is the timing of every test: Fast, whose numbers the comments quote
// (ManagerLease 2.2 s, Renew 500 ms, backoff 5–50 ms).
var tm = protocol.Fast()

const epoch = 3

// restartEnd is when the Manager's restart reservation ends.
var restartEnd = at(tm.ManagerLease)

// piece returns piece i of assign.Fixed{Pieces: n}.
func piece(i, n int) keyspace.Range {
	return assign.Fixed{Pieces: n}.Assign([]assign.Member{{ID: "x"}})[i].Range
}

// peer is a well-behaved Owner reduced to its messages: it takes every
// response that answers its latest request, and lists what it took.
type peer struct {
	id   string
	inc  uint64
	seq  uint64 // last request sent
	ack  uint64 // last response heard
	held []protocol.Lease
	// sentHeld is the Held of each request, to expand a response that
	// says RenewHeld.
	sentHeld map[uint64][]protocol.Lease
	capacity float64 // in every request
}

func newPeer(id string) *peer { return &peer{id: id, inc: 1} }

func (p *peer) addr() string { return p.id + ":7000" }

// request builds p's next request.
func (p *peer) request() *protocol.LeaseRequest {
	p.seq++
	if p.sentHeld == nil {
		p.sentHeld = map[uint64][]protocol.Lease{}
	}
	p.sentHeld[p.seq] = slices.Clone(p.held)
	return &protocol.LeaseRequest{
		Namespace: protocol.DefaultNamespace, Owner: p.id, Addr: p.addr(), Incarnation: p.inc,
		Seq: p.seq, AckEpoch: epoch, AckSeq: p.ack, Held: slices.Clone(p.held), Capacity: p.capacity,
	}
}

// expand returns m with its complete lease set: a RenewHeld response lists
// the Held of the request it acknowledges. It returns nil if p did not send
// that request.
func (p *peer) expand(m *protocol.LeaseResponse) *protocol.LeaseResponse {
	if !m.RenewHeld {
		return m
	}
	held, ok := p.sentHeld[m.AckSeq]
	if !ok || m.Incarnation != p.inc {
		return nil
	}
	full := *m
	full.Leases, full.RenewHeld = slices.Clone(held), false
	return &full
}

// take handles a response as an Owner would (without refusals).
func (p *peer) take(m *protocol.LeaseResponse) {
	if m.Incarnation != p.inc || m.Seq <= p.ack {
		return
	}
	if m = p.expand(m); m == nil {
		return // a renewal of a request p does not know: as if lost
	}
	p.ack = m.Seq
	if m.AckSeq != p.seq {
		return // raced
	}
	p.held = nil
	for _, l := range m.Leases {
		p.held = append(p.held, protocol.Lease{Range: l.Range, LGN: l.LGN})
	}
}

// restart makes p a new incarnation that holds nothing.
func (p *peer) restart() {
	p.inc++
	p.seq, p.ack, p.held, p.sentHeld = 0, 0, nil, nil
}

type harness struct {
	t     *testing.T
	c     *lease.Core
	f     *Feed // Lookups served from the core's own state
	peers map[string]*peer
}

// round is what one step made the Manager send.
type round struct {
	Owners  []lease.OwnerMessage
	Lookups []LookupMessage
}

// newHarness starts a Manager core whose planned moves are off: ranges move
// by recall, as the tests of this file expect (moves_test.go has the
// handovers).
func newHarness(t *testing.T, policy assign.Policy, peers ...*peer) *harness {
	t.Helper()
	return newHarnessCfg(t, lease.Settings{Policy: policy, Handover: -1}, peers...)
}

func newHarnessCfg(t *testing.T, cfg lease.Settings, peers ...*peer) *harness {
	t.Helper()
	cfg.Timing, cfg.Epoch, cfg.Seed = tm, epoch, 1
	h := &harness{t: t, c: lease.NewCore(cfg, base), peers: map[string]*peer{}}
	h.f = NewFeed(h.c.State(), tm)
	for _, p := range peers {
		h.peers[p.id] = p
	}
	return h
}

// deliver hands every owner message in r to its peer.
func (h *harness) deliver(r lease.Round) round {
	for _, m := range r.Owners {
		if m.Msg.Owner != m.To {
			h.t.Fatalf("message to %q addressed to owner %q", m.To, m.Msg.Owner)
		}
		if p := h.peers[m.To]; p != nil {
			p.take(m.Msg)
		}
	}
	h.f.Push()
	return round{Owners: r.Owners, Lookups: h.f.Ready()}
}

// ready returns what the Manager has to send.
func (h *harness) ready() round {
	h.f.Push()
	return round{Owners: h.c.Ready().Owners, Lookups: h.f.Ready()}
}

// send has p send its next request at now and delivers the answers.
func (h *harness) send(now time.Time, p *peer) round {
	h.t.Helper()
	return h.stepLease(now, p.request())
}

func (h *harness) stepLease(now time.Time, req *protocol.LeaseRequest) round {
	h.t.Helper()
	if p := h.peers[req.Owner]; p != nil && p.inc == req.Incarnation && !req.HeldAsAcked {
		// What was sent, which a test may have changed after request().
		if p.sentHeld == nil {
			p.sentHeld = map[uint64][]protocol.Lease{}
		}
		p.sentHeld[req.Seq] = slices.Clone(req.Held)
	}
	if err := h.c.StepLease(now, req); err != nil {
		h.t.Fatalf("StepLease(%v, %+v) = %v", now, *req, err)
	}
	return h.deliver(h.c.Ready())
}

// tick runs the Manager's timers at now and delivers what it sends.
func (h *harness) tick(now time.Time) round {
	h.c.Tick(now)
	return h.deliver(h.c.Ready())
}

// renewals has every peer send a request at from, from+Renew, … up to and
// including to, ticking the Manager before each round.
func (h *harness) renewals(from, to time.Time, ps ...*peer) {
	h.t.Helper()
	for now := from; !now.After(to); now = now.Add(tm.Renew) {
		h.tick(now)
		for _, p := range ps {
			h.send(now, p)
		}
	}
}

// to returns the single message r holds for owner id.
func (h *harness) to(r round, id string) *protocol.LeaseResponse {
	h.t.Helper()
	var out []*protocol.LeaseResponse
	for _, m := range r.Owners {
		if m.To == id {
			out = append(out, m.Msg)
		}
	}
	if len(out) != 1 {
		h.t.Fatalf("%d messages to %q in %+v, want 1", len(out), id, r.Owners)
	}
	if p := h.peers[id]; p != nil && out[0].RenewHeld {
		// The complete set, as the peer reads it.
		full := p.expand(out[0])
		if full == nil {
			h.t.Fatalf("message to %q renews the Held of request %d, which it did not send", id, out[0].AckSeq)
		}
		return full
	}
	return out[0]
}

func (h *harness) table() *leasetable.Table { return h.c.Table(protocol.DefaultNamespace) }

// entry returns the table's entry on r, failing unless r is one segment.
func (h *harness) entry(r keyspace.Range) leasetable.Entry {
	h.t.Helper()
	segs := h.table().Overlapping(r)
	if len(segs) != 1 {
		h.t.Fatalf("table on %v is %v, want one entry", r, segs)
	}
	return segs[0].Entry
}

// ranges lists the ranges of leases.
func ranges(ls []protocol.Lease) []keyspace.Range {
	var out []keyspace.Range
	for _, l := range ls {
		out = append(out, l.Range)
	}
	return out
}

// checkGrants fails t unless ls are exactly fresh grants of want, with LGNs
// above after and distinct.
func checkGrants(t *testing.T, ls []protocol.Lease, want []keyspace.Range, after keyspace.LGN) {
	t.Helper()
	if got := ranges(ls); !slices.Equal(got, want) {
		t.Fatalf("leases on %v, want %v", got, want)
	}
	seen := map[keyspace.LGN]bool{}
	for _, l := range ls {
		if !l.Grant || l.LGN <= after || seen[l.LGN] {
			t.Fatalf("lease %+v: want a grant with a fresh LGN above %d, distinct from %v", l, after, seen)
		}
		seen[l.LGN] = true
	}
}

// joined starts a harness whose peers join at base, renew until the
// restart reservation ends and are then granted their desired ranges.
func joined(t *testing.T, pieces int, ps ...*peer) *harness {
	t.Helper()
	return joinedCfg(t, lease.Settings{Policy: assign.Fixed{Pieces: pieces}, Handover: -1}, ps...)
}

func joinedCfg(t *testing.T, cfg lease.Settings, ps ...*peer) *harness {
	t.Helper()
	h := granted(t, cfg, ps...)
	for _, p := range ps {
		// Acknowledge the grants: until then every message repeats them.
		h.send(restartEnd, p)
	}
	return h
}

// granted is joinedCfg up to the first grants, which the peers have taken
// but not yet acknowledged.
func granted(t *testing.T, cfg lease.Settings, ps ...*peer) *harness {
	t.Helper()
	h := newHarnessCfg(t, cfg, ps...)
	h.renewals(base, restartEnd.Add(-1), ps...)
	h.tick(restartEnd)
	for _, p := range ps {
		if len(p.held) == 0 {
			t.Fatalf("joined: %s granted nothing at the end of the restart reservation", p.id)
		}
	}
	return h
}

// lookupMsgs returns r's messages to lookup sessions, by session.
func lookupMsgs(r round) map[uint64][]*protocol.SyncResponse {
	out := map[uint64][]*protocol.SyncResponse{}
	for _, m := range r.Lookups {
		out[m.To] = append(out[m.To], m.Msg)
	}
	return out
}

func TestStepSync(t *testing.T) {
	a := newPeer("a")
	h := joined(t, 4, a)
	tab := h.table()
	lsn := tab.LSN()
	if lsn < 4 {
		t.Fatalf("LSN %d after four grants", lsn)
	}
	now := restartEnd.Add(100 * ms)

	tests := []struct {
		name     string
		req      protocol.SyncRequest
		snapshot bool
		from     keyspace.LSN
	}{
		{"new lookup", protocol.SyncRequest{ID: 1}, true, 0},
		{"copy of another epoch", protocol.SyncRequest{ID: 2, Epoch: epoch - 1, LSN: lsn}, true, lsn},
		{"copy of a later epoch", protocol.SyncRequest{ID: 3, Epoch: epoch + 1, LSN: lsn}, true, lsn},
		{"two changes behind", protocol.SyncRequest{ID: 4, Epoch: epoch, LSN: lsn - 2}, false, lsn - 2},
		{"up to date", protocol.SyncRequest{ID: 5, Epoch: epoch, LSN: lsn}, false, lsn},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Namespace = protocol.DefaultNamespace
			session := uint64(100 + i)
			if err := h.f.StepSync(now, session, &req); err != nil {
				t.Fatal(err)
			}
			msgs := lookupMsgs(h.ready())[session]
			if len(msgs) != 1 {
				t.Fatalf("%d answers, want 1", len(msgs))
			}
			m := msgs[0]
			if m.ID != req.ID || m.Epoch != epoch || m.Namespace != protocol.DefaultNamespace {
				t.Fatalf("answer ID %d epoch %d namespace %q, want %d %d %q", m.ID, m.Epoch, m.Namespace, req.ID, epoch, protocol.DefaultNamespace)
			}
			u := m.Update
			if u.Snapshot != tc.snapshot || u.To != lsn {
				t.Fatalf("update snapshot=%v To=%d, want snapshot=%v To=%d", u.Snapshot, u.To, tc.snapshot, lsn)
			}
			if tc.snapshot {
				if !slices.Equal(u.Segments, tab.Segments()) {
					t.Fatalf("snapshot %v, want %v", u.Segments, tab.Segments())
				}
				return
			}
			if u.From != tc.from || !slices.Equal(u.Changes, tab.Since(tc.from).Changes) || len(u.Changes) != int(lsn-tc.from) {
				t.Fatalf("delta %+v, want the %d changes after %d", u, lsn-tc.from, tc.from)
			}
		})
	}

	t.Run("unknown namespace", func(t *testing.T) {
		err := h.f.StepSync(now, 9, &protocol.SyncRequest{Namespace: "nope", ID: 1})
		if !errors.Is(err, lease.ErrUnknownNamespace) || !strings.Contains(err.Error(), `"nope"`) {
			t.Fatalf("StepSync = %v, want ErrUnknownNamespace naming \"nope\"", err)
		}
		if r := h.ready(); len(r.Lookups) != 0 {
			t.Fatalf("answered %+v", r.Lookups)
		}
	})
}

// TestPushes: after a table change, every subscribed Lookup gets a push
// (ID 0) of the changes since what it was last sent.
func TestPushes(t *testing.T) {
	a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
	h := joined(t, 4, a)
	now := restartEnd.Add(100 * ms)
	sync := func(session uint64, lsn keyspace.LSN) {
		t.Helper()
		if err := h.f.StepSync(now, session, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1, Epoch: epoch, LSN: lsn}); err != nil {
			t.Fatal(err)
		}
		h.ready()
	}
	l1 := h.table().LSN()
	sync(7, l1)

	// A change the Lookup has not seen: b joins and a acknowledges.
	h.peers["b"], h.peers["c"] = b, c
	if r := h.send(now.Add(100*ms), b); len(r.Lookups) != 0 {
		t.Fatalf("b's join changed no entry but pushed %+v", r.Lookups)
	}
	if r := h.send(now.Add(200*ms), a); len(r.Lookups) != 1 {
		t.Fatalf("pushes %+v, want one to session 7", r.Lookups)
	} else {
		checkPush(t, r.Lookups[0], 7, h.table().Since(l1))
	}
	l2 := h.table().LSN()
	if l2 == l1 {
		t.Fatalf("the recall changed nothing")
	}

	// A second Lookup subscribes now; the next change goes to both, from l2.
	sync(8, l2)
	h.send(now.Add(300*ms), c)
	r := h.send(now.Add(400*ms), a)
	r2 := h.send(now.Add(400*ms), b) // b's acknowledgement frees one more piece
	all := append(r.Lookups, r2.Lookups...)
	if len(all) < 2 {
		t.Fatalf("pushes %+v, want at least one to each of 7 and 8", all)
	}
	got := map[uint64]keyspace.LSN{7: l2, 8: l2}
	for _, m := range all {
		from, ok := got[m.To]
		if !ok {
			t.Fatalf("push to unknown session %d", m.To)
		}
		if m.Msg.ID != 0 || m.Msg.Update.From != from || m.Msg.Update.Snapshot {
			t.Fatalf("push to %d: ID %d From %d, want ID 0 From %d", m.To, m.Msg.ID, m.Msg.Update.From, from)
		}
		got[m.To] = m.Msg.Update.To
	}
	for s, to := range got {
		if to != h.table().LSN() {
			t.Fatalf("session %d pushed up to %d, want %d", s, to, h.table().LSN())
		}
	}

	// A closed session gets no more pushes.
	h.f.Close(protocol.DefaultNamespace, 8)
	lsn := h.table().LSN()
	c.held = nil // c gives its ranges up: the release frees them, a change
	r = h.send(now.Add(500*ms), c)
	if h.table().LSN() == lsn {
		t.Fatalf("the release changed nothing")
	}
	if len(r.Lookups) != 1 || r.Lookups[0].To != 7 {
		t.Fatalf("pushes %+v, want one to session 7 only", r.Lookups)
	}
	checkPush(t, r.Lookups[0], 7, h.table().Since(lsn))
}

func checkPush(t *testing.T, m LookupMessage, to uint64, want leasetable.Update) {
	t.Helper()
	if m.To != to || m.Msg.ID != 0 || m.Msg.Epoch != epoch || m.Msg.Namespace != protocol.DefaultNamespace {
		t.Fatalf("push %+v to %d, want ID 0 epoch %d to %d", *m.Msg, m.To, epoch, to)
	}
	if fmt.Sprint(m.Msg.Update) != fmt.Sprint(want) {
		t.Fatalf("push update %+v, want %+v", m.Msg.Update, want)
	}
}
