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
	c     *Core
	peers map[string]*peer
	seen  keyspace.LSN // the table's LSN at the end of the last round
}

// round is what one step made the Manager send to its Owners, and the
// changes of the default namespace's table it made: what the Lookups
// would be pushed (internal/replica's Feed serves them).
type round struct {
	Owners  []OwnerMessage
	Changes []leasetable.Change
}

// newHarness starts a Manager core whose planned moves are off: ranges move
// by recall, as the tests of this file expect (moves_test.go has the
// handovers).
func newHarness(t *testing.T, policy assign.Policy, peers ...*peer) *harness {
	t.Helper()
	return newHarnessCfg(t, Settings{Policy: policy, Handover: -1}, peers...)
}

func newHarnessCfg(t *testing.T, cfg Settings, peers ...*peer) *harness {
	t.Helper()
	cfg.Timing, cfg.Epoch, cfg.Seed = tm, epoch, 1
	h := &harness{t: t, c: NewCore(cfg, base), peers: map[string]*peer{}}
	for _, p := range peers {
		h.peers[p.id] = p
	}
	return h
}

// deliver hands every owner message in r to its peer.
func (h *harness) deliver(r Round) round {
	for _, m := range r.Owners {
		if m.Msg.Owner != m.To {
			h.t.Fatalf("message to %q addressed to owner %q", m.To, m.Msg.Owner)
		}
		if p := h.peers[m.To]; p != nil {
			p.take(m.Msg)
		}
	}
	return round{Owners: r.Owners, Changes: h.changes()}
}

// changes returns the changes of the default namespace's table since the
// last round.
func (h *harness) changes() []leasetable.Change {
	t := h.table()
	if t.LSN() == h.seen {
		return nil
	}
	u := t.Since(h.seen)
	h.seen = t.LSN()
	return u.Changes
}

// ready returns what the Manager has to send.
func (h *harness) ready() round {
	return round{Owners: h.c.Ready().Owners, Changes: h.changes()}
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
	return joinedCfg(t, Settings{Policy: assign.Fixed{Pieces: pieces}, Handover: -1}, ps...)
}

func joinedCfg(t *testing.T, cfg Settings, ps ...*peer) *harness {
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
func granted(t *testing.T, cfg Settings, ps ...*peer) *harness {
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

// TestRestartReservation: a new Manager knows nothing of what its
// predecessor granted, so it grants nothing for one ManagerLease (C§2.3.1),
// then grants the desired ranges with fresh LGNs, and renews them after.
func TestRestartReservation(t *testing.T) {
	a := newPeer("a")
	h := newHarness(t, assign.Fixed{Pieces: 4}, a)

	r := h.send(base, a)
	if m := h.to(r, "a"); len(m.Leases) != 0 || m.Seq != 1 || m.AckSeq != 1 || m.Epoch != epoch || m.Incarnation != 1 {
		t.Fatalf("answer to the first request %+v, want Seq 1 AckSeq 1 epoch %d and no lease", *m, epoch)
	}
	if got := h.c.Members(protocol.DefaultNamespace); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Members = %v, want [a]", got)
	}
	for now := at(tm.Renew); now.Before(restartEnd); now = now.Add(tm.Renew) {
		if m := h.to(h.send(now, a), "a"); len(m.Leases) != 0 {
			t.Fatalf("at %v (reservation until %v): granted %v", now, restartEnd, m.Leases)
		}
	}
	if r := h.tick(restartEnd.Add(-1)); len(r.Owners) != 0 {
		t.Fatalf("Tick just before the reservation ends sent %+v", r.Owners)
	}
	if lsn := h.table().LSN(); lsn != 0 {
		t.Fatalf("table changed during the reservation: LSN %d", lsn)
	}

	// The reservation ends: all four pieces are granted at once, pushed.
	m := h.to(h.tick(restartEnd), "a")
	want := []keyspace.Range{piece(0, 4), piece(1, 4), piece(2, 4), piece(3, 4)}
	checkGrants(t, m.Leases, want, 0)
	if m.AckSeq != a.seq {
		t.Fatalf("push acknowledges %d, want a's latest request %d", m.AckSeq, a.seq)
	}
	for _, l := range m.Leases {
		e := h.entry(l.Range)
		if e.Owner != "a" || e.Addr != "a:7000" || e.LGN != l.LGN || e.Migrated {
			t.Fatalf("table on %v = %v, want a/%d at a:7000", l.Range, e, l.LGN)
		}
	}
	lsn := h.table().LSN()

	// Renewal: the request lists the leases; the answer renews them.
	m2 := h.to(h.send(restartEnd.Add(100*ms), a), "a")
	if len(m2.Leases) != len(m.Leases) {
		t.Fatalf("renewal %v, want %v", m2.Leases, m.Leases)
	}
	for i, l := range m2.Leases {
		if l.Grant || l.Range != m.Leases[i].Range || l.LGN != m.Leases[i].LGN {
			t.Fatalf("renewal lease %d = %+v, want %v/%d not a grant", i, l, m.Leases[i].Range, m.Leases[i].LGN)
		}
	}
	if got := h.table().LSN(); got != lsn {
		t.Fatalf("a renewal changed the table: LSN %d → %d", lsn, got)
	}
}

// TestFirstGrant: an owner that joins a Manager gets nothing before the
// restart reservation ends, and all its desired ranges when it does.
func TestFirstGrant(t *testing.T) {
	tests := []struct {
		name    string
		join    time.Time
		granted bool
	}{
		{"at start", base, false},
		{"just before the reservation ends", restartEnd.Add(-1), false},
		{"when it ends", restartEnd, true},
		{"long after", restartEnd.Add(time.Minute), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newPeer("a")
			h := newHarness(t, nil, a) // consistent hashing
			m := h.to(h.send(tc.join, a), "a")
			if !tc.granted {
				if len(m.Leases) != 0 {
					t.Fatalf("granted %v during the reservation", m.Leases)
				}
				return
			}
			var want []keyspace.Range
			for _, s := range h.c.Desired(protocol.DefaultNamespace) {
				if s.Owner != "a" {
					t.Fatalf("desired %v for a single owner a", s)
				}
				want = append(want, s.Range)
			}
			if len(want) < 2 {
				t.Fatalf("consistent hashing gave %d ranges", len(want))
			}
			checkGrants(t, m.Leases, want, 0)
			if !keyspace.NewRangeSet(ranges(m.Leases)...).Equal(keyspace.NewRangeSet(keyspace.Full)) {
				t.Fatalf("grants %v do not cover the key space", ranges(m.Leases))
			}
			if got := len(h.table().Segments()); got != len(want) {
				t.Fatalf("table has %d segments, want one per grant (%d)", got, len(want))
			}
		})
	}
}

// mark remembers the table as a Lookup would have it now.
type mark struct {
	lsn  keyspace.LSN
	segs []leasetable.Segment
}

func (h *harness) mark() mark { return mark{h.table().LSN(), h.table().Segments()} }

// lostSince returns what a Lookup whose copy was m reports lost when it
// syncs now: a delta judged change by change, or a snapshot diff.
func (h *harness) lostSince(m mark) []keyspace.Range {
	h.t.Helper()
	v := leasetable.NewView()
	if _, err := v.Apply(leasetable.Update{To: m.lsn, Snapshot: true, Segments: m.segs}); err != nil {
		h.t.Fatal(err)
	}
	lost, err := v.Apply(h.table().Since(m.lsn))
	if err != nil {
		h.t.Fatal(err)
	}
	return lost
}

// checkGranted fails t unless the table gives each lease to owner under
// its LGN.
func (h *harness) checkGranted(ls []protocol.Lease, owner string) {
	h.t.Helper()
	for _, l := range ls {
		want := leasetable.Entry{Owner: owner, Addr: owner + ":7000", LGN: l.LGN}
		if e := h.entry(l.Range); e != want {
			h.t.Fatalf("table on %v = %v, want %v", l.Range, e, want)
		}
	}
}

func (h *harness) add(ps ...*peer) {
	for _, p := range ps {
		h.peers[p.id] = p
	}
}

func coalesced(rs ...keyspace.Range) []keyspace.Range { return keyspace.NewRangeSet(rs...).Ranges() }

// TestRecall: a second owner joins; the Manager recalls its ranges from
// the first by omission and grants them at once when the first acknowledges
// (C§2.3.2, P§4.1), long before the first's reservation would end.
func TestRecall(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joined(t, 4, a)
	h.add(b)
	h.send(restartEnd.Add(300*ms), a) // a's lease set is now acknowledged
	lgns := map[keyspace.Range]keyspace.LGN{}
	for _, l := range a.held {
		lgns[l.Range] = l.LGN
	}
	lsn := h.mark()

	// b joins: in the same Round, a is told to keep only pieces 0 and 2,
	// and b gets nothing yet.
	join := restartEnd.Add(400 * ms)
	r := h.send(join, b)
	ma, mb := h.to(r, "a"), h.to(r, "b")
	if got, want := ranges(ma.Leases), []keyspace.Range{piece(0, 4), piece(2, 4)}; !slices.Equal(got, want) {
		t.Fatalf("push to a lists %v, want %v (pieces 1 and 3 recalled)", got, want)
	}
	for _, l := range ma.Leases {
		if l.Grant || l.LGN != lgns[l.Range] {
			t.Fatalf("push to a: %+v, want a renewal under LGN %d", l, lgns[l.Range])
		}
	}
	if len(mb.Leases) != 0 {
		t.Fatalf("b granted %v before a acknowledged the recall", mb.Leases)
	}
	if got := h.table().LSN(); got != lsn.lsn {
		t.Fatalf("table changed on the join before the acknowledgement: LSN %d → %d", lsn.lsn, got)
	}

	// b renews before a acknowledges: still nothing.
	if m := h.to(h.send(join.Add(100*ms), b), "b"); len(m.Leases) != 0 {
		t.Fatalf("b granted %v before a acknowledged the recall", m.Leases)
	}

	// a acknowledges by omission: pieces 1 and 3 go to b at once.
	ack := join.Add(200 * ms)
	r = h.send(ack, a)
	mb = h.to(r, "b")
	checkGrants(t, mb.Leases, []keyspace.Range{piece(1, 4), piece(3, 4)}, 4)
	if got := ranges(h.to(r, "a").Leases); !slices.Equal(got, []keyspace.Range{piece(0, 4), piece(2, 4)}) {
		t.Fatalf("answer to a lists %v", got)
	}
	h.checkGranted(mb.Leases, "b")
	if got, want := h.lostSince(lsn), coalesced(piece(1, 4), piece(3, 4)); !slices.Equal(got, want) {
		t.Fatalf("a Lookup reports %v lost, want %v", got, want)
	}
	// The change log shows each recalled piece going free, then to b.
	u := h.table().Since(lsn.lsn)
	if u.Snapshot {
		t.Fatalf("Since(%d) is a snapshot", lsn.lsn)
	}
	for _, l := range mb.Leases {
		var seq []leasetable.Entry
		for _, c := range u.Changes {
			if c.Range.Overlaps(l.Range) {
				seq = append(seq, c.Entry)
			}
		}
		want := []leasetable.Entry{{}, {Owner: "b", Addr: "b:7000", LGN: l.LGN}}
		if !slices.Equal(seq, want) {
			t.Fatalf("changes on %v: %v, want %v", l.Range, seq, want)
		}
	}
	for _, i := range []int{0, 2} {
		if e := h.entry(piece(i, 4)); e.Owner != "a" || e.LGN != lgns[piece(i, 4)] {
			t.Fatalf("table on piece %d = %v, want a/%d", i, e, lgns[piece(i, 4)])
		}
	}
}

// TestRecallNotAcknowledged: when the holder never acknowledges a recall,
// the range waits for the reservation to run out.
func TestRecallNotAcknowledged(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joined(t, 2, a)
	h.add(b)
	last := restartEnd.Add(300 * ms)
	h.send(last, a) // reserves both pieces until last+ManagerLease
	join := restartEnd.Add(400 * ms)
	h.send(join, b)
	// a goes silent; b keeps renewing.
	end := last.Add(tm.ManagerLease)
	for now := join.Add(tm.Renew); now.Before(end); now = now.Add(tm.Renew) {
		h.tick(now)
		if m := h.to(h.send(now, b), "b"); len(m.Leases) != 0 {
			t.Fatalf("at %v, b granted %v while a's reservation runs until %v", now, m.Leases, end)
		}
	}
	if r := h.tick(end.Add(-1)); len(r.Owners) != 0 {
		t.Fatalf("Tick just before the reservation ends sent %+v", r.Owners)
	}
	lsn := h.mark()
	m := h.to(h.tick(end), "b")
	checkGrants(t, m.Leases, []keyspace.Range{piece(1, 2)}, 2)
	h.checkGranted(m.Leases, "b")
	if got, want := h.lostSince(lsn), coalesced(piece(1, 2)); !slices.Equal(got, want) {
		t.Fatalf("a Lookup reports %v lost, want %v", got, want)
	}
}

// TestSilentOwnerExpires: an owner that stops renewing keeps its ranges
// reserved until ManagerLease after the Manager's last message to it
// (C§2.3.1), even when it left the membership earlier; then they are
// freed (a loss) and granted to the others.
func TestSilentOwnerExpires(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := granted(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: -1}, a, b)
	// a's last request was at 2.0 s; the grant pushed at 2.2 s was the
	// Manager's last message to it, and reserves pieces 0 and 2 until 4.4 s.
	lastReq := restartEnd.Add(-tm.ManagerLease % tm.Renew)
	lastResp := restartEnd
	end := lastResp.Add(tm.ManagerLease)
	aLGN := map[keyspace.Range]keyspace.LGN{}
	for _, l := range a.held {
		aLGN[l.Range] = l.LGN
	}
	mine := []keyspace.Range{piece(0, 4), piece(2, 4)}
	if got := ranges(a.held); !slices.Equal(got, mine) {
		t.Fatalf("a holds %v, want %v", got, mine)
	}

	for now := restartEnd.Add(tm.Renew - tm.ManagerLease%tm.Renew); now.Before(end); now = now.Add(100 * ms) {
		r := h.tick(now)
		if now.Sub(base)%tm.Renew == 0 {
			r = h.send(now, b)
			if got := ranges(h.to(r, "b").Leases); !slices.Equal(got, []keyspace.Range{piece(1, 4), piece(3, 4)}) {
				t.Fatalf("at %v (a reserved until %v) b gets %v", now, end, got)
			}
		}
		for _, rg := range mine {
			if e := h.entry(rg); e.Owner != "a" || e.LGN != aLGN[rg] {
				t.Fatalf("at %v (a reserved until %v) table on %v = %v, want a's", now, end, rg, e)
			}
		}
		wantMembers := []string{"a", "b"}
		if !now.Before(lastReq.Add(tm.ManagerLease)) {
			wantMembers = []string{"b"}
		}
		if got := h.c.Members(protocol.DefaultNamespace); !slices.Equal(got, wantMembers) {
			t.Fatalf("at %v Members = %v, want %v", now, got, wantMembers)
		}
	}
	if r := h.tick(end.Add(-1)); len(r.Owners) != 0 {
		t.Fatalf("Tick just before the reservation ends sent %+v", r.Owners)
	}

	lsn := h.mark()
	m := h.to(h.tick(end), "b")
	var grants []protocol.Lease
	for _, l := range m.Leases {
		if l.Grant {
			grants = append(grants, l)
		}
	}
	checkGrants(t, grants, mine, 4)
	h.checkGranted(grants, "b")
	if got, want := h.lostSince(lsn), coalesced(mine...); !slices.Equal(got, want) {
		t.Fatalf("a Lookup reports %v lost, want %v", got, want)
	}
}

// TestNewIncarnation: an owner that restarted lost its soft state, but
// nothing proves the old process gone: its old ranges stay in the table as
// they are (orphans), neither renewed nor released by the new run, and are
// freed — the loss every Lookup is told of — only when the old reservation
// ends, when the old process can no longer acknowledge anything on them.
// Then they are granted again (C§2.3, P§4.3).
func TestNewIncarnation(t *testing.T) {
	a := newPeer("a")
	h := joined(t, 2, a)
	last := restartEnd.Add(300 * ms)
	h.send(last, a) // the old run's last answer: reserved until last+ManagerLease
	end := last.Add(tm.ManagerLease)
	old := slices.Clone(a.held)
	oldInc := *a
	lsn := h.mark()

	a.restart()
	restart := last.Add(200 * ms)
	m := h.to(h.send(restart, a), "a")
	if len(m.Leases) != 0 || m.Incarnation != 2 || m.AckSeq != 1 {
		t.Fatalf("answer to the new incarnation %+v, want no lease, Incarnation 2, AckSeq 1", *m)
	}
	for _, l := range old {
		if e := h.entry(l.Range); e.Owner != "a" || e.LGN != l.LGN {
			t.Fatalf("after the restart the table on %v = %v, want a's lease %d kept", l.Range, e, l.LGN)
		}
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a Lookup reports %v lost while the old run may still hold it", got)
	}

	// A delayed request of the old run is ignored.
	l := h.table().LSN()
	if r := h.stepLease(restart.Add(10*ms), oldInc.request()); len(r.Owners) != 0 || h.table().LSN() != l {
		t.Fatalf("request of the old incarnation answered %+v / changed the table", r.Owners)
	}

	for now := restart.Add(tm.Renew); now.Before(end); now = now.Add(tm.Renew) {
		h.tick(now)
		if m := h.to(h.send(now, a), "a"); len(m.Leases) != 0 {
			t.Fatalf("at %v (old reservation until %v) granted %v", now, end, m.Leases)
		}
	}
	if r := h.tick(end.Add(-1)); len(r.Owners) != 0 {
		t.Fatalf("Tick just before the old reservation ends sent %+v", r.Owners)
	}
	if got := h.lostSince(lsn); len(got) != 0 {
		t.Fatalf("a Lookup reports %v lost before the old reservation ends", got)
	}
	m = h.to(h.tick(end), "a")
	if got, want := h.lostSince(lsn), coalesced(ranges(old)...); !slices.Equal(got, want) {
		t.Fatalf("at the old reservation's end a Lookup reports %v lost, want %v", got, want)
	}
	checkGrants(t, m.Leases, ranges(old), 2)
	h.checkGranted(m.Leases, "a")
	if m.Incarnation != 2 {
		t.Fatalf("grant addressed to incarnation %d, want 2", m.Incarnation)
	}
}

// TestRaceFilter: a request that does not acknowledge the Manager's latest
// message raced it and is dropped; the Manager resends after a backoff
// (C§2.3.2, Figure 7). Duplicates and dead incarnations are ignored.
func TestRaceFilter(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(req *protocol.LeaseRequest, mySeq uint64)
		resend bool
	}{
		{"acknowledges an earlier response", func(r *protocol.LeaseRequest, my uint64) { r.AckSeq = my - 1 }, true},
		{"acknowledges nothing", func(r *protocol.LeaseRequest, my uint64) { r.AckSeq = 0 }, true},
		{"acknowledges a future response", func(r *protocol.LeaseRequest, my uint64) { r.AckSeq = my + 1 }, true},
		{"acknowledges another epoch", func(r *protocol.LeaseRequest, my uint64) { r.AckEpoch = epoch - 1 }, true},
		{"duplicate Seq", func(r *protocol.LeaseRequest, my uint64) { r.Seq-- }, false},
		{"older Seq", func(r *protocol.LeaseRequest, my uint64) { r.Seq -= 2 }, false},
		{"older incarnation", func(r *protocol.LeaseRequest, my uint64) { r.Incarnation = 0x0 + 1; r.Seq = 99 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newPeer("a")
			a.inc = 5
			h := joined(t, 2, a)
			h.send(restartEnd.Add(100*ms), a)
			mySeq := a.ack
			lsn := h.table().LSN()
			segs := h.table().Segments()

			// The request omits piece 1, which would free it if accepted.
			now := restartEnd.Add(200 * ms)
			req := a.request()
			req.Held = req.Held[:1]
			tc.mutate(req, mySeq)
			if r := h.stepLease(now, req); len(r.Owners) != 0 || len(r.Changes) != 0 {
				t.Fatalf("answered %+v", r)
			}
			if h.table().LSN() != lsn || !slices.Equal(h.table().Segments(), segs) {
				t.Fatalf("the request changed the table")
			}
			d := h.c.NextDeadline()
			if !tc.resend {
				if d.Sub(now) <= tm.BackoffMax {
					t.Fatalf("NextDeadline() = now+%v: a resend was scheduled", d.Sub(now))
				}
				if r := h.tick(now.Add(tm.BackoffMax)); len(r.Owners) != 0 {
					t.Fatalf("resent %+v", r.Owners)
				}
				return
			}
			if back := d.Sub(now); back < tm.BackoffMin || back > tm.BackoffMax {
				t.Fatalf("NextDeadline() = now+%v, want a resend within [%v, %v]", back, tm.BackoffMin, tm.BackoffMax)
			}
			if r := h.tick(d.Add(-1)); len(r.Owners) != 0 {
				t.Fatalf("resent before the backoff: %+v", r.Owners)
			}
			m := h.to(h.tick(d), "a")
			if m.Seq != mySeq+1 || m.AckSeq != req.Seq {
				t.Fatalf("resend Seq %d AckSeq %d, want %d %d", m.Seq, m.AckSeq, mySeq+1, req.Seq)
			}
			if got := ranges(m.Leases); !slices.Equal(got, []keyspace.Range{piece(0, 2), piece(1, 2)}) {
				t.Fatalf("resend lists %v, want both pieces still", got)
			}
			if h.table().LSN() != lsn {
				t.Fatalf("the resend changed the table")
			}
		})
	}
}

// TestStepLeaseErrors: malformed requests are refused with an error and
// change nothing, not even the sender's session.
func TestStepLeaseErrors(t *testing.T) {
	valid := protocol.Lease{Range: piece(0, 2), LGN: 1}
	tests := []struct {
		name    string
		mutate  func(*protocol.LeaseRequest)
		is      error
		mention string
	}{
		{"unknown namespace", func(r *protocol.LeaseRequest) { r.Namespace = "nope" }, ErrUnknownNamespace, `"nope"`},
		{"empty owner", func(r *protocol.LeaseRequest) { r.Owner = "" }, ErrBadMessage, "owner"},
		{"zero incarnation", func(r *protocol.LeaseRequest) { r.Incarnation = 0 }, ErrBadMessage, "incarnation"},
		{"zero Seq", func(r *protocol.LeaseRequest) { r.Seq = 0 }, ErrBadMessage, "sequence"},
		{"empty range held", func(r *protocol.LeaseRequest) {
			r.Held = append(r.Held, protocol.Lease{Range: keyspace.Range{Start: 7, End: 7}, LGN: 1})
		}, ErrBadMessage, "invalid lease"},
		{"reversed range held", func(r *protocol.LeaseRequest) {
			r.Held = append(r.Held, protocol.Lease{Range: keyspace.Range{Start: 9, End: 7}, LGN: 1})
		}, ErrBadMessage, "invalid lease"},
		{"zero LGN held", func(r *protocol.LeaseRequest) {
			r.Held = []protocol.Lease{{Range: valid.Range, LGN: 0}}
		}, ErrBadMessage, "LGN 0"},
		{"compact form with a Held", func(r *protocol.LeaseRequest) { r.HeldAsAcked = true }, ErrBadMessage, "HeldAsAcked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newPeer("a")
			h := joined(t, 2, a)
			lsn, members := h.table().LSN(), h.c.Members(protocol.DefaultNamespace)
			now := restartEnd.Add(100 * ms)
			req := a.request()
			req.Held = req.Held[:1] // would free piece 1 if accepted
			good := *req
			tc.mutate(req)
			err := h.c.StepLease(now, req)
			if !errors.Is(err, tc.is) {
				t.Fatalf("StepLease = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %s", err, tc.mention)
			}
			if r := h.ready(); len(r.Owners) != 0 || len(r.Changes) != 0 {
				t.Fatalf("answered %+v", r)
			}
			if h.table().LSN() != lsn || !slices.Equal(h.c.Members(protocol.DefaultNamespace), members) {
				t.Fatalf("table LSN %d→%d, members %v→%v", lsn, h.table().LSN(), members, h.c.Members(protocol.DefaultNamespace))
			}
			// The session did not take the Seq: the well-formed request is
			// still new.
			if m := h.to(h.stepLease(now, &good), "a"); m.AckSeq != good.Seq {
				t.Fatalf("the corrected request was answered with AckSeq %d, want %d", m.AckSeq, good.Seq)
			}
		})
	}
}

// TestLeaving: an owner that says it is leaving holds nothing; it leaves
// the membership at once and its ranges go to the others at once.
func TestLeaving(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joined(t, 4, a, b)
	lsn := h.mark()
	req := a.request()
	req.Leaving, req.Held = true, nil
	now := restartEnd.Add(100 * ms)
	r := h.stepLease(now, req)
	if got := h.c.Members(protocol.DefaultNamespace); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("Members = %v, want [b]", got)
	}
	if m := h.to(r, "a"); len(m.Leases) != 0 {
		t.Fatalf("leaving owner offered %v", m.Leases)
	}
	var grants []protocol.Lease
	for _, l := range h.to(r, "b").Leases {
		if l.Grant {
			grants = append(grants, l)
		}
	}
	checkGrants(t, grants, []keyspace.Range{piece(0, 4), piece(2, 4)}, 4)
	h.checkGranted(grants, "b")
	if got, want := h.lostSince(lsn), coalesced(piece(0, 4), piece(2, 4)); !slices.Equal(got, want) {
		t.Fatalf("a Lookup reports %v lost, want %v", got, want)
	}
}

// TestFirstRequestNeedsNoAck: the race filter applies only once the
// Manager has sent the session something; a new owner, or a new
// incarnation, may acknowledge anything (e.g. a previous Manager's epoch).
func TestFirstRequestNeedsNoAck(t *testing.T) {
	a := newPeer("a")
	h := newHarness(t, assign.Fixed{Pieces: 2}, a)
	req := a.request()
	req.AckEpoch, req.AckSeq = epoch+7, 42
	if m := h.to(h.stepLease(base, req), "a"); m.Seq != 1 || m.AckSeq != req.Seq {
		t.Fatalf("first request answered %+v, want Seq 1 AckSeq %d", *m, req.Seq)
	}
	a.restart()
	req = a.request()
	req.AckEpoch, req.AckSeq = epoch, 42
	if m := h.to(h.stepLease(at(100*ms), req), "a"); m.Seq != 1 || m.Incarnation != a.inc {
		t.Fatalf("new incarnation's first request answered %+v, want Seq 1 of incarnation %d", *m, a.inc)
	}
}

// TestGrantRepeatedUntilAcknowledged: the Manager lists a grant as a grant
// in every message until the owner acknowledges one of them: a message may
// be lost or overtaken, and an owner that first saw the lease as a renewal
// would refuse it (losing the state a migrated grant carries). A request
// whose AckSeq reaches the first message that listed it ends that.
func TestGrantRepeatedUntilAcknowledged(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := granted(t, Settings{Policy: assign.Fixed{Pieces: 4}, Handover: -1}, a, b)
	grants := func(m *protocol.LeaseResponse) (n int) {
		for _, l := range m.Leases {
			if l.Grant {
				n++
			}
		}
		return n
	}
	// a's grants went out at the end of the restart reservation; a's next
	// request was sent before that message arrived (its AckSeq is older):
	// it raced, and the Manager resends after a backoff.
	req := a.request()
	req.AckSeq = 0
	if r := h.stepLease(restartEnd.Add(10*ms), req); len(r.Owners) != 0 {
		t.Fatalf("a raced request was answered: %+v", r.Owners)
	}
	r := h.tick(restartEnd.Add(10*ms + tm.BackoffMax))
	if m := h.to(r, "a"); grants(m) != 2 {
		t.Fatalf("the resend lists %d grants, want both again: %+v", grants(m), m.Leases)
	}
	// A request acknowledging the answer (which listed them too) ends it.
	r = h.send(restartEnd.Add(20*ms+tm.BackoffMax), a)
	if m := h.to(r, "a"); grants(m) != 0 || len(m.Leases) != 2 {
		t.Fatalf("after the acknowledgement: %d grants of %d leases, want 2 renewals", grants(m), len(m.Leases))
	}
}
