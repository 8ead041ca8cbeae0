package lookup

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// beat is a heartbeat: an empty delta at the table's LSN naming request k,
// received by the replica since before.
func beat(tab *leasetable.Table, k uint64, since time.Duration) *protocol.SyncResponse {
	m := push(tab.Since(tab.LSN()))
	m.Request, m.SinceRequest = k, since
	return m
}

// TestHeartbeatVouchesFromRequestSend: a heartbeat moves freshness to the
// named request's send time plus the replica's elapsed time shrunk by the
// drift — never to its arrival — and only when the copy holds its update.
func TestHeartbeatVouchesFromRequestSend(t *testing.T) {
	tab := leasetable.New(0)
	tab.Set(base, kr(0, 100), own("a", 1))
	c := newCore()
	tick(c, base)
	step(c, at(10*ms), answer(1, snapshot(tab)))
	if !c.Fresh().Equal(base) {
		t.Fatalf("Fresh() = %v after the answer, want the request's send time", c.Fresh())
	}
	// The replica received request 1 and, 2.1 s later on its clock, sent a
	// heartbeat that arrives at 3 s: our clock ran at least 2 s meanwhile.
	step(c, at(3*time.Second), beat(tab, 1, 2100*ms)).none(t)
	if want := at(2 * time.Second); !c.Fresh().Equal(want) {
		t.Fatalf("Fresh() = %v, want %v (send + 2.1 s / 1.05)", c.Fresh(), want)
	}
	if want := at(2*time.Second + tm.Sync); !c.NextDeadline().Equal(want) {
		t.Fatalf("NextDeadline() = %v, want the copy Sync old at %v", c.NextDeadline(), want)
	}
	// An older heartbeat, one naming no request or one we never sent
	// vouch for nothing newer.
	for _, m := range []*protocol.SyncResponse{beat(tab, 1, 1*time.Second), beat(tab, 0, 9*time.Second), beat(tab, 7, 9*time.Second)} {
		step(c, at(3100*ms), m).none(t)
		if want := at(2 * time.Second); !c.Fresh().Equal(want) {
			t.Fatalf("Fresh() = %v after %+v, want %v", c.Fresh(), m, want)
		}
	}
	// A heartbeat past the copy's LSN shows a lost push: it vouches for
	// nothing and asks for what is missing.
	tab.Set(base, kr(100, 200), own("b", 2))
	r := step(c, at(3200*ms), beat(tab, 1, 3*time.Second))
	if oneReq(t, r.reqs).ID != 2 {
		t.Fatalf("no repair poll after a heartbeat beyond the copy")
	}
	if want := at(2 * time.Second); !c.Fresh().Equal(want) {
		t.Fatalf("Fresh() = %v after a heartbeat beyond the copy, want %v", c.Fresh(), want)
	}
	// A push that vouches counts once the copy holds it.
	m := push(delta(t, tab, 1))
	m.Request, m.SinceRequest = 1, 3150*ms
	step(c, at(3300*ms), m)
	if want := at(3 * time.Second); !c.Fresh().Equal(want) {
		t.Fatalf("Fresh() = %v after a vouching push, want %v", c.Fresh(), want)
	}
}

// TestHeartbeatBrokenRules: the broken twins the simulation must catch
// take the arrival time, or the replica's elapsed time as it is.
func TestHeartbeatBrokenRules(t *testing.T) {
	tab := leasetable.New(0)
	for _, tc := range []struct {
		f    faults.Set
		want time.Time
	}{
		{faults.Set{}, at(2 * time.Second)},
		{faults.Set{FreshAtReceipt: true}, at(3 * time.Second)},
		{faults.Set{FreshWithoutDrift: true}, at(2100 * ms)},
	} {
		c := newCore()
		faults.Lookup(c, tc.f)
		tick(c, base)
		step(c, at(10*ms), answer(1, snapshot(tab)))
		step(c, at(3*time.Second), beat(tab, 1, 2100*ms))
		if !c.Fresh().Equal(tc.want) {
			t.Errorf("%+v: Fresh() = %v, want %v", tc.f, c.Fresh(), tc.want)
		}
	}
}

// TestHeartbeatsDeferPolls drives a Core for a virtual minute against a
// replica that answers at once and sends a heartbeat whenever it has sent
// nothing for HeartbeatEvery, over 5 ms links, with the Lookup's clock as
// fast as the replica's. The copy never ages past Sync, and the Lookup
// polls only when the drift it must allow for has aged the copy: under a
// sixth as often as every Sync.
func TestHeartbeatsDeferPolls(t *testing.T) {
	tab := leasetable.New(0)
	const delay = 5 * ms
	for _, beats := range []bool{false, true} {
		c := newCore()
		var (
			recvAt  time.Time // when the replica received the newest request
			newest  uint64
			lastOut time.Time
			inbox   []struct {
				at time.Time
				m  *protocol.SyncResponse
			}
		)
		now := base
		worst := time.Duration(0)
		for end := at(time.Minute); now.Before(end); now = now.Add(10 * ms) {
			for len(inbox) > 0 && !inbox[0].at.After(now) {
				c.Step(inbox[0].at, inbox[0].m)
				inbox = inbox[1:]
			}
			if !now.Before(c.NextDeadline()) {
				c.Tick(now)
			}
			reqs, _ := c.Ready()
			for _, r := range reqs {
				recvAt, newest = now.Add(delay), r.ID
				var u leasetable.Update
				if r.Epoch == 0 {
					u = snapshot(tab)
				} else {
					u = tab.Since(r.LSN)
				}
				lastOut = recvAt
				inbox = append(inbox, struct {
					at time.Time
					m  *protocol.SyncResponse
				}{recvAt.Add(delay), answer(r.ID, u)})
			}
			if beats && newest != 0 && now.Sub(lastOut) >= tm.HeartbeatEvery() {
				lastOut = now
				inbox = append(inbox, struct {
					at time.Time
					m  *protocol.SyncResponse
				}{now.Add(delay), beat(tab, newest, now.Sub(recvAt))})
			}
			if !c.Fresh().IsZero() {
				worst = max(worst, now.Sub(c.Fresh()))
			}
		}
		t.Logf("heartbeats %v: %d polls a minute, the copy at most %v old", beats, c.Polls(), worst)
		if worst > tm.Sync+50*ms {
			t.Errorf("heartbeats %v: the copy aged to %v, past Sync", beats, worst)
		}
		if !beats && c.Polls() < 55 {
			t.Errorf("without heartbeats %d polls a minute, want about one per Sync", c.Polls())
		}
		if beats && c.Polls() > 10 {
			t.Errorf("with heartbeats %d polls a minute, want under a sixth of one per Sync", c.Polls())
		}
	}
}
