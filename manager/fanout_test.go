package manager

import (
	"testing"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// fanoutLoop returns a loop over a fresh one-replica group with n Lookup
// streams (IDs 1…n, nobody reading their queues) and one Owner's stream.
func fanoutLoop(t *testing.T, n int) (*loop, []*lookupStream, *ownerStream) {
	t.Helper()
	cfg := Config{Insecure: true}
	cfg.Timing = tm
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replica.NewReplica(replica.ReplicaConfig{ID: 1, Settings: s.cfg.settings(), Storage: raft.NewMemoryStorage(),
		Bootstrap: []replica.Peer{{ID: 1, Addr: "127.0.0.1:1"}}}, base)
	if err != nil {
		t.Fatal(err)
	}
	l := &loop{s: s, r: r, routes: map[routeKey]*ownerStream{}, lookups: map[uint64]*lookupStream{}}
	var sts []*lookupStream
	for id := range uint64(n) {
		st := &lookupStream{id: id + 1, ns: protocol.DefaultNamespace, snd: newSender[syncOut](64, nil)}
		l.lookups[st.id] = st
		sts = append(sts, st)
	}
	own := &ownerStream{snd: newSender[*pb.LeaseResponse](64, nil)}
	l.routes[routeKey{protocol.DefaultNamespace, "o1"}] = own
	return l, sts, own
}

// pushTo is a push of the delta up to lsn to every Lookup of sts.
func pushTo(sts []*lookupStream, lsn keyspace.LSN) []replica.LookupMessage {
	var out []replica.LookupMessage
	for _, st := range sts {
		out = append(out, replica.LookupMessage{To: st.id, Msg: &protocol.SyncResponse{Namespace: protocol.DefaultNamespace, Epoch: epoch,
			Update: leasetable.Update{From: lsn - 1, To: lsn}}})
	}
	return out
}

func holding(sts []*lookupStream) (n int) {
	for _, st := range sts {
		n += st.snd.waiting()
	}
	return n
}

// take reads the messages queued on st, as its sender would, and returns
// the LSNs their updates bring it to.
func take(st *lookupStream) []uint64 {
	var lsns []uint64
	for {
		o, ok := st.snd.next()
		if !ok {
			return lsns
		}
		lsns = append(lsns, o.m.GetUpdate().GetTo())
	}
}

// TestPushRoundsArePaced: a push round to more Lookups than maxPushWaking
// wakes only maxPushWaking streams at once; each stream that takes its
// message lets one more be woken; a stream that does not take its message
// within pushStuckAfter stops holding the round up. Every Lookup gets its
// messages in order, and an Owner's answer goes out at once, ahead of the
// Lookups' backlog.
func TestPushRoundsArePaced(t *testing.T) {
	t.Parallel()
	const n = 3 * maxPushWaking
	l, sts, own := fanoutLoop(t, n)
	l.send(nil, append(pushTo(sts, 10), pushTo(sts, 11)...)) // send reads the wall clock
	now := l.push.waking[0].at                               // and records when it woke each stream
	if got := holding(sts); got != maxPushWaking {
		t.Fatalf("%d Lookup streams handed a message at once, want %d", got, maxPushWaking)
	}
	// An Owner's answer is not paced.
	l.send([]lease.OwnerMessage{{To: "o1", Msg: &protocol.LeaseResponse{Namespace: protocol.DefaultNamespace, Owner: "o1"}}}, nil)
	if own.snd.waiting() != 1 {
		t.Fatalf("the Owner's answer waits behind %d Lookup messages", l.push.pending())
	}
	// Ten streams take theirs: ten more are woken.
	got := map[uint64][]uint64{}
	for _, st := range sts[:10] {
		got[st.id] = append(got[st.id], take(st)...)
	}
	l.pump(now)
	if h := holding(sts); h != maxPushWaking {
		t.Fatalf("%d streams hold a message after ten took theirs, want %d", h, maxPushWaking)
	}
	// Nobody takes anything: after pushStuckAfter the woken streams count
	// as blocked, and the round goes on.
	if d := l.push.pumpDeadline(); d.IsZero() || d.After(now.Add(pushStuckAfter)) {
		t.Fatalf("pump deadline %v, want by %v", d, now.Add(pushStuckAfter))
	}
	l.pump(now.Add(pushStuckAfter))
	if h := holding(sts); h != 2*maxPushWaking {
		t.Fatalf("%d streams hold a message once the woken ones count as stuck, want %d", h, 2*maxPushWaking)
	}
	// A closed stream's messages are skipped.
	closed := sts[n-1]
	delete(l.lookups, closed.id)
	l.push.forget(closed)
	for i := 0; l.push.pending() > 0; i++ {
		if i > 4*n {
			t.Fatalf("%d messages still wait", l.push.pending())
		}
		for _, st := range sts {
			got[st.id] = append(got[st.id], take(st)...)
		}
		l.pump(now)
	}
	for _, st := range sts {
		got[st.id] = append(got[st.id], take(st)...)
		want := []uint64{10, 11}
		if st == closed {
			want = nil
		}
		if len(got[st.id]) != len(want) || (want != nil && (got[st.id][0] != 10 || got[st.id][1] != 11)) {
			t.Errorf("Lookup %d got updates to %v, want %v", st.id, got[st.id], want)
		}
		if st != closed && st.sent != 11 {
			t.Errorf("Lookup %d: sent %d, want 11", st.id, st.sent)
		}
	}
	if l.dropped != 0 {
		t.Errorf("%d messages dropped", l.dropped)
	}
}

// TestPushToAFullStreamIsLost: a Lookup whose queue is full loses the
// message, as without pacing, and does not hold up the others.
func TestPushToAFullStreamIsLost(t *testing.T) {
	t.Parallel()
	l, sts, _ := fanoutLoop(t, 2)
	full := sts[0]
	for range full.snd.limit {
		full.snd.offer(syncOut{})
	}
	l.send(nil, pushTo(sts, 5))
	if l.dropped != 1 || sts[1].snd.waiting() != 1 || l.push.pending() != 0 {
		t.Fatalf("dropped %d, the other stream holds %d, %d wait; want 1, 1, 0", l.dropped, sts[1].snd.waiting(), l.push.pending())
	}
}

// TestSnapshotConvertedOnceAcrossRounds: the Feed sends the same snapshot
// to Lookups that start at different times; the loop converts it (and its
// streams encode it) once, not once per round, and keeps only the newest.
func TestSnapshotConvertedOnceAcrossRounds(t *testing.T) {
	t.Parallel()
	l, sts, _ := fanoutLoop(t, 3)
	st, _ := feedWith(t, 100, 0)
	snap := st.Table(protocol.DefaultNamespace).Snapshot()
	msg := func(to uint64, u leasetable.Update) []replica.LookupMessage {
		return []replica.LookupMessage{{To: to, Msg: &protocol.SyncResponse{Namespace: protocol.DefaultNamespace, Epoch: epoch, Update: u}}}
	}
	l.send(nil, msg(1, snap))
	l.send(nil, msg(2, snap))
	a, _ := sts[0].snd.next()
	b, _ := sts[1].snd.next()
	if a.shared == nil || a.shared != b.shared {
		t.Fatalf("the same snapshot sent in two rounds was converted twice")
	}
	grantAll(t, st, 100, 500)
	newer := st.Table(protocol.DefaultNamespace).Snapshot()
	l.send(nil, msg(3, newer))
	if c, _ := sts[2].snd.next(); c.shared == a.shared || len(l.snapshots) != 1 {
		t.Fatalf("a newer snapshot: shares the old one's conversion %v, %d kept (want 1)", c.shared == a.shared, len(l.snapshots))
	}
}
