package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// group is a Raft group of Replicas on a perfect in-memory network with
// one virtual clock, for testing the failover rules step by step.
type group struct {
	t    *testing.T
	now  time.Time
	reps map[uint64]*Replica
	down map[uint64]bool
	cut  map[uint64]bool // cut off from the other replicas
	// drop, if set, loses the replica messages it returns true for: a
	// one-way cut, a lost append.
	drop  func(raftpb.Message) bool
	sent  map[string][]*protocol.LeaseResponse
	inbox []raftpb.Message
	// owners exchange messages with the replica that has taken over (or
	// with target, if set) at every step of run.
	owners map[string]*owner.Core
	target *Replica
}

var groupTiming = protocol.Fast()

func newGroup(t *testing.T, n int, fs faults.Set) *group {
	t.Helper()
	return newGroupTick(t, n, fs, 25*ms)
}

// newGroupTick is newGroup with a Raft tick of its own: an election takes
// ElectionTicks (10) to twice that, again after each pre-vote the other
// follower refuses because it heard the leader within its own timeout.
func newGroupTick(t *testing.T, n int, fs faults.Set, tick time.Duration) *group {
	t.Helper()
	g := &group{t: t, now: base, reps: map[uint64]*Replica{}, down: map[uint64]bool{}, cut: map[uint64]bool{},
		sent: map[string][]*protocol.LeaseResponse{}, owners: map[string]*owner.Core{}}
	var boot []Peer
	for i := 1; i <= n; i++ {
		boot = append(boot, Peer{ID: uint64(i), Addr: fmt.Sprintf("m%d:7400", i)})
	}
	for _, p := range boot {
		r, err := NewReplica(ReplicaConfig{ID: p.ID, Bootstrap: boot, Break: fs,
			Settings: Settings{Lease: lease.Settings{Timing: groupTiming, Policy: assign.Fixed{Pieces: 4}, Epoch: epoch, Seed: p.ID}, RaftTick: tick}}, g.now)
		if err != nil {
			t.Fatal(err)
		}
		g.reps[p.ID] = r
	}
	return g
}

// testDriver drives a replica at a fixed time, with nothing to persist
// beyond its MemoryStorage, and hands what it sends to send.
type testDriver struct {
	now     time.Time
	send    func(*Ready)
	readies int // Readies handled
}

func (d *testDriver) Now() time.Time { return d.now }

func (d *testDriver) Persist(*Ready) error { d.readies++; return nil }

func (d *testDriver) Send(rd *Ready) { d.send(rd) }

// settle drives every replica until nothing is left to persist or deliver.
func (g *group) settle() {
	for range 1000 {
		busy := false
		for _, id := range slices.Sorted(maps.Keys(g.reps)) {
			r := g.reps[id]
			if g.down[id] {
				continue
			}
			d := &testDriver{now: g.now, send: func(rd *Ready) {
				g.inbox = append(g.inbox, rd.Messages...)
				for _, m := range rd.Owners {
					g.sent[m.To] = append(g.sent[m.To], m.Msg)
				}
			}}
			if err := Drive(r, d); err != nil {
				g.t.Fatal(err)
			}
			busy = busy || d.readies > 0
		}
		msgs := g.inbox
		g.inbox = nil
		for _, m := range msgs {
			if g.down[m.To] || g.cut[m.To] || g.cut[m.From] || (g.drop != nil && g.drop(m)) {
				continue
			}
			busy = true
			_ = g.reps[m.To].StepRaft(g.now, m)
		}
		if !busy {
			return
		}
	}
	g.t.Fatal("the group never settled")
}

// run advances the clock by d in steps of 10 ms, ticking the replicas
// and the owners, which talk to the leader.
func (g *group) run(d time.Duration) {
	for end := g.now.Add(d); g.now.Before(end); {
		g.now = g.now.Add(10 * ms)
		for id, r := range g.reps {
			if !g.down[id] {
				r.Tick(g.now)
			}
		}
		g.settle()
		to := g.target
		if to == nil {
			to = g.leaderOrNil()
		}
		for _, id := range slices.Sorted(maps.Keys(g.owners)) {
			o := g.owners[id]
			o.Tick(g.now)
			reqs, _ := o.Ready()
			for _, req := range reqs {
				if to != nil && !g.down[to.ID()] {
					_ = to.StepLease(g.now, req) // NotLeaderError: lost
				}
			}
		}
		g.settle()
		for _, id := range slices.Sorted(maps.Keys(g.owners)) {
			for _, m := range g.sent[id] {
				g.owners[id].Step(g.now, m)
			}
			g.sent[id] = nil
		}
	}
}

// runUntilLeader advances the clock until a replica has taken over and
// returns it, failing after 5 s.
func (g *group) runUntilLeader() *Replica {
	g.t.Helper()
	for end := g.now.Add(5 * time.Second); g.now.Before(end); g.run(10 * ms) {
		if r := g.leaderOrNil(); r != nil {
			return r
		}
	}
	g.t.Fatal("no leader took over")
	return nil
}

func (g *group) leaderOrNil() *Replica {
	for id, r := range g.reps {
		if !g.down[id] && !g.cut[id] && r.Core() != nil {
			return r
		}
	}
	return nil
}

// leader returns the replica that has taken over, failing if none or two.
func (g *group) leader() *Replica {
	g.t.Helper()
	var out *Replica
	for id, r := range g.reps {
		if !g.down[id] && r.Core() != nil {
			if out != nil && !g.cut[id] && !g.cut[out.ID()] {
				g.t.Fatalf("two leaders: %d and %d", out.ID(), id)
			}
			if out == nil || !g.cut[id] {
				out = r
			}
		}
	}
	if out == nil {
		g.t.Fatal("no leader took over")
	}
	return out
}

func (g *group) addOwner(id string) *owner.Core {
	o := owner.NewCore(owner.CoreConfig{Namespace: protocol.DefaultNamespace, ID: id, Addr: id + ":7000", Incarnation: 1, Timing: groupTiming, Seed: 1})
	g.owners[id] = o
	return o
}

// TestReplicaFailoverKeepsLeases: a new leader resumes the replicated table;
// the owner's leases are renewed with the same LGNs (no grant, no loss), and
// its messages order after the old leader's. That needs the election over
// well within the Owner's lease (2 s, renewed every 0.5 s): at a 25-ms tick
// Raft's randomised timeouts took up to 1.2 s in 1,500 failovers, and once
// in thousands of runs long enough for the lease to lapse (its range was
// then granted anew, as it should be). At a 10-ms tick the longest of
// 1,500 took 0.67 s.
func TestReplicaFailoverKeepsLeases(t *testing.T) {
	g := newGroupTick(t, 3, faults.Set{}, 10*ms)
	l1 := g.runUntilLeader()
	a := g.addOwner("a")
	g.run(groupTiming.ManagerLease + 4*groupTiming.Renew) // nothing is granted for a ManagerLease
	held := a.Held(g.now)
	if len(held) != 4 {
		t.Fatalf("a holds %v, want the four pieces", held)
	}
	// Every replica applied the same table.
	for id, r := range g.reps {
		if got, want := r.State().Table(protocol.DefaultNamespace).Segments(), l1.State().Table(protocol.DefaultNamespace).Segments(); !slices.Equal(got, want) {
			t.Fatalf("replica %d's table %v differs from the leader's %v", id, got, want)
		}
	}
	lsn := l1.State().Table(protocol.DefaultNamespace).LSN()

	for round := range 2 { // the new leader, then the one after it
		l := g.leader()
		g.down[l.ID()] = true
		g.run(5 * time.Second)
		nl := g.leader()
		after := a.Held(g.now)
		if len(after) != 4 {
			t.Fatalf("failover %d: a holds %v, want its four pieces", round+1, after)
		}
		for i := range held {
			if after[i].Range != held[i].Range || after[i].Num != held[i].Num || !after[i].Expiry.After(held[i].Expiry) {
				t.Fatalf("failover %d: lease %d: %+v before, %+v after: want the same lease, renewed", round+1, i, held[i], after[i])
			}
		}
		if got := nl.State().Table(protocol.DefaultNamespace).LSN(); got != lsn {
			t.Fatalf("failover %d changed the table: LSN %d → %d", round+1, lsn, got)
		}
		held = after
		g.down[l.ID()] = false // back as a follower, from its storage
		r, err := NewReplica(ReplicaConfig{ID: l.ID(), Storage: l.ms, Settings: l.cfg.Settings}, g.now)
		if err != nil {
			t.Fatal(err)
		}
		g.reps[l.ID()] = r
		g.run(time.Second)
	}
}

// TestReplicaAnswersOnlyAfterCommit: a leader cut off from its followers
// makes no commit, so it sends an owner nothing — the first failover rule.
// Broken deliberately (AnswerBeforeCommit), it answers.
func TestReplicaAnswersOnlyAfterCommit(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			var fs faults.Set
			if broken {
				fs = faults.Set{AnswerBeforeCommit: true}
			}
			g := newGroup(t, 3, fs)
			l := g.runUntilLeader()
			g.run(groupTiming.ManagerLease)
			g.cut[l.ID()] = true
			g.target = l
			a := g.addOwner("a")
			g.run(3 * groupTiming.Renew)
			got := len(a.Held(g.now))
			if !broken && got != 0 {
				t.Fatalf("a leader without a quorum granted %d leases", got)
			}
			if broken && got == 0 {
				t.Fatal("with the rule broken the isolated leader should have granted (the test shows nothing)")
			}
		})
	}
}

// TestReplicaRenewsOnlyWithQuorum: a renewal changes nothing in the State,
// so it is sent on a ReadIndex proof instead of a log entry; a leader cut
// off from its followers gets no proof and renews nothing, though it still
// believes it leads for up to two election timeouts. Broken deliberately
// (AnswerBeforeCommit), it renews.
func TestReplicaRenewsOnlyWithQuorum(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			var fs faults.Set
			if broken {
				fs = faults.Set{AnswerBeforeCommit: true}
			}
			g := newGroup(t, 3, fs)
			l := g.runUntilLeader()
			a := g.addOwner("a")
			g.run(groupTiming.ManagerLease + 4*groupTiming.Renew)
			latest := func() (e time.Time) {
				for _, h := range a.Held(g.now) {
					if h.Expiry.After(e) {
						e = h.Expiry
					}
				}
				return e
			}
			if len(a.Held(g.now)) != 4 {
				t.Fatalf("a holds %v, want the four pieces", a.Held(g.now))
			}
			if l.Stats().Confirmations == 0 && !broken {
				t.Fatal("no renewal was sent on a ReadIndex proof")
			}
			// Cut it off just before a's next renewal, so that the renewal
			// reaches it while it still believes it leads.
			for a.NextDeadline().Sub(g.now) > 20*ms {
				g.run(10 * ms)
			}
			e0 := latest()
			g.cut[l.ID()] = true
			g.target = l
			renewed := false
			for range 100 { // 1 s: past the CheckQuorum step-down
				g.run(10 * ms)
				renewed = renewed || latest().After(e0)
			}
			if !broken && renewed {
				t.Fatal("a leader without a quorum renewed a lease")
			}
			if broken && !renewed {
				t.Fatal("with the rule broken the isolated leader should have renewed (the test shows nothing)")
			}
		})
	}
}

// TestReplicaTakeoverReserves: a new leader grants nothing until takeover +
// ManagerLease, even a range whose holder went silent and was being
// recalled — the second failover rule. Broken deliberately
// (NoTakeoverReservation), it grants at once while the old holder may
// still believe its lease.
func TestReplicaTakeoverReserves(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			var fs faults.Set
			if broken {
				fs = faults.Set{NoTakeoverReservation: true}
			}
			g := newGroup(t, 3, fs)
			l1 := g.runUntilLeader()
			a := g.addOwner("a")
			g.run(groupTiming.ManagerLease + 3*groupTiming.Renew)
			if len(a.Held(g.now)) != 4 {
				t.Fatalf("a holds %v", a.Held(g.now))
			}
			// a goes silent but holds its leases for OwnerLease; b joins,
			// and the leader recalls two pieces from a, which never
			// answers. Then the leader crashes.
			delete(g.owners, "a")
			b := g.addOwner("b")
			g.run(50 * ms)
			g.down[l1.ID()] = true
			var takeover, first time.Time
			for end := g.now.Add(3 * groupTiming.ManagerLease); g.now.Before(end); g.run(10 * ms) {
				if takeover.IsZero() && g.leaderOrNil() != nil {
					takeover = g.now
				}
				if first.IsZero() && len(b.Held(g.now)) > 0 {
					first = g.now
				}
			}
			if takeover.IsZero() || first.IsZero() {
				t.Fatalf("takeover at %v, b's first lease at %v", takeover, first)
			}
			early := first.Before(takeover.Add(groupTiming.ManagerLease))
			if !broken && early {
				t.Fatalf("b was granted a range %v after the takeover, before the reservation ran out", first.Sub(takeover))
			}
			if broken && !early {
				t.Fatalf("with the rule broken b should be granted early (got %v after takeover); the test shows nothing", first.Sub(takeover))
			}
		})
	}
}

// TestReplicaFollowerServesLookups: followers answer Lookups from their
// applied state while they hear from the leader, and refuse, naming the
// leader, once cut off; only the leader serves owners.
func TestReplicaFollowerServesLookups(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	l := g.runUntilLeader()
	g.run(time.Second)
	var f *Replica
	for id, r := range g.reps {
		if id != l.ID() {
			f = r
		}
	}
	req := &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1}
	if err := f.StepSync(g.now, 1, req); err != nil {
		t.Fatalf("follower refused a Lookup: %v", err)
	}
	if got := f.Feed().Ready(); len(got) != 1 || got[0].Msg.Epoch != l.State().Epoch() {
		t.Fatalf("follower answered %+v", got)
	}
	lreq := &protocol.LeaseRequest{Namespace: protocol.DefaultNamespace, Owner: "x", Incarnation: 1, Seq: 1}
	var nl *NotLeaderError
	if err := f.StepLease(g.now, lreq); !errors.As(err, &nl) || nl.Leader != fmt.Sprintf("m%d:7400", l.ID()) {
		t.Fatalf("follower StepLease = %v, want NotLeaderError naming m%d:7400", err, l.ID())
	}
	if err := l.StepLease(g.now, lreq); err != nil {
		t.Fatalf("leader refused an owner: %v", err)
	}
	g.cut[f.ID()] = true
	g.run(f.StaleBound() + 100*ms)
	if err := f.StepSync(g.now, 1, req); !errors.As(err, &nl) {
		t.Fatalf("a follower cut off from the leader answered (err %v)", err)
	}
}

// TestReplicaSnapshotRestart: a replica restarted from its storage after
// compaction rebuilds the same state.
func TestReplicaSnapshotRestart(t *testing.T) {
	g := newGroup(t, 1, faults.Set{})
	g.reps[1].cfg.Settings.SnapshotEntries = 3 // compact often
	l := g.runUntilLeader()
	g.addOwner("a")
	g.run(groupTiming.ManagerLease + 3*groupTiming.Renew)
	if l.Stats().Snapshots == 0 {
		t.Fatal("no snapshot was taken")
	}
	want := l.State().Encode()
	r, err := NewReplica(ReplicaConfig{ID: 1, Storage: l.ms, Settings: l.cfg.Settings}, g.now)
	if err != nil {
		t.Fatal(err)
	}
	g.reps[1] = r
	if got := g.runUntilLeader().State().Encode(); string(got) != string(want) {
		t.Fatalf("restarted state\n%s\nwant\n%s", got, want)
	}
}

// TestReplicaCoalescesPushes: a replica driven only at its NextDeadline and
// when its Owners send runs the Feed's coalesced push rounds on time: push
// rounds to a Lookup are PushEvery apart or more, yet every table change
// reaches it within PushEvery of being applied, and its copy ends equal to
// the table.
func TestReplicaCoalescesPushes(t *testing.T) {
	const every = 100 * ms
	// A Raft tick of a second: only the Feed's deadline brings the
	// trailing rounds on time.
	r, err := NewReplica(ReplicaConfig{ID: 1, Bootstrap: []Peer{{ID: 1, Addr: "m1:7400"}},
		Settings: Settings{Lease: lease.Settings{Timing: groupTiming, Policy: assign.Fixed{Pieces: 64}, Epoch: epoch, Seed: 1}, RaftTick: time.Second, PushEvery: every}}, base)
	if err != nil {
		t.Fatal(err)
	}
	now := base
	owners := map[string]*owner.Core{}
	view := leasetable.NewView()
	var (
		applied = map[keyspace.LSN]time.Time{} // table LSN → when the replica applied it
		reached = map[keyspace.LSN]time.Time{} // view LSN → when the Lookup's copy reached it
		rounds  []time.Time                    // push rounds to the Lookup
		lsn     keyspace.LSN
	)
	lookup := func(msgs []LookupMessage) {
		for _, m := range msgs {
			if m.To != 1 {
				t.Fatalf("message to session %d", m.To)
			}
			if m.Msg.ID == 0 {
				if n := len(rounds); n > 0 && rounds[n-1].Equal(now) {
					t.Fatalf("two pushes to one session at %v", now.Sub(base))
				}
				rounds = append(rounds, now)
			}
			if _, err := view.Apply(m.Msg.Update); err != nil {
				t.Fatalf("at %v: %v", now.Sub(base), err)
			}
			if _, ok := reached[view.LSN()]; !ok {
				reached[view.LSN()] = now
			}
		}
	}
	// settle runs the replica and its Owners until neither has anything
	// to send.
	settle := func() {
		for busy := true; busy; {
			busy = false
			var out []lease.OwnerMessage
			d := &testDriver{now: now, send: func(rd *Ready) {
				out = append(out, rd.Owners...)
				lookup(rd.Lookups)
			}}
			if err := Drive(r, d); err != nil {
				t.Fatal(err)
			}
			if l := r.State().Table(protocol.DefaultNamespace); l != nil && l.LSN() > lsn {
				for lsn < l.LSN() {
					lsn++
					applied[lsn] = now
				}
			}
			for _, m := range out {
				owners[m.To].Step(now, m.Msg)
			}
			for _, id := range slices.Sorted(maps.Keys(owners)) {
				reqs, _ := owners[id].Ready()
				for _, req := range reqs {
					busy = true
					if err := r.StepLease(now, req); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	settle()
	if r.Core() == nil {
		t.Fatal("a group of one did not take over at once")
	}
	if err := r.StepSync(now, 1, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1}); err != nil {
		t.Fatal(err)
	}
	settle()
	// Owners join one after another, some within PushEvery of each other;
	// nothing is granted for a ManagerLease after the takeover.
	joins := []time.Duration{0, 2300 * ms, 2330 * ms, 2360 * ms, 2500 * ms, 3000 * ms, 3040 * ms}
	end := base.Add(4500 * ms) // before the Feed forgets a session silent for 2 SyncTimeouts
	for steps := 0; now.Before(end); steps++ {
		if steps > 100000 {
			t.Fatalf("stuck at %v: NextDeadline %v", now.Sub(base), r.NextDeadline().Sub(base))
		}
		next := end
		earlier := func(d time.Time) {
			if d.Before(next) {
				next = d
			}
		}
		earlier(r.NextDeadline())
		for _, o := range owners {
			earlier(o.NextDeadline())
		}
		if len(joins) > 0 {
			earlier(base.Add(joins[0]))
		}
		if next.After(now) {
			now = next
		}
		for len(joins) > 0 && !now.Before(base.Add(joins[0])) {
			id := fmt.Sprintf("o%d", len(owners))
			owners[id] = owner.NewCore(owner.CoreConfig{Namespace: protocol.DefaultNamespace, ID: id, Addr: id + ":7000", Incarnation: 1, Timing: groupTiming, Seed: 1})
			joins = joins[1:]
		}
		if !now.Before(r.NextDeadline()) {
			r.Tick(now)
		}
		for _, id := range slices.Sorted(maps.Keys(owners)) {
			if o := owners[id]; !now.Before(o.NextDeadline()) {
				o.Tick(now)
			}
		}
		settle()
	}

	tab := r.State().Table(protocol.DefaultNamespace)
	if view.LSN() != tab.LSN() || !slices.Equal(view.Segments(), tab.Segments()) {
		t.Fatalf("the Lookup's copy at LSN %d differs from the table at LSN %d", view.LSN(), tab.LSN())
	}
	for i := 1; i < len(rounds); i++ {
		if gap := rounds[i].Sub(rounds[i-1]); gap < every {
			t.Errorf("push rounds at %v and %v: %v apart, want PushEvery (%v) or more", rounds[i-1].Sub(base), rounds[i].Sub(base), gap, every)
		}
	}
	late := 0 // changes that waited for a trailing round
	for l := keyspace.LSN(1); l <= tab.LSN(); l++ {
		var got time.Time
		for v, at := range reached {
			if v >= l && (got.IsZero() || at.Before(got)) {
				got = at
			}
		}
		if d := got.Sub(applied[l]); d > every {
			t.Errorf("LSN %d applied at %v reached the Lookup %v later, want PushEvery (%v) at most", l, applied[l].Sub(base), d, every)
		} else if d > 0 {
			late++
		}
	}
	if late == 0 || len(rounds) < 3 {
		t.Fatalf("%d changes in %d push rounds, %d of them waiting for a trailing round: the run exercised no coalescing", tab.LSN(), len(rounds), late)
	}
	t.Logf("%d changes in %d push rounds, %d of them pushed by a trailing round", tab.LSN(), len(rounds), late)
}
