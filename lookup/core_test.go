package lookup

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// base is the fixed start of every test clock: the Lookup starts here.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

const ms = time.Millisecond

// tm is the timing of every test: Fast, whose numbers the comments quote
// (Sync 1 s, SyncTimeout 2.5 s).
var tm = protocol.Fast()

const (
	ns    = "default"
	epoch = 5
)

func kr(s, e keyspace.Key) keyspace.Range { return keyspace.Range{Start: s, End: e} }

func own(owner string, lgn keyspace.LGN) leasetable.Entry {
	return leasetable.Entry{Owner: owner, Addr: owner + ":7000", LGN: lgn}
}

func newCore() *Core { return NewCore(CoreConfig{Namespace: ns, Timing: tm}, base) }

// answer is the Manager's answer to request id, carrying u.
func answer(id uint64, u leasetable.Update) *protocol.SyncResponse {
	return &protocol.SyncResponse{Namespace: ns, ID: id, Epoch: epoch, Update: u}
}

// push is an unsolicited Manager push carrying u.
func push(u leasetable.Update) *protocol.SyncResponse { return answer(0, u) }

func snapshot(tab *leasetable.Table) leasetable.Update {
	return leasetable.Update{To: tab.LSN(), Snapshot: true, Segments: tab.Segments()}
}

// delta returns the table's changes after from; it fails t on a snapshot.
func delta(t *testing.T, tab *leasetable.Table, from keyspace.LSN) leasetable.Update {
	t.Helper()
	u := tab.Since(from)
	if u.Snapshot {
		t.Fatalf("Since(%d) is a snapshot", from)
	}
	return u
}

type ready struct {
	reqs   []*protocol.SyncRequest
	losses []Loss
}

func readyOf(c *Core) ready {
	reqs, losses := c.Ready()
	return ready{reqs, losses}
}

func tick(c *Core, now time.Time) ready {
	c.Tick(now)
	return readyOf(c)
}

func step(c *Core, now time.Time, m *protocol.SyncResponse) ready {
	c.Step(now, m)
	return readyOf(c)
}

func (r ready) none(t *testing.T) {
	t.Helper()
	if len(r.reqs) != 0 || len(r.losses) != 0 {
		t.Fatalf("got requests %v and losses %v, want none", r.reqs, r.losses)
	}
}

func oneReq(t *testing.T, reqs []*protocol.SyncRequest) *protocol.SyncRequest {
	t.Helper()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests %v, want 1", len(reqs), reqs)
	}
	return reqs[0]
}

// sameView fails t unless c's copy is the table.
func sameView(t *testing.T, c *Core, tab *leasetable.Table) {
	t.Helper()
	if c.View().LSN() != tab.LSN() || !slices.Equal(c.View().Segments(), tab.Segments()) {
		t.Fatalf("view at LSN %d %v, want LSN %d %v", c.View().LSN(), c.View().Segments(), tab.LSN(), tab.Segments())
	}
}

// synced returns a Lookup that sent request 1 at base and applied a
// snapshot of tab in answer at base+10ms.
func synced(t *testing.T, tab *leasetable.Table) *Core {
	t.Helper()
	c := newCore()
	oneReq(t, tick(c, base).reqs)
	step(c, at(10*ms), answer(1, snapshot(tab))).none(t)
	sameView(t, c, tab)
	return c
}

func TestFirstTick(t *testing.T) {
	c := newCore()
	if d := c.NextDeadline(); d.After(base) {
		t.Fatalf("NextDeadline() = %v, want the start", d)
	}
	r := tick(c, base)
	if len(r.losses) != 0 {
		t.Fatalf("losses %v at start", r.losses)
	}
	want := protocol.SyncRequest{Namespace: ns, ID: 1, Epoch: 0, LSN: 0, Heartbeats: true, MaxDrift: tm.MaxDrift}
	if got := oneReq(t, r.reqs); *got != want {
		t.Fatalf("first request %+v, want %+v", *got, want)
	}
	// Unanswered: asked again sooner than Sync.
	if d := c.NextDeadline(); !d.After(base) || !d.Before(at(tm.Sync)) {
		t.Fatalf("NextDeadline() = %v, want a retry before base+Sync", d)
	}
}

func TestApplyUpdates(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	tab.Set(base, kr(100, 200), own("b", 2))
	c := newCore()
	oneReq(t, tick(c, base).reqs)

	// The snapshot sets the epoch and the copy; nothing was owned, so
	// nothing is lost.
	step(c, at(10*ms), answer(1, snapshot(tab))).none(t)
	if c.Epoch() != epoch {
		t.Fatalf("Epoch() = %d, want %d", c.Epoch(), epoch)
	}
	sameView(t, c, tab)
	if o, addr, lgn, ok := c.Lookup(150); o != "b" || addr != "b:7000" || lgn != 2 || !ok {
		t.Fatalf("Lookup(150) = %q %q %d %v, want b", o, addr, lgn, ok)
	}
	l2 := tab.LSN()

	// A delta applies.
	tab.Set(base, kr(200, 300), own("c", 3))
	step(c, at(20*ms), push(delta(t, tab, l2))).none(t)
	sameView(t, c, tab)
	l3 := tab.LSN()

	// A delta overlapping what the copy has is trimmed and applied.
	tab.Set(base, kr(300, 400), own("d", 4))
	step(c, at(30*ms), push(delta(t, tab, l2))).none(t)
	sameView(t, c, tab)

	// A delta the copy has entirely changes nothing.
	step(c, at(40*ms), push(delta(t, tab, l3))).none(t)
	sameView(t, c, tab)

	// A gap: a push was lost. The copy stays; the Lookup asks at once.
	l4 := tab.LSN()
	tab.Set(base, kr(400, 500), own("e", 5))
	tab.Set(base, kr(500, 600), own("f", 6))
	r := step(c, at(50*ms), push(delta(t, tab, l4+1)))
	if len(r.losses) != 0 {
		t.Fatalf("losses %v on a gap", r.losses)
	}
	want := protocol.SyncRequest{Namespace: ns, ID: 2, Epoch: epoch, LSN: l4, Heartbeats: true, MaxDrift: tm.MaxDrift}
	if got := oneReq(t, r.reqs); *got != want {
		t.Fatalf("request after the gap %+v, want %+v", *got, want)
	}
	if c.View().LSN() != l4 {
		t.Fatalf("view moved to LSN %d on a gap, want %d", c.View().LSN(), l4)
	}
	step(c, at(60*ms), answer(2, delta(t, tab, l4))).none(t)
	sameView(t, c, tab)
}

// TestLossNotifications: a loss notification for every LGN change that
// is not a migration (C§2.2, P§4.2), by delta or by snapshot diff.
func TestLossNotifications(t *testing.T) {
	a1, b2 := own("a", 1), own("b", 2)
	migrated := own("c", 9)
	migrated.Migrated, migrated.MigratedFrom = true, 1
	tests := []struct {
		name     string
		change   func(tab *leasetable.Table)
		snapshot bool // deliver as a snapshot instead of a delta
		want     []keyspace.Range
	}{
		{"owned to free", func(tab *leasetable.Table) { tab.Set(base, kr(0, 100), leasetable.Entry{}) }, false,
			[]keyspace.Range{kr(0, 100)}},
		{"part of a range freed", func(tab *leasetable.Table) { tab.Set(base, kr(20, 30), leasetable.Entry{}) }, false,
			[]keyspace.Range{kr(20, 30)}},
		{"owned to free to owned, once", func(tab *leasetable.Table) {
			tab.Set(base, kr(0, 100), leasetable.Entry{})
			tab.Set(base, kr(0, 100), own("c", 9))
		}, false, []keyspace.Range{kr(0, 100)}},
		{"new LGN for the same owner", func(tab *leasetable.Table) { tab.Set(base, kr(0, 100), own("a", 9)) }, false,
			[]keyspace.Range{kr(0, 100)}},
		{"migrated grant", func(tab *leasetable.Table) { tab.Set(base, kr(0, 100), migrated) }, false, nil},
		{"free to owned", func(tab *leasetable.Table) { tab.Set(base, kr(200, 300), own("c", 9)) }, false, nil},
		{"snapshot: owned to free", func(tab *leasetable.Table) { tab.Set(base, kr(0, 100), leasetable.Entry{}) }, true,
			[]keyspace.Range{kr(0, 100)}},
		{"snapshot: free and regranted", func(tab *leasetable.Table) {
			tab.Set(base, kr(100, 200), leasetable.Entry{})
			tab.Set(base, kr(100, 200), own("c", 9))
		}, true, []keyspace.Range{kr(100, 200)}},
		{"snapshot: both", func(tab *leasetable.Table) {
			tab.Set(base, kr(0, 100), own("c", 9))
			tab.Set(base, kr(100, 200), own("c", 10))
		}, true, []keyspace.Range{kr(0, 200)}},
		{"snapshot: migrated", func(tab *leasetable.Table) { tab.Set(base, kr(0, 100), migrated) }, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := leasetable.New(0)
			tab.Set(base, kr(0, 100), a1)
			tab.Set(base, kr(100, 200), b2)
			c := synced(t, tab)
			from := tab.LSN()
			tc.change(tab)
			u := tab.Since(from)
			if tc.snapshot {
				u = snapshot(tab)
			} else if u.Snapshot {
				t.Fatalf("Since(%d) is a snapshot", from)
			}
			r := step(c, at(20*ms), push(u))
			sameView(t, c, tab)
			if len(r.reqs) != 0 {
				t.Fatalf("requests %v", r.reqs)
			}
			if tc.want == nil {
				if len(r.losses) != 0 {
					t.Fatalf("losses %v, want none", r.losses)
				}
				return
			}
			if len(r.losses) != 1 || r.losses[0].All || !slices.Equal(r.losses[0].Ranges, tc.want) {
				t.Fatalf("losses %+v, want one loss on %v", r.losses, tc.want)
			}
		})
	}
}

// TestNewEpoch: a Manager that lost its state has a new epoch; every range
// the copy had owned is lost, whatever the new table says.
func TestNewEpoch(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	tab.Set(base, kr(200, 300), own("b", 2))
	c := synced(t, tab)

	// The new Manager's table happens to look the same.
	fresh := leasetable.New(0)
	fresh.Set(base, kr(0, 100), own("a", 1))
	newer := func(id uint64, u leasetable.Update) *protocol.SyncResponse {
		m := answer(id, u)
		m.Epoch = epoch + 1
		return m
	}

	// A delta of the new epoch cannot apply: ask for its snapshot, at once.
	r := step(c, at(20*ms), newer(0, delta(t, fresh, 0)))
	if len(r.losses) != 0 || c.Epoch() != epoch {
		t.Fatalf("a delta of a new epoch: losses %v, epoch %d", r.losses, c.Epoch())
	}
	req := oneReq(t, r.reqs)

	r = step(c, at(30*ms), newer(req.ID, snapshot(fresh)))
	if c.Epoch() != epoch+1 {
		t.Fatalf("Epoch() = %d, want %d", c.Epoch(), epoch+1)
	}
	sameView(t, c, fresh)
	want := []keyspace.Range{kr(0, 100), kr(200, 300)}
	if len(r.losses) != 1 || !slices.Equal(r.losses[0].Ranges, want) {
		t.Fatalf("losses %+v, want one loss on %v", r.losses, want)
	}
}

// TestIgnoredResponses: answers of another namespace or an older (or no)
// epoch are not applied.
func TestIgnoredResponses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*protocol.SyncResponse)
	}{
		{"another namespace", func(m *protocol.SyncResponse) { m.Namespace = "other" }},
		{"older epoch", func(m *protocol.SyncResponse) { m.Epoch = epoch - 1 }},
		{"epoch 0", func(m *protocol.SyncResponse) { m.Epoch = 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := leasetable.New(0)
			tab.Set(base, kr(0, 100), own("a", 1))
			c := synced(t, tab)
			before := tab.LSN()
			oneReq(t, tick(c, at(tm.Sync)).reqs) // request 2, sent at 1 s

			// Free a's range: applying it would raise a loss.
			tab.Set(base, kr(0, 100), leasetable.Entry{})
			for _, m := range []*protocol.SyncResponse{answer(2, delta(t, tab, before)), answer(2, snapshot(tab))} {
				tc.mutate(m)
				step(c, at(tm.Sync+10*ms), m).none(t)
			}
			if c.View().LSN() != before || c.Epoch() != epoch {
				t.Fatalf("view moved to LSN %d epoch %d", c.View().LSN(), c.Epoch())
			}
			// Nor do they count as an answer: the copy is stale SyncTimeout
			// after request 1, sent at base.
			if r := tick(c, at(tm.SyncTimeout)); len(r.losses) != 1 || !r.losses[0].All {
				t.Fatalf("at base+SyncTimeout: losses %+v, want Loss{All}", r.losses)
			}
		})
	}
}

// driver runs a Lookup against a static table over a link that answers
// each request after a delay, or not at all, as a Lookup runtime would:
// Tick at NextDeadline, Step as answers arrive.
type driver struct {
	c   *Core
	tab *leasetable.Table
	// delay returns how long the answer to a request sent at sent takes,
	// and false if it is lost.
	delay func(sent time.Time) (time.Duration, bool)

	inflight []delivery
	answered []time.Time // send times of the requests answered
	allLost  []time.Time // when Loss{All} was raised
}

type delivery struct {
	at   time.Time
	sent time.Time
	m    *protocol.SyncResponse
}

func (d *driver) run(t *testing.T, until time.Time) {
	t.Helper()
	var last time.Time
	for same := 0; ; same++ {
		now := d.c.NextDeadline()
		if now.After(last) {
			last, same = now, 0
		}
		if same > 1000 {
			t.Fatalf("the Lookup asks to be ticked at %v over and over", now)
		}
		deliver := len(d.inflight) > 0 && !d.inflight[0].at.After(now)
		if deliver {
			now = d.inflight[0].at
		}
		if now.After(until) {
			return
		}
		var r ready
		if deliver {
			x := d.inflight[0]
			d.inflight = d.inflight[1:]
			d.answered = append(d.answered, x.sent)
			r = step(d.c, now, x.m)
		} else {
			r = tick(d.c, now)
		}
		for _, l := range r.losses {
			if l.All {
				if len(l.Ranges) != 1 || l.Ranges[0] != keyspace.Full {
					t.Fatalf("Loss{All} on %v, want the whole key space", l.Ranges)
				}
				d.allLost = append(d.allLost, now)
			}
		}
		for _, q := range r.reqs {
			wait, ok := d.delay(now)
			if !ok {
				continue
			}
			u := d.tab.Since(q.LSN)
			if q.Epoch != epoch {
				u = snapshot(d.tab)
			}
			d.inflight = append(d.inflight, delivery{now.Add(wait), now, answer(q.ID, u)})
			slices.SortStableFunc(d.inflight, func(a, b delivery) int { return a.at.Compare(b.at) })
		}
	}
}

// TestConservativeNotification: a Lookup that has applied no answer to a
// request sent within SyncTimeout raises a loss on everything (P§2.1), at
// exactly SyncTimeout after the last answered request was sent, and again
// every SyncTimeout while cut off.
func TestConservativeNotification(t *testing.T) {
	cut := at(time.Second)
	tests := []struct {
		name  string
		delay func(sent time.Time) (time.Duration, bool)
		// want computes the expected Loss{All} times from the send time of
		// the last answered request (zero if none was answered).
		want func(last time.Time) []time.Time
	}{
		{"never answered",
			func(time.Time) (time.Duration, bool) { return 0, false },
			func(time.Time) []time.Time {
				return []time.Time{at(tm.SyncTimeout), at(2 * tm.SyncTimeout), at(3 * tm.SyncTimeout)}
			}},
		{"answered after 10ms",
			func(time.Time) (time.Duration, bool) { return 10 * ms, true },
			func(time.Time) []time.Time { return nil }},
		{"answered after 1s",
			func(time.Time) (time.Duration, bool) { return time.Second, true },
			func(time.Time) []time.Time { return nil }},
		{"cut off after 1s",
			func(sent time.Time) (time.Duration, bool) { return 10 * ms, sent.Before(cut) },
			func(last time.Time) []time.Time {
				return []time.Time{last.Add(tm.SyncTimeout), last.Add(2 * tm.SyncTimeout), last.Add(3 * tm.SyncTimeout)}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := leasetable.New(0)
			tab.Set(base, kr(0, 100), own("a", 1))
			d := &driver{c: newCore(), tab: tab, delay: tc.delay}
			until := at(3*tm.SyncTimeout + 900*ms)
			d.run(t, until)
			var last time.Time
			if len(d.answered) > 0 {
				last = slices.MaxFunc(d.answered, time.Time.Compare)
			}
			var want []time.Time
			for _, w := range tc.want(last) {
				if !w.After(until) {
					want = append(want, w)
				}
			}
			if !slices.EqualFunc(d.allLost, want, time.Time.Equal) {
				t.Fatalf("Loss{All} at %v, want at %v (last answered request sent at %v)", d.allLost, want, last)
			}
		})
	}
}

// TestNextDeadline: the next poll, or the moment the copy goes stale if
// that is sooner.
func TestNextDeadline(t *testing.T) {
	tab := leasetable.New(0)
	tests := []struct {
		name string
		run  func(c *Core)
		want time.Time
	}{
		{"unanswered: retry at Sync/4", func(c *Core) { tick(c, base) }, at(tm.Sync / 4)},
		{"answered: poll when the copy is Sync old", func(c *Core) {
			tick(c, base)
			step(c, at(10*ms), answer(1, snapshot(tab)))
			tick(c, at(250*ms)) // no retry: the poll was answered
		}, at(tm.Sync)},
		{"stale before the next poll", func(c *Core) {
			tick(c, base)
			tick(c, at(2400*ms)) // late: the next poll would be at 2.65 s
		}, at(tm.SyncTimeout)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore()
			tc.run(c)
			if got := c.NextDeadline(); !got.Equal(tc.want) {
				t.Fatalf("NextDeadline() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFreshnessFromSend: an answer vouches for the copy from when its
// request was sent, not from when it arrived, and a push vouches for
// nothing.
func TestFreshnessFromSend(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	tests := []struct {
		name string
		// deliver is called after requests 1 (sent at base) and 2 (sent
		// at 250ms) are out, at 2.4 s.
		deliver   func(c *Core, now time.Time)
		firstLoss time.Time
	}{
		{"nothing arrives", func(*Core, time.Time) {}, at(tm.SyncTimeout)},
		{"answer to request 1 arrives late", func(c *Core, now time.Time) {
			c.Step(now, answer(1, snapshot(tab)))
		}, at(tm.SyncTimeout)},
		{"answer to request 2 arrives late", func(c *Core, now time.Time) {
			c.Step(now, answer(2, snapshot(tab)))
		}, at(250*ms + tm.SyncTimeout)},
		{"push arrives", func(c *Core, now time.Time) {
			c.Step(now, push(snapshot(tab)))
		}, at(tm.SyncTimeout)},
		{"answer to a request never sent", func(c *Core, now time.Time) {
			c.Step(now, answer(99, snapshot(tab)))
		}, at(tm.SyncTimeout)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore()
			oneReq(t, tick(c, base).reqs)
			if d := c.NextDeadline(); !d.Equal(at(250 * ms)) {
				t.Fatalf("retry at %v, want 250ms (Sync/4)", d)
			}
			oneReq(t, tick(c, at(250*ms)).reqs)
			arrive := at(2400 * ms)
			tc.deliver(c, arrive)
			c.Ready()
			if c.View().LSN() != 0 && c.View().LSN() != tab.LSN() {
				t.Fatalf("view at LSN %d", c.View().LSN())
			}
			for _, now := range []time.Time{tc.firstLoss.Add(-1), tc.firstLoss} {
				r := tick(c, now)
				gotLoss := slices.ContainsFunc(r.losses, func(l Loss) bool { return l.All })
				if want := now.Equal(tc.firstLoss); gotLoss != want {
					t.Fatalf("Tick(%v): Loss{All} %v, want %v", now, gotLoss, want)
				}
			}
		})
	}
}

// TestAdoptManagerTimings: the Lookup polls and bounds staleness with the
// Manager's Sync and SyncTimeout, the bound documented to applications;
// absent or nonsensical values, and ignored responses, change nothing.
func TestAdoptManagerTimings(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	tests := []struct {
		name          string
		sync, timeout time.Duration
		namespace     string
		wantTimeout   time.Duration
	}{
		{"none sent", 0, 0, ns, tm.SyncTimeout},
		{"longer", 2 * time.Second, 5 * time.Second, ns, 5 * time.Second},
		{"shorter", 400 * ms, time.Second, ns, time.Second},
		{"SyncTimeout not above Sync", 2 * time.Second, 2 * time.Second, ns, tm.SyncTimeout},
		{"from another namespace", 2 * time.Second, 5 * time.Second, "other", tm.SyncTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore()
			oneReq(t, tick(c, base).reqs)
			m := answer(1, snapshot(tab))
			m.Sync, m.SyncTimeout, m.Namespace = tc.sync, tc.timeout, tc.namespace
			step(c, at(10*ms), m)
			c.Ready()
			// No further answer: the first Loss{All} comes SyncTimeout after
			// request 1 was sent, at base.
			for _, now := range []time.Time{at(tc.wantTimeout).Add(-1), at(tc.wantTimeout)} {
				r := tick(c, now)
				gotLoss := slices.ContainsFunc(r.losses, func(l Loss) bool { return l.All })
				if want := now.Equal(at(tc.wantTimeout)); gotLoss != want {
					t.Fatalf("Tick(%v): Loss{All} %v, want %v", now, gotLoss, want)
				}
			}
		})
	}
}

// TestEpochZeroManagerIsHeard: a Lookup reads Epoch 0 as "no copy yet" and
// drops responses carrying it, so lease.NewCore takes a zero Epoch as 1.
// Otherwise a Manager built with the zero-value config would never be heard
// by any Lookup.
func TestEpochZeroManagerIsHeard(t *testing.T) {
	m := lease.NewCore(lease.Settings{Timing: tm}, base)
	f := replica.NewFeed(m.State(), tm)
	c := newCore()
	req := oneReq(t, tick(c, base).reqs)
	if err := f.StepSync(base, 1, req); err != nil {
		t.Fatal(err)
	}
	for _, msg := range f.Ready() {
		c.Step(at(10*ms), msg.Msg)
	}
	if c.Epoch() == 0 {
		t.Fatalf("the Lookup ignored the answer of a Manager configured with Epoch 0 (manager epoch %d)", m.Epoch())
	}
	c.Ready()
	if r := tick(c, at(tm.SyncTimeout-1)); len(r.losses) != 0 {
		t.Fatalf("a Lookup that synced with the Manager at base raised %+v before base+SyncTimeout", r.losses)
	}
}

// TestAdoptedSyncBringsPollForward: a Lookup configured with production
// timings that meets a fast Manager must poll on the Manager's interval at
// once, or its copy would go stale under the Manager's short SyncTimeout
// and it would raise false losses on every range.
func TestAdoptedSyncBringsPollForward(t *testing.T) {
	slow := protocol.Production()
	c := NewCore(CoreConfig{Namespace: ns, Timing: slow}, base)
	oneReq(t, tick(c, base).reqs)
	tab := leasetable.New(0)
	m := answer(1, snapshot(tab))
	m.Sync, m.SyncTimeout = time.Second, 2500*ms
	step(c, at(10*ms), m)
	c.Ready()
	if d := c.NextDeadline(); d.After(at(10*ms + time.Second)) {
		t.Fatalf("after adopting Sync 1s at +10ms, the next poll is at %v, want by %v", d.Sub(base), 10*ms+time.Second)
	}
	r := tick(c, c.NextDeadline())
	if len(r.reqs) != 1 {
		t.Fatalf("no poll at the adopted interval: %+v", r)
	}
}

// TestGapRepairIsBounded: after a lost push, every later push shows a gap
// until the repair arrives. One repair request must serve them all, or an
// overloaded Lookup would ask the Manager for a delta per push and fall
// further behind.
func TestGapRepairIsBounded(t *testing.T) {
	tab := leasetable.New(0)
	c := newCore()
	req := oneReq(t, tick(c, base).reqs)
	step(c, at(10*ms), answer(req.ID, snapshot(tab)))
	lsn := tab.LSN()
	// The first change's push is lost; the next ten arrive with gaps.
	tab.Set(base, kr(0, 10), own("a", 1))
	var asked []*protocol.SyncRequest
	for i := range 10 {
		from := tab.LSN()
		tab.Set(base, kr(keyspace.Key(10+i), keyspace.Key(11+i)), own("a", keyspace.LGN(2+i)))
		asked = append(asked, step(c, at(20*ms+time.Duration(i)*ms), push(delta(t, tab, from))).reqs...)
	}
	if len(asked) != 1 {
		t.Fatalf("%d sync requests for one gap, want 1", len(asked))
	}
	// The repair's answer fills the gap, and a later gap may ask again.
	step(c, at(40*ms), answer(asked[0].ID, delta(t, tab, lsn)))
	sameView(t, c, tab)
	from := tab.LSN()
	tab.Set(base, kr(100, 110), own("b", 50))
	tab.Set(base, kr(110, 120), own("b", 51))
	u := delta(t, tab, from)
	u.From, u.Changes = u.From+1, u.Changes[1:] // the first of the two is lost
	if r := step(c, at(50*ms), push(u)); len(r.reqs) != 1 {
		t.Fatalf("a new gap after a repair sent %d requests, want 1", len(r.reqs))
	}
}

// TestReconnectedSyncsNow: a Lookup whose transport reaches a Manager
// replica anew asks it for a sync at once (which also subscribes it to
// that replica's pushes) instead of at the next poll.
func TestReconnectedSyncsNow(t *testing.T) {
	c := newCore()
	first := tick(c, base).reqs
	if len(first) != 1 {
		t.Fatalf("first tick sent %d requests", len(first))
	}
	tab := leasetable.New(0)
	step(c, at(10*ms), answer(first[0].ID, snapshot(tab)))
	if r := tick(c, at(100*ms)); len(r.reqs) != 0 {
		t.Fatalf("a sync before the poll was due: %+v", r.reqs)
	}
	c.Reconnected(at(100 * ms))
	if r := readyOf(c); len(r.reqs) != 1 || r.reqs[0].Epoch != epoch {
		t.Fatalf("after Reconnected: %+v, want one sync of the epoch-%d copy", r.reqs, epoch)
	}
}

// TestCompactDeltaThatDoesNotFit: a compact push names its ranges by their
// start, the End to be read from the copy at the delta's From
// (leasetable.Change.FromCopy). A push that does not fit the copy — a
// range whose start is no segment's start there, or a copy past From — is
// refused whole: the copy stays as it was, no loss is reported from it,
// and the Lookup polls; the answer, in the full form, brings the copy up.
func TestCompactDeltaThatDoesNotFit(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	tab.Set(base, kr(100, 200), own("b", 2))
	c := synced(t, tab)
	from := tab.LSN()
	// a's range is taken by c; the push names it by its start alone.
	tab.Set(base, kr(0, 100), own("c", 3))
	fits := leasetable.MarkFromCopy(delta(t, tab, from))
	if !fits.Changes[0].FromCopy {
		t.Fatalf("the change of a whole segment is not marked FromCopy: %v", fits.Changes)
	}
	fits.Changes[0].Range.End = 0
	misfit := fits
	misfit.Changes = slices.Clone(fits.Changes)
	misfit.Changes[0].Range.Start = 50 // no segment of the copy starts there
	before := c.View().Segments()
	r := step(c, at(20*ms), push(misfit))
	if len(r.losses) != 0 || !slices.Equal(c.View().Segments(), before) || c.View().LSN() != from {
		t.Fatalf("a push that does not fit changed the copy (LSN %d, %v) or reported %v", c.View().LSN(), c.View().Segments(), r.losses)
	}
	req := oneReq(t, r.reqs)
	if req.LSN != from {
		t.Fatalf("the poll after a push that does not fit asks from LSN %d, want %d", req.LSN, from)
	}
	r = step(c, at(30*ms), answer(req.ID, delta(t, tab, from)))
	sameView(t, c, tab)
	if len(r.losses) != 1 || !slices.Equal(r.losses[0].Ranges, []keyspace.Range{kr(0, 100)}) {
		t.Fatalf("losses %v, want a's range", r.losses)
	}

	// A copy past the push's From cannot read the push's ranges: refused
	// and repaired too, though the first of its changes is one it has.
	from = tab.LSN()
	tab.Set(base, kr(100, 200), own("d", 4))
	tab.Set(base, kr(0, 100), own("e", 5))
	both := leasetable.MarkFromCopy(delta(t, tab, from))
	both.Changes = slices.Clone(both.Changes)
	for i := range both.Changes {
		both.Changes[i].Range.End = 0
	}
	first := delta(t, tab, from)
	first.To, first.Changes = from+1, first.Changes[:1]
	step(c, at(2*time.Second), push(first))
	if c.View().LSN() != from+1 {
		t.Fatalf("copy at LSN %d, want %d", c.View().LSN(), from+1)
	}
	r = step(c, at(2*time.Second+ms), push(both))
	if c.View().LSN() != from+1 || len(r.losses) != 0 {
		t.Fatalf("a compact push from before the copy's LSN was applied: LSN %d, losses %v", c.View().LSN(), r.losses)
	}
	req = oneReq(t, r.reqs)
	step(c, at(2*time.Second+2*ms), answer(req.ID, delta(t, tab, req.LSN)))
	sameView(t, c, tab)
	// And a compact push that fits is applied, its ends read from the copy.
	c2 := synced(t, tab)
	from = tab.LSN()
	tab.Set(base, kr(0, 100), own("f", 6))
	u := leasetable.MarkFromCopy(delta(t, tab, from))
	u.Changes[0].Range.End = 0
	r = step(c2, at(40*ms), push(u))
	sameView(t, c2, tab)
	if len(r.reqs) != 0 || len(r.losses) != 1 {
		t.Fatalf("a compact push that fits: requests %v, losses %v", r.reqs, r.losses)
	}
	// What OnUpdate is handed: the changes as applied, ends and owners in.
	u2 := leasetable.MarkFromCopy(delta(t, tab, tab.LSN()-1))
	if got := c2.Applied().Changes; len(got) != 1 || got[0].Range != kr(0, 100) || got[0].Entry.Owner != "f" || got[0].Entry.Addr != "f:7000" {
		t.Fatalf("Applied() = %v, want %v", got, u2.Changes)
	}
	// With the owner left to the copy too.
	from = tab.LSN()
	tab.Set(base, kr(100, 200), own("f", 7)) // the range after f's
	u = leasetable.MarkFromCopy(delta(t, tab, from))
	if !u.Changes[0].OwnerFromCopy {
		t.Fatalf("a grant to the Owner of the range before it is not OwnerFromCopy: %v", u.Changes)
	}
	u.Changes[0].Range.End, u.Changes[0].Entry.Owner, u.Changes[0].Entry.Addr = 0, "", ""
	step(c2, at(50*ms), push(u))
	sameView(t, c2, tab)
	if got := c2.Applied().Changes; len(got) != 1 || got[0].Range != kr(100, 200) || got[0].Entry.Owner != "f" || got[0].Entry.Addr != "f:7000" {
		t.Fatalf("Applied() = %v", got)
	}
}
