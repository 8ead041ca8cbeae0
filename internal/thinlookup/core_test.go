package thinlookup

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func one(t *testing.T, c *Core) *protocol.SyncRequest {
	t.Helper()
	out := c.Ready()
	if len(out) != 1 {
		t.Fatalf("%d requests, want 1", len(out))
	}
	return out[0]
}

func none(t *testing.T, c *Core) {
	t.Helper()
	if out := c.Ready(); len(out) != 0 {
		t.Fatalf("%d requests, want none: %+v", len(out), out[0])
	}
}

// answer is the Manager's answer to r: a snapshot at lsn in epoch.
func answer(r *protocol.SyncRequest, epoch uint64, lsn keyspace.LSN, tm protocol.Timing) *protocol.SyncResponse {
	return &protocol.SyncResponse{Namespace: "default", ID: r.ID, Epoch: epoch,
		Update: leasetable.Update{To: lsn, Snapshot: r.Epoch != epoch},
		Sync:   tm.Sync, SyncTimeout: tm.SyncTimeout, MaxDrift: tm.MaxDrift}
}

// TestPollsEverySyncWithoutHeartbeats: answered polls alone keep the
// Lookup polling every Sync, as lookup.Core does, and an unanswered one is
// retried every Sync/4.
func TestPollsEverySyncWithoutHeartbeats(t *testing.T) {
	tm := protocol.Production()
	c := New("default", tm, t0)
	if !c.NextDeadline().Equal(t0) {
		t.Fatalf("first deadline %v, want the start", c.NextDeadline())
	}
	c.Tick(t0)
	r := one(t, c)
	if r.Namespace != "default" || r.ID != 1 || r.Epoch != 0 || r.LSN != 0 || !r.Heartbeats || r.MaxDrift != tm.MaxDrift {
		t.Fatalf("first request %+v", r)
	}
	if want := t0.Add(tm.Sync / 4); !c.NextDeadline().Equal(want) {
		t.Fatalf("retry at %v, want %v", c.NextDeadline(), want)
	}
	now := t0.Add(time.Second)
	c.Step(now, answer(r, 3, 10, tm))
	if c.Epoch() != 3 || c.LSN() != 10 || !c.Fresh().Equal(t0) {
		t.Fatalf("epoch %d, LSN %d, fresh %v after the snapshot", c.Epoch(), c.LSN(), c.Fresh())
	}
	if want := t0.Add(tm.Sync); !c.NextDeadline().Equal(want) {
		t.Fatalf("next poll %v, want %v", c.NextDeadline(), want)
	}
	c.Tick(t0.Add(tm.Sync - time.Nanosecond))
	none(t, c)
	c.Tick(t0.Add(tm.Sync))
	r = one(t, c)
	if r.ID != 2 || r.Epoch != 3 || r.LSN != 10 {
		t.Fatalf("second request %+v", r)
	}
}

// TestHeartbeatsKeepItFresh: heartbeats naming a recent request vouch for
// freshness, so the Lookup polls only every LookupPollMax.
func TestHeartbeatsKeepItFresh(t *testing.T) {
	tm := protocol.Production()
	c := New("default", tm, t0)
	c.Tick(t0)
	r := one(t, c)
	c.Step(t0, answer(r, 1, 5, tm))
	now, sentAt := t0, t0
	polls := 0
	for now.Before(t0.Add(tm.LookupPollMax() + tm.Sync)) {
		now = now.Add(tm.HeartbeatEvery())
		c.Tick(now)
		if out := c.Ready(); len(out) > 0 {
			polls += len(out)
			r, sentAt = out[len(out)-1], now
			c.Step(now, &protocol.SyncResponse{ID: r.ID, Epoch: 1, Update: leasetable.Update{From: 5, To: 5}})
			continue
		}
		// A heartbeat, with the names said once left out.
		c.Step(now, &protocol.SyncResponse{Epoch: 1, Update: leasetable.Update{From: 5, To: 5},
			Request: r.ID, SinceRequest: now.Sub(sentAt)})
	}
	if polls != 1 {
		t.Fatalf("%d polls in %v of heartbeats, want 1 (every LookupPollMax)", polls, tm.LookupPollMax()+tm.Sync)
	}
	if age := now.Sub(c.Fresh()); age > tm.Sync {
		t.Fatalf("copy %v old on heartbeats", age)
	}
	if len(c.sent) > maxSent {
		t.Fatalf("%d requests remembered", len(c.sent))
	}
}

// TestGapsAndEpochs: a gap asks again at most every Sync/4 until
// answered; a new epoch without a snapshot asks for one; older epochs and
// other namespaces are ignored.
func TestGapsAndEpochs(t *testing.T) {
	tm := protocol.Fast()
	c := New("default", tm, t0)
	c.Tick(t0)
	c.Step(t0, answer(one(t, c), 2, 10, tm))
	now := t0.Add(time.Millisecond)
	c.Step(now, &protocol.SyncResponse{Epoch: 2, Update: leasetable.Update{From: 12, To: 13}})
	r := one(t, c)
	if r.LSN != 10 {
		t.Fatalf("repair asked from %d, want 10", r.LSN)
	}
	c.Step(now.Add(tm.Sync/8), &protocol.SyncResponse{Epoch: 2, Update: leasetable.Update{From: 13, To: 14}})
	none(t, c)
	c.Step(now.Add(tm.Sync/4), &protocol.SyncResponse{Epoch: 2, Update: leasetable.Update{From: 14, To: 15}})
	one(t, c)
	c.Step(now, &protocol.SyncResponse{Epoch: 2, Update: leasetable.Update{From: 10, To: 11}})
	if c.LSN() != 11 {
		t.Fatalf("LSN %d after a delta that fits, want 11", c.LSN())
	}
	c.Step(now, &protocol.SyncResponse{Namespace: "other", Epoch: 2, Update: leasetable.Update{From: 11, To: 12}})
	c.Step(now, &protocol.SyncResponse{Epoch: 1, Update: leasetable.Update{To: 50, Snapshot: true}})
	if c.LSN() != 11 || c.Epoch() != 2 {
		t.Fatalf("epoch %d LSN %d after another namespace's and an old epoch's", c.Epoch(), c.LSN())
	}
	none(t, c)
	c.Step(now, &protocol.SyncResponse{Epoch: 3, Update: leasetable.Update{From: 11, To: 12}})
	if r := one(t, c); r.Epoch != 2 || c.Epoch() != 2 {
		t.Fatalf("a new epoch's delta: request %+v, epoch %d", r, c.Epoch())
	}
	c.Step(now, &protocol.SyncResponse{Epoch: 3, Update: leasetable.Update{To: 4, Snapshot: true}})
	if c.Epoch() != 3 || c.LSN() != 4 {
		t.Fatalf("epoch %d LSN %d after the new epoch's snapshot", c.Epoch(), c.LSN())
	}
}

// TestAdoptsTheManagersTimings: Sync and SyncTimeout come from the
// Manager's answers, MaxDrift is the larger of the two, and an answer that
// leaves them out changes nothing.
func TestAdoptsTheManagersTimings(t *testing.T) {
	own := protocol.Production()
	mgr := protocol.Fast()
	mgr.MaxDrift = 0.1
	c := New("default", own, t0)
	c.Tick(t0)
	c.Step(t0, answer(one(t, c), 1, 1, mgr))
	if got := c.Timing(); got.Sync != mgr.Sync || got.SyncTimeout != mgr.SyncTimeout || got.MaxDrift != 0.1 {
		t.Fatalf("timings %+v", got)
	}
	if want := t0.Add(mgr.Sync); !c.NextDeadline().Equal(want) {
		t.Fatalf("next poll %v, want %v", c.NextDeadline(), want)
	}
	c.Step(t0, &protocol.SyncResponse{Epoch: 1, Update: leasetable.Update{From: 1, To: 1}})
	if got := c.Timing(); got.Sync != mgr.Sync || got.MaxDrift != 0.1 {
		t.Fatalf("timings %+v after a response without them", got)
	}
	c.Reconnected(t0.Add(time.Millisecond))
	if r := one(t, c); r.MaxDrift != 0.1 || r.LSN != 1 {
		t.Fatalf("request on reconnecting %+v", r)
	}
}
