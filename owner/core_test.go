package owner

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// base is the fixed start of every test clock.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns base + d.
func at(d time.Duration) time.Time { return base.Add(d) }

const ms = time.Millisecond

// tm is the timing of every test: Fast, whose numbers the comments quote
// (OwnerLease 2 s, Renew 500 ms, backoff 5–50 ms).
var tm = protocol.Fast()

const (
	ns    = "default"
	me    = "o1"
	inc   = 100
	epoch = 7
)

func rng(start, end keyspace.Key) keyspace.Range { return keyspace.Range{Start: start, End: end} }

func newCore(t *testing.T) *Core {
	t.Helper()
	return NewCore(CoreConfig{Namespace: ns, ID: me, Addr: "o1:7000", Incarnation: inc, Timing: tm, Seed: 1})
}

// grant and renew are leases in a LeaseResponse.
func grant(r keyspace.Range, lgn keyspace.LGN) protocol.Lease {
	return protocol.Lease{Range: r, LGN: lgn, Grant: true}
}

func renew(r keyspace.Range, lgn keyspace.LGN) protocol.Lease {
	return protocol.Lease{Range: r, LGN: lgn}
}

// held is a lease as a LeaseRequest lists it.
func held(r keyspace.Range, lgn keyspace.LGN) protocol.Lease {
	return protocol.Lease{Range: r, LGN: lgn}
}

// resp is a LeaseResponse from the Manager of epoch 7 to this owner.
func resp(seq, ack uint64, leases ...protocol.Lease) *protocol.LeaseResponse {
	return &protocol.LeaseResponse{
		Namespace: ns, Owner: me, Incarnation: inc, Epoch: epoch,
		Seq: seq, AckSeq: ack, Leases: leases,
	}
}

func num(lgn keyspace.LGN) LeaseNum { return LeaseNum{Epoch: epoch, LGN: lgn} }

// ready is what a Core returned from Ready.
type ready struct {
	reqs []*protocol.LeaseRequest
	chs  []OwnershipChange
}

func readyOf(c *Core) ready {
	reqs, chs := c.Ready()
	trailOf(c).sent(reqs)
	return ready{reqs, chs}
}

// tick runs c's timers at now and returns what it asks for.
func tick(c *Core, now time.Time) ready {
	c.Tick(now)
	return readyOf(c)
}

// step delivers m at now and returns what c asks for.
func step(c *Core, now time.Time, m *protocol.LeaseResponse) ready {
	trailOf(c).heard(m)
	c.Step(now, m)
	return readyOf(c)
}

// one fails t unless reqs holds exactly one request, and returns it.
func one(t *testing.T, reqs []*protocol.LeaseRequest) *protocol.LeaseRequest {
	t.Helper()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests %v, want 1", len(reqs), reqs)
	}
	return reqs[0]
}

// none fails t if the core asked for anything.
func (r ready) none(t *testing.T) {
	t.Helper()
	if len(r.reqs) != 0 || len(r.chs) != 0 {
		t.Fatalf("got requests %v and changes %v, want none", r.reqs, r.chs)
	}
}

// started returns a core that sent request 1 at base and was granted
// leases by the answer, received at base+100ms.
func started(t *testing.T, leases ...protocol.Lease) *Core {
	t.Helper()
	c := newCore(t)
	one(t, tick(c, base).reqs)
	reqs := step(c, at(100*ms), resp(1, 1, leases...)).reqs
	if len(reqs) != 0 {
		t.Fatalf("grant at start: unexpected requests %v", reqs)
	}
	return c
}

func heldSet(ls []Lease) []protocol.Lease {
	var out []protocol.Lease
	for _, l := range ls {
		out = append(out, held(l.Range, l.Num.LGN))
	}
	return out
}

func TestFirstTickSendsRequest(t *testing.T) {
	c := newCore(t)
	if d := c.NextDeadline(); d.After(base) {
		t.Fatalf("fresh core: NextDeadline() = %v, want no later than the first tick", d)
	}
	req := one(t, tick(c, base).reqs)
	want := protocol.LeaseRequest{Namespace: ns, Owner: me, Addr: "o1:7000", Incarnation: inc, Seq: 1}
	if req.Namespace != want.Namespace || req.Owner != want.Owner || req.Addr != want.Addr ||
		req.Incarnation != want.Incarnation || req.Seq != 1 || req.AckEpoch != 0 || req.AckSeq != 0 ||
		len(req.Held) != 0 || req.Leaving {
		t.Fatalf("first request = %+v, want %+v", *req, want)
	}
	if got, want := c.NextDeadline(), at(tm.Renew); !got.Equal(want) {
		t.Fatalf("NextDeadline() = %v, want base+Renew %v", got, want)
	}
	tick(c, at(tm.Renew-1)).none(t)
	req = one(t, tick(c, at(tm.Renew)).reqs)
	if req.Seq != 2 {
		t.Fatalf("renewal Seq = %d, want 2", req.Seq)
	}
}

// TestLeaseRunsFromSend: the lease earned by a response runs OwnerLease
// from when the answered request was sent, not from when the response
// arrived (C§2.3.1): the Manager's reservation starts later still.
func TestLeaseRunsFromSend(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sent, recv time.Duration
	}{
		{"answered at once", 0, 0},
		{"answered 300ms later", 0, 300 * ms},
		{"answer takes most of the lease", 0, 1900 * ms},
		{"renewal sent at 500ms answered at 1.2s", 500 * ms, 1200 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(t)
			req := one(t, tick(c, base).reqs)
			if tc.sent > 0 {
				req = one(t, tick(c, at(tc.sent)).reqs)
			}
			r := step(c, at(tc.recv), resp(1, req.Seq, grant(rng(0, 100), 5)))
			reqs, chs := r.reqs, r.chs
			if len(reqs) != 0 {
				t.Fatalf("unexpected requests %v", reqs)
			}
			want := at(tc.sent + tm.OwnerLease)
			if len(chs) != 1 || len(chs[0].Granted) != 1 || len(chs[0].Revoked) != 0 {
				t.Fatalf("changes = %+v, want one grant", chs)
			}
			g := chs[0].Granted[0]
			if g.Range != rng(0, 100) || g.Num != num(5) || !g.Expiry.Equal(want) {
				t.Fatalf("granted %+v, want [0,100) %v expiring at send+OwnerLease %v", g, num(5), want)
			}
		})
	}
}

// TestLeaseRunsFromSendDetectsFault checks that TestLeaseRunsFromSend's
// assertion can fail: with the timer started at receipt, it would.
func TestLeaseRunsFromSendDetectsFault(t *testing.T) {
	c := NewCore(CoreConfig{Namespace: ns, ID: me, Incarnation: inc, Timing: tm})
	c.broken = faults.Set{TimerAtReceipt: true}
	tick(c, base)
	chs := step(c, at(300*ms), resp(1, 1, grant(rng(0, 100), 5))).chs
	if got := chs[0].Granted[0].Expiry; got.Equal(at(tm.OwnerLease)) {
		t.Fatalf("with TimerAtReceipt the expiry is still send+OwnerLease %v", got)
	}
}

func TestCheckLease(t *testing.T) {
	c := started(t, grant(rng(0, 100), 5), grant(rng(200, 0), 6))
	expiry := at(tm.OwnerLease) // request 1 was sent at base
	tests := []struct {
		name string
		now  time.Time
		key  keyspace.Key
		want LeaseNum
		ok   bool
	}{
		{"first key", base, 0, num(5), true},
		{"last key of a range", base, 99, num(5), true},
		{"key after the range", base, 100, LeaseNum{}, false},
		{"key between ranges", at(time.Second), 150, LeaseNum{}, false},
		{"range to the end of the key space", at(time.Second), keyspace.MaxKey, num(6), true},
		{"just before expiry", expiry.Add(-1), 50, num(5), true},
		{"at expiry", expiry, 50, LeaseNum{}, false},
		{"after expiry", expiry.Add(time.Second), 50, LeaseNum{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := c.CheckLeaseNow(tc.now, tc.key)
			if got != tc.want || ok != tc.ok {
				t.Errorf("CheckLeaseNow(%v, %d) = %v, %v; want %v, %v", tc.now, tc.key, got, ok, tc.want, tc.ok)
			}
			want5 := tc.ok && tc.want == num(5)
			if got := c.CheckLeaseContinuous(tc.now, tc.key, num(5)); got != want5 {
				t.Errorf("CheckLeaseContinuous(%v, %d, %v) = %v, want %v", tc.now, tc.key, num(5), got, want5)
			}
			var inHeld bool
			for _, l := range c.Held(tc.now) {
				inHeld = inHeld || l.Range.Contains(tc.key)
			}
			if inHeld != tc.ok {
				t.Errorf("Held(%v) covers %d: %v, want %v", tc.now, tc.key, inHeld, tc.ok)
			}
			// AppendHeld appends the same leases after what dst has.
			first := Lease{Num: num(99)}
			if got, want := c.AppendHeld([]Lease{first}, tc.now), append([]Lease{first}, c.Held(tc.now)...); !slices.Equal(got, want) {
				t.Errorf("AppendHeld(%v) = %v, want %v", tc.now, got, want)
			}
		})
	}
}

// TestCheckLeaseContinuous follows one key through a renewal, a new grant
// that replaces the lease, and a lapse.
func TestCheckLeaseContinuous(t *testing.T) {
	const key = 42
	c := started(t, grant(rng(0, 100), 5))
	n5 := num(5)
	if !c.CheckLeaseContinuous(at(200*ms), key, n5) {
		t.Fatalf("after the grant: not continuous under %v", n5)
	}

	// Renewal: same LeaseNum, still continuous, and longer.
	one(t, tick(c, at(500*ms)).reqs)
	step(c, at(600*ms), resp(2, 2, renew(rng(0, 100), 5)))
	if !c.CheckLeaseContinuous(at(2100*ms), key, n5) {
		t.Fatalf("after a renewal at 500ms: not continuous under %v at 2.1s", n5)
	}

	// A new grant on the range: the old lease is gone, the new one holds.
	one(t, tick(c, at(time.Second)).reqs)
	chs := step(c, at(1100*ms), resp(3, 3, grant(rng(0, 100), 9))).chs
	if c.CheckLeaseContinuous(at(1100*ms), key, n5) {
		t.Fatalf("after a new LGN: still continuous under the old %v", n5)
	}
	if !c.CheckLeaseContinuous(at(1100*ms), key, num(9)) {
		t.Fatalf("after a new LGN: not continuous under the new %v", num(9))
	}
	want := OwnershipChange{Revoked: []keyspace.Range{rng(0, 100)},
		Granted: []Lease{{Range: rng(0, 100), Num: num(9), Expiry: at(time.Second + tm.OwnerLease)}}}
	if len(chs) != 1 || !equalChange(chs[0], want) {
		t.Fatalf("changes = %+v, want %+v", chs, want)
	}

	// Lapse: no renewal answered; at expiry the lease is no longer held.
	lapse := at(time.Second + tm.OwnerLease)
	if !c.CheckLeaseContinuous(lapse.Add(-1), key, num(9)) {
		t.Fatalf("just before lapse: not continuous")
	}
	if c.CheckLeaseContinuous(lapse, key, num(9)) {
		t.Fatalf("at lapse %v: still continuous", lapse)
	}
}

func equalChange(a, b OwnershipChange) bool {
	return slices.Equal(a.Revoked, b.Revoked) && slices.EqualFunc(a.Granted, b.Granted, func(x, y Lease) bool {
		return x.Range == y.Range && x.Num == y.Num && x.Expiry.Equal(y.Expiry)
	})
}

// TestRenewalRules is the table of how a response's leases change the held
// set (C§2.3, P§4.3): renewals extend what is held without a gap, are
// refused otherwise, and everything omitted is recalled. A refusal or a
// recall is acknowledged by an immediate request that omits the range.
func TestRenewalRules(t *testing.T) {
	a, b := rng(0, 100), rng(100, 200)
	tests := []struct {
		name       string
		start      []protocol.Lease // granted by the answer to request 1 (sent at base)
		tickAt     time.Duration    // Tick here (sends request 2), then answer it at +100ms
		answer     []protocol.Lease // the answer to the latest request
		wantHeld   []protocol.Lease // held after the answer
		wantExpiry time.Duration    // of every held lease, from base
		wantChange *OwnershipChange // nil: none
		wantSend   bool             // an immediate request listing wantHeld
	}{
		{
			name: "renewal of a held lease extends it", start: []protocol.Lease{grant(a, 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5)},
			wantHeld: []protocol.Lease{held(a, 5)}, wantExpiry: 500*ms + tm.OwnerLease,
		},
		{
			name: "renewal on a fresh core is refused", start: nil,
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5)},
			wantSend: true,
		},
		{
			name: "renewal under another LGN is refused and the old lease recalled", start: []protocol.Lease{grant(a, 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 6)},
			wantChange: &OwnershipChange{Revoked: []keyspace.Range{a}},
			wantSend:   true,
		},
		{
			name: "renewal after the lease lapsed is refused", start: []protocol.Lease{grant(a, 5)},
			tickAt: tm.OwnerLease, answer: []protocol.Lease{renew(a, 5)},
			// The Tick at expiry revoked it already.
			wantSend: true,
		},
		{
			name: "renewal of a larger range than held is refused", start: []protocol.Lease{grant(rng(0, 50), 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5)},
			wantChange: &OwnershipChange{Revoked: []keyspace.Range{rng(0, 50)}},
			wantSend:   true,
		},
		{
			name: "renewal across a gap in the held lease is refused", start: []protocol.Lease{grant(rng(0, 40), 5), grant(rng(60, 100), 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5)},
			wantChange: &OwnershipChange{Revoked: []keyspace.Range{rng(0, 40), rng(60, 100)}},
			wantSend:   true,
		},
		{
			name: "renewal of a range held in two pieces", start: []protocol.Lease{grant(rng(0, 40), 5), grant(rng(40, 100), 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5)},
			wantHeld: []protocol.Lease{held(a, 5)}, wantExpiry: 500*ms + tm.OwnerLease,
		},
		{
			name: "renewal of a subrange keeps its LeaseNum and revokes the rest", start: []protocol.Lease{grant(a, 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(rng(0, 40), 5)},
			wantHeld: []protocol.Lease{held(rng(0, 40), 5)}, wantExpiry: 500*ms + tm.OwnerLease,
			wantChange: &OwnershipChange{Revoked: []keyspace.Range{rng(40, 100)}},
			wantSend:   true,
		},
		{
			name: "renewal split in two keeps both halves", start: []protocol.Lease{grant(a, 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(rng(0, 40), 5), renew(rng(40, 100), 5)},
			wantHeld:   []protocol.Lease{held(rng(0, 40), 5), held(rng(40, 100), 5)},
			wantExpiry: 500*ms + tm.OwnerLease,
		},
		{
			name: "recall by omission", start: []protocol.Lease{grant(a, 5), grant(b, 6)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5)},
			wantHeld: []protocol.Lease{held(a, 5)}, wantExpiry: 500*ms + tm.OwnerLease,
			wantChange: &OwnershipChange{Revoked: []keyspace.Range{b}},
			wantSend:   true,
		},
		{
			name: "recall of everything", start: []protocol.Lease{grant(a, 5), grant(b, 6)},
			tickAt: 500 * ms, answer: nil,
			wantChange: &OwnershipChange{Revoked: []keyspace.Range{a, b}},
			wantSend:   true,
		},
		{
			name: "new grant beside a renewal", start: []protocol.Lease{grant(a, 5)},
			tickAt: 500 * ms, answer: []protocol.Lease{renew(a, 5), grant(b, 8)},
			wantHeld: []protocol.Lease{held(a, 5), held(b, 8)}, wantExpiry: 500*ms + tm.OwnerLease,
			wantChange: &OwnershipChange{Granted: []Lease{{Range: b, Num: num(8), Expiry: at(500*ms + tm.OwnerLease)}}},
		},
		{
			name: "overlapping grants: the first is kept", start: nil,
			tickAt: 500 * ms, answer: []protocol.Lease{grant(a, 5), grant(rng(50, 150), 8)},
			wantHeld: []protocol.Lease{held(a, 5)}, wantExpiry: 500*ms + tm.OwnerLease,
			wantChange: &OwnershipChange{Granted: []Lease{{Range: a, Num: num(5), Expiry: at(500*ms + tm.OwnerLease)}}},
		},
		{
			name: "invalid range is refused", start: nil,
			tickAt: 500 * ms, answer: []protocol.Lease{grant(rng(50, 50), 5)},
			wantSend: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := started(t, tc.start...)
			// Ignore the lapse the Tick may report.
			req := one(t, tick(c, at(tc.tickAt)).reqs)
			recv := at(tc.tickAt + 100*ms)
			got := step(c, recv, resp(2, req.Seq, tc.answer...))
			reqs, chs := got.reqs, got.chs

			if got := heldSet(c.Held(recv)); !slices.Equal(got, tc.wantHeld) {
				t.Errorf("held = %v, want %v", got, tc.wantHeld)
			}
			for _, l := range c.Held(recv) {
				if !l.Expiry.Equal(at(tc.wantExpiry)) {
					t.Errorf("lease %v expires at %v, want %v", l.Range, l.Expiry, at(tc.wantExpiry))
				}
			}
			switch {
			case tc.wantChange == nil && len(chs) != 0:
				t.Errorf("changes = %+v, want none", chs)
			case tc.wantChange != nil && (len(chs) != 1 || !equalChange(chs[0], *tc.wantChange)):
				t.Errorf("changes = %+v, want %+v", chs, *tc.wantChange)
			}
			if !tc.wantSend {
				if len(reqs) != 0 {
					t.Errorf("requests = %v, want none before the next renewal", reqs)
				}
				return
			}
			r := one(t, reqs)
			if r.Seq != req.Seq+1 || r.AckSeq != 2 || r.AckEpoch != epoch {
				t.Errorf("acknowledgement Seq %d AckEpoch %d AckSeq %d, want %d %d 2", r.Seq, r.AckEpoch, r.AckSeq, req.Seq+1, epoch)
			}
			if got := listed(t, c, r); !slices.Equal(got, tc.wantHeld) {
				t.Errorf("acknowledgement lists %v, want %v", got, tc.wantHeld)
			}
		})
	}
}

// TestRaceFilter: responses the owner must not act on (C§2.3.2).
func TestRaceFilter(t *testing.T) {
	a := rng(0, 100)
	// Each case starts from a core holding a/5 from request 1 (sent at
	// base), answered by response 1; it then sent request 2 at 500ms.
	tests := []struct {
		name string
		m    *protocol.LeaseResponse
		// heard: the response updates the Manager sequence number the next
		// request acknowledges.
		heard   bool
		resend  bool // a race: a resend is scheduled after a backoff
		ackSeq  uint64
		ackEpch uint64
	}{
		{"answers an earlier request", resp(2, 1), true, true, 2, epoch},
		{"answers no request", resp(2, 0), true, true, 2, epoch},
		{"answers a future request", resp(2, 3), true, true, 2, epoch},
		{"duplicate Seq", resp(1, 2), false, false, 1, epoch},
		{"older Seq", resp(0, 2), false, false, 1, epoch},
		{"another owner", func() *protocol.LeaseResponse { m := resp(2, 2); m.Owner = "o2"; return m }(), false, false, 1, epoch},
		{"another incarnation", func() *protocol.LeaseResponse { m := resp(2, 2); m.Incarnation = inc - 1; return m }(), false, false, 1, epoch},
		{"another namespace", func() *protocol.LeaseResponse { m := resp(2, 2); m.Namespace = "other"; return m }(), false, false, 1, epoch},
		{"older epoch", func() *protocol.LeaseResponse { m := resp(9, 2); m.Epoch = epoch - 1; return m }(), false, false, 1, epoch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := started(t, grant(a, 5))
			one(t, tick(c, at(500*ms)).reqs)
			before := c.Held(at(600 * ms))
			// Every response recalls a: acting on it would show.
			now := at(600 * ms)
			step(c, now, tc.m).none(t)
			if got := c.Held(now); !slices.Equal(got, before) {
				t.Fatalf("held changed to %v, want %v", got, before)
			}
			if !c.CheckLeaseContinuous(now, 50, num(5)) {
				t.Fatalf("lease a/5 no longer continuous")
			}
			d := c.NextDeadline()
			if tc.resend {
				if back := d.Sub(now); back < tm.BackoffMin || back > tm.BackoffMax {
					t.Fatalf("NextDeadline() = now+%v, want a resend within [%v, %v]", back, tm.BackoffMin, tm.BackoffMax)
				}
				tick(c, d.Add(-1)).none(t)
			} else if want := at(time.Second); !d.Equal(want) {
				t.Fatalf("NextDeadline() = %v, want the next renewal at %v", d, want)
			}
			req := one(t, tick(c, d).reqs)
			if req.Seq != 3 || req.AckSeq != tc.ackSeq || req.AckEpoch != tc.ackEpch {
				t.Fatalf("next request Seq %d AckEpoch %d AckSeq %d, want 3 %d %d", req.Seq, req.AckEpoch, req.AckSeq, tc.ackEpch, tc.ackSeq)
			}
			if got := listed(t, c, req); !slices.Equal(got, []protocol.Lease{held(a, 5)}) {
				t.Fatalf("next request lists %v, want a/5", got)
			}
		})
	}
}

// TestRaceFilterDetectsFault checks that TestRaceFilter's assertion can
// fail: without the filter, a raced recall is obeyed.
func TestRaceFilterDetectsFault(t *testing.T) {
	c := NewCore(CoreConfig{Namespace: ns, ID: me, Incarnation: inc, Timing: tm})
	c.broken = faults.Set{NoRaceFilter: true}
	tick(c, base)
	step(c, at(100*ms), resp(1, 1, grant(rng(0, 100), 5)))
	tick(c, at(500*ms))
	step(c, at(600*ms), resp(2, 1))
	if len(c.Held(at(600*ms))) != 0 {
		t.Fatalf("with NoRaceFilter the raced recall was still dropped")
	}
}

// TestRaceResendOnce: further races while a resend is pending do not push
// it back, and the resend clears it.
func TestRaceResendOnce(t *testing.T) {
	c := started(t, grant(rng(0, 100), 5))
	tick(c, at(500*ms))
	step(c, at(600*ms), resp(2, 1))
	d := c.NextDeadline()
	step(c, at(601*ms), resp(3, 1))
	if got := c.NextDeadline(); !got.Equal(d) {
		t.Fatalf("second race moved the resend from %v to %v", d, got)
	}
	req := one(t, tick(c, d).reqs)
	if req.AckSeq != 3 {
		t.Fatalf("resend acknowledges %d, want the last response heard, 3", req.AckSeq)
	}
	if got, want := c.NextDeadline(), d.Add(tm.Renew); !got.Equal(want) {
		t.Fatalf("after the resend NextDeadline() = %v, want the next renewal %v", got, want)
	}
}

// TestEpochs: a Manager that lost its state has a newer epoch; leases of
// one epoch are never renewed in another, and an older epoch is a dead
// Manager.
func TestEpochs(t *testing.T) {
	a := rng(0, 100)
	newer := func(seq, ack uint64, ls ...protocol.Lease) *protocol.LeaseResponse {
		m := resp(seq, ack, ls...)
		m.Epoch = epoch + 1
		return m
	}
	t.Run("newer epoch replaces the held set", func(t *testing.T) {
		c := started(t, grant(a, 5))
		tick(c, at(500*ms))
		// The new Manager's Seq restarts at 1.
		got := step(c, at(600*ms), newer(1, 2, grant(rng(0, 50), 3)))
		reqs, chs := got.reqs, got.chs
		n3 := LeaseNum{Epoch: epoch + 1, LGN: 3}
		want := OwnershipChange{Revoked: []keyspace.Range{a},
			Granted: []Lease{{Range: rng(0, 50), Num: n3, Expiry: at(500*ms + tm.OwnerLease)}}}
		if len(chs) != 1 || !equalChange(chs[0], want) {
			t.Fatalf("changes = %+v, want %+v", chs, want)
		}
		r := one(t, reqs) // the revocation is acknowledged at once
		if r.AckEpoch != epoch+1 || r.AckSeq != 1 || !slices.Equal(listed(t, c, r), []protocol.Lease{held(rng(0, 50), 3)}) {
			t.Fatalf("acknowledgement %+v, want AckEpoch %d AckSeq 1 holding [0,50)/3", *r, epoch+1)
		}
		// The dead Manager's later messages are ignored.
		step(c, at(700*ms), resp(5, r.Seq, renew(a, 5))).none(t)
		if got, ok := c.CheckLeaseNow(at(700*ms), 10); !ok || got != n3 {
			t.Fatalf("after an old-epoch message: CheckLeaseNow = %v %v, want %v", got, ok, n3)
		}
	})
	t.Run("renewal across epochs is refused", func(t *testing.T) {
		c := started(t, grant(a, 5))
		tick(c, at(500*ms))
		r := step(c, at(600*ms), newer(1, 2, renew(a, 5)))
		reqs, chs := r.reqs, r.chs
		if len(c.Held(at(600*ms))) != 0 {
			t.Fatalf("held %v, want nothing", c.Held(at(600*ms)))
		}
		if len(chs) != 1 || !equalChange(chs[0], OwnershipChange{Revoked: []keyspace.Range{a}}) {
			t.Fatalf("changes = %+v, want a revoked", chs)
		}
		if r := one(t, reqs); len(listed(t, c, r)) != 0 {
			t.Fatalf("refusal lists %v, want nothing", listed(t, c, r))
		}
	})
}

func TestExpiryOnTick(t *testing.T) {
	a, b := rng(0, 100), rng(100, 200)
	c := started(t, grant(a, 5), grant(b, 6)) // both expire at 2s
	// No more answers. Renewals go out on time and list both leases.
	for _, s := range []time.Duration{500 * ms, 1000 * ms, 1500 * ms} {
		r := tick(c, at(s))
		if len(r.chs) != 0 || len(listed(t, c, one(t, r.reqs))) != 2 {
			t.Fatalf("renewal at %v: requests %v changes %v, want one request holding a and b", s, r.reqs, r.chs)
		}
	}
	if got, want := c.NextDeadline(), at(tm.OwnerLease); !got.Equal(want) {
		t.Fatalf("NextDeadline() = %v, want the expiry %v", got, want)
	}
	tick(c, at(tm.OwnerLease-1)).none(t)
	if len(c.Held(at(tm.OwnerLease))) != 0 {
		t.Fatalf("Held(expiry) = %v, want nothing", c.Held(at(tm.OwnerLease)))
	}
	r := tick(c, at(tm.OwnerLease))
	if len(r.chs) != 1 || !equalChange(r.chs[0], OwnershipChange{Revoked: []keyspace.Range{a, b}}) {
		t.Fatalf("at expiry: changes %+v, want a and b revoked", r.chs)
	}
	if req := one(t, r.reqs); len(listed(t, c, req)) != 0 {
		t.Fatalf("renewal at expiry lists %v, want nothing", listed(t, c, req))
	}
	// Revoked once only.
	tick(c, at(tm.OwnerLease+100*ms)).none(t)
	if got := c.Expired(); got != 2 {
		t.Fatalf("Expired() = %d after a and b ran out, want 2", got)
	}
}

// TestNextDeadline: the earliest of the next renewal, a pending resend and
// the leases' expiries.
func TestNextDeadline(t *testing.T) {
	tests := []struct {
		name  string
		setup func(c *Core)
		want  time.Time
	}{
		{"renewal", func(c *Core) {
			tick(c, base)
			step(c, at(100*ms), resp(1, 1, grant(rng(0, 100), 5)))
		}, at(tm.Renew)},
		{"expiry before the renewal", func(c *Core) {
			tick(c, base)
			step(c, at(100*ms), resp(1, 1, grant(rng(0, 100), 5)))
			tick(c, at(1800*ms)) // late tick: renewal due at 2.3s
		}, at(tm.OwnerLease)},
		{"resend", func(c *Core) {
			tick(c, base)
			step(c, at(100*ms), resp(1, 1, grant(rng(0, 100), 5)))
			tick(c, at(400*ms)) // renewal due at 900ms
			tick(c, at(500*ms))
			step(c, at(600*ms), resp(2, 1)) // raced
		}, time.Time{}}, // checked by range below
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(t)
			tc.setup(c)
			got := c.NextDeadline()
			if tc.want.IsZero() {
				if back := got.Sub(at(600 * ms)); back < tm.BackoffMin || back > tm.BackoffMax {
					t.Fatalf("NextDeadline() = 600ms+%v, want a backoff in [%v, %v]", back, tm.BackoffMin, tm.BackoffMax)
				}
				return
			}
			if !got.Equal(tc.want) {
				t.Fatalf("NextDeadline() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLeave(t *testing.T) {
	a, b := rng(0, 100), rng(100, 200)
	c := started(t, grant(a, 5), grant(b, 6))
	now := at(300 * ms)
	c.Leave(now)
	reqs, chs := c.Ready()
	if len(chs) != 1 || !equalChange(chs[0], OwnershipChange{Revoked: []keyspace.Range{a, b}}) {
		t.Fatalf("Leave: changes %+v, want a and b revoked", chs)
	}
	if c.Expired() != 0 {
		t.Fatalf("Expired() = %d after Leave, want 0: a goodbye loses nothing", c.Expired())
	}
	r := one(t, reqs)
	if !r.Leaving || len(r.Held) != 0 || r.Seq != 2 || r.AckSeq != 1 {
		t.Fatalf("Leave sent %+v, want Leaving, nothing held, Seq 2 AckSeq 1", *r)
	}
	if _, ok := c.CheckLeaseNow(now, 50); ok {
		t.Fatalf("still holds a after Leave")
	}
	// A raced answer is not the Manager's acknowledgement.
	step(c, at(350*ms), resp(2, 1, grant(rng(300, 400), 9))).none(t)
	if c.Left() {
		t.Fatalf("Left() after a response that did not answer the goodbye")
	}
	// An answer in order that still lists leases did not act on the
	// goodbye (the Manager acts on no request that crossed its message):
	// nothing it offers is taken, and the goodbye is said again at once.
	step(c, at(400*ms), resp(3, 2, grant(rng(300, 400), 9))).none(t)
	if got := c.Held(at(400 * ms)); len(got) != 0 {
		t.Fatalf("after Leave, holds %v", got)
	}
	if c.Left() {
		t.Fatalf("Left() after an answer that still lists a lease")
	}
	if r := one(t, tick(c, at(400*ms)).reqs); !r.Leaving || len(r.Held) != 0 || r.Seq != 3 || r.AckSeq != 3 {
		t.Fatalf("after an answer that did not act on the goodbye, sent %+v, want Leaving again, Seq 3 AckSeq 3", *r)
	}
	// The answer to the goodbye lists nothing.
	step(c, at(450*ms), resp(4, 3)).none(t)
	if !c.Left() {
		t.Fatalf("Left() = false after the Manager answered the goodbye")
	}
	// Later requests still say the owner is leaving.
	if r := one(t, tick(c, at(400*ms).Add(tm.Renew)).reqs); !r.Leaving || len(r.Held) != 0 {
		t.Fatalf("renewal after Leave %+v, want Leaving and nothing held", *r)
	}
}

// TestAdoptManagerTimings: the Owner runs its leases and renewals on the
// Manager's OwnerLease and Renew, which the Manager's ManagerLease was
// validated against; absent or nonsensical values are ignored.
func TestAdoptManagerTimings(t *testing.T) {
	tests := []struct {
		name              string
		ownerLease, renew time.Duration
		wantLease         time.Duration
		wantRenew         time.Duration
	}{
		{"none sent", 0, 0, tm.OwnerLease, tm.Renew},
		{"longer", 3 * time.Second, time.Second, 3 * time.Second, time.Second},
		{"shorter", time.Second, 200 * ms, time.Second, 200 * ms},
		{"Renew not below OwnerLease", time.Second, time.Second, tm.OwnerLease, tm.Renew},
		{"OwnerLease only", 3 * time.Second, 0, tm.OwnerLease, tm.Renew},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(t)
			tick(c, base)
			m := resp(1, 1, grant(rng(0, 100), 5))
			m.OwnerLease, m.Renew = tc.ownerLease, tc.renew
			g := step(c, at(100*ms), m).chs[0].Granted[0]
			if want := at(tc.wantLease); !g.Expiry.Equal(want) {
				t.Errorf("lease expires at %v, want base+%v", g.Expiry, tc.wantLease)
			}
			if got, want := c.NextDeadline(), at(min(tc.wantRenew, tc.wantLease)); !got.Equal(want) {
				t.Errorf("NextDeadline() = %v, want the renewal at base+%v", got, tc.wantRenew)
			}
		})
	}
}

// TestReconnectedRenewsNow: when the transport reaches a Manager replica
// anew (a new leader, say), the Owner sends its complete held set at once
// instead of at the next renewal.
func TestReconnectedRenewsNow(t *testing.T) {
	c := newCore(t)
	first := tick(c, base).reqs
	if len(first) != 1 {
		t.Fatalf("first tick sent %d requests", len(first))
	}
	step(c, at(10*ms), resp(1, first[0].Seq, grant(rng(0, 1<<63), 3)))
	readyOf(c)
	if r := tick(c, at(100*ms)); len(r.reqs) != 0 {
		t.Fatalf("a request before the renewal was due: %+v", r.reqs)
	}
	c.Reconnected(at(100 * ms))
	r := readyOf(c)
	if len(r.reqs) != 1 || r.reqs[0].Seq != first[0].Seq+1 || len(listed(t, c, r.reqs[0])) != 1 || listed(t, c, r.reqs[0])[0].LGN != 3 {
		t.Fatalf("after Reconnected: %+v, want one request listing the held lease", r.reqs)
	}
	if got, want := c.NextDeadline(), at(100*ms+tm.Renew); got.After(want) {
		t.Fatalf("next renewal at %v, want by %v", got, want)
	}
}

// TestUncovered checks uncovered against the set arithmetic it stands for,
// on random held sets.
func TestUncovered(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var ls []Lease
		var k uint64
		for k < 56 {
			start := k + uint64(rnd.IntN(3))
			end := start + 1 + uint64(rnd.IntN(6))
			ls = append(ls, Lease{Range: rng(keyspace.Key(start<<58), keyspace.Key(end<<58)), Num: num(keyspace.LGN(1 + rnd.IntN(2)))})
			k = end
		}
		if rnd.IntN(2) == 0 {
			ls[len(ls)-1].Range.End = 0 // to the end of the key space
		}
		a := uint64(rnd.IntN(62))
		r := rng(keyspace.Key(a<<58), keyspace.Key((a+1+uint64(rnd.IntN(63-int(a))))<<58))
		if rnd.IntN(4) == 0 {
			r.End = 0
		}
		n := num(keyspace.LGN(1 + rnd.IntN(2)))
		var cover keyspace.RangeSet
		for _, l := range ls {
			if l.Num == n {
				cover = cover.Add(l.Range)
			}
		}
		want := keyspace.NewRangeSet(r).Subtract(cover).Ranges()
		if got := uncovered(r, ls, n); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("uncovered(%v, %v, %v) = %v, want %v", r, ls, n, got, want)
		}
	}
}

// TestAnswers: a response answers a request the Core remembers sending,
// its latest and the sentAtsKept before it; not one it never sent, nor
// one it has forgotten, nor a push (AckSeq 0).
func TestAnswers(t *testing.T) {
	c := newCore(t)
	if c.Answers(0) || c.Answers(1) {
		t.Fatal("a Core that has sent nothing answers something")
	}
	var last uint64
	for i := range sentAtsKept + 2 {
		last = one(t, tick(c, at(time.Duration(i)*tm.Renew)).reqs).Seq
	}
	for seq, want := range map[uint64]bool{0: false, 1: false, 2: false, 3: true, last - 1: true, last: true, last + 1: false} {
		if got := c.Answers(seq); got != want {
			t.Errorf("after %d requests, Answers(%d) = %v, want %v", last, seq, got, want)
		}
	}
}
