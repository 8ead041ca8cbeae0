package replica

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// The read-lease rules of docs/protocol.md ("Quorum read leases") at the
// boundaries a review found: a one-way cut to a holder, a holder's removal,
// a deposed leader stepping a batch, and a holder whose voters differ from
// the leader's. Each runs with its rule kept and broken (the faults
// switch), and the broken run must show the failure.

// TestReadLeaseOneWayCutCostsOneLease: the leader's messages to a holder
// are lost while the holder's still reach the leader, which goes on
// answering its asks. The leader counts the holder only as far as a
// promise the holder acknowledged, so it stops counting it B after the
// cut: entries past the holder's log become visible, and the answers
// resting on them go out, within B (plus a round) of the cut, and no
// Owner loses its leases. Broken (ReadLeaseCountUnacked), the leader
// counts the holder after every promise and nothing past its log is ever
// acknowledged.
func TestReadLeaseOneWayCutCostsOneLease(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			g := newLeaseGroup(t, 3, faults.Set{ReadLeaseCountUnacked: broken})
			l, f := leaseFollower(t, g)
			a := g.owners["a"]
			g.drop = func(m raftpb.Message) bool { return m.From == l.ID() && m.To == f.ID() }
			cut := g.now
			last, _ := f.ms.LastIndex()
			g.addOwner("b") // entries to commit, grants to acknowledge
			var acked time.Time
			asks, lost := l.ReadLease(g.now).Stats.Promises, false
			for end := g.now.Add(10 * time.Second); g.now.Before(end); {
				g.run(10 * ms)
				if acked.IsZero() && l.ReadLeaseAcked() > last {
					acked = g.now
				}
				lost = lost || len(a.Held(g.now)) == 0
			}
			if got := l.ReadLease(g.now).Stats.Promises - asks; got < 20 {
				t.Fatalf("the leader made %d promises during the cut: the holder's asks did not reach it", got)
			}
			if broken {
				if !acked.IsZero() && !lost {
					t.Fatalf("the broken twin acknowledged past the holder's log %s into the cut and Owner a kept its leases", acked.Sub(cut))
				}
				return
			}
			if acked.IsZero() {
				t.Fatalf("nothing past the cut-off holder's index %d acknowledged in 10 s", last)
			}
			if wait, bound := acked.Sub(cut), l.rl.bound()+4*l.cfg.Settings.RaftTick; wait > bound {
				t.Fatalf("the first answer past the holder's log went out %s into the cut, more than B plus a round (%s)", wait, bound)
			}
			if lost {
				t.Fatal("Owner a lost every lease during a one-way cut of a follower")
			}
			if held := g.owners["b"].Held(g.now); len(held) == 0 {
				t.Fatal("Owner b was granted nothing during the cut")
			}
		})
	}
}

// TestReadLeaseRemovedHolderCounted: holder r is removed while the appends
// to it are lost, so the removal commits through the leader and the third
// replica and r, which never applies it, serves lease reads from its copy
// until its lease ends; meanwhile an Owner joins. The leader goes on counting r until its last
// promise ended, so it acknowledges nothing r's reads miss. Broken
// (ReadLeaseForgetRemoved), the leader forgets r when it applies the
// removal and acknowledges entries r serves reads without.
func TestReadLeaseRemovedHolderCounted(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			g := newLeaseGroup(t, 3, faults.Set{ReadLeaseForgetRemoved: broken})
			l, r := leaseFollower(t, g)
			g.drop = func(m raftpb.Message) bool {
				return m.To == r.ID() && (m.Type == raftpb.MsgApp || m.Type == raftpb.MsgSnap)
			}
			if err := l.RemoveMember(g.now, r.ID()); err != nil {
				t.Fatal(err)
			}
			g.addOwner("b") // a write to acknowledge while r may serve
			removed, stale, served := false, 0, 0
			for end := g.now.Add(2 * time.Second); g.now.Before(end); {
				g.run(10 * ms)
				if _, member := l.State().Peers()[r.ID()]; !member {
					removed = true
				}
				idx, ok := r.LeaseRead(g.now)
				switch {
				case !ok || !removed:
				case idx < l.ReadLeaseAcked():
					stale++
				default:
					served++
				}
			}
			if !removed {
				t.Fatal("the leader never applied the removal")
			}
			if _, member := r.State().Peers()[r.ID()]; !member {
				t.Fatal("the removed replica applied its removal: the test shows nothing")
			}
			if broken {
				if stale == 0 {
					t.Fatal("the broken twin served no stale read: the test shows nothing")
				}
				return
			}
			if stale > 0 {
				t.Fatalf("the removed holder served %d lease reads missing an acknowledged write", stale)
			}
			if served == 0 {
				t.Fatal("the removed holder served no lease read after the leader applied its removal: the test shows nothing")
			}
			if l.ReadLeaseAcked() <= r.ReadLease(g.now).Applied {
				t.Fatalf("the leader acknowledged nothing past the removed holder's copy (%d)", r.ReadLease(g.now).Applied)
			}
		})
	}
}

// TestReadLeaseDeposedLeaderPromisesAsFollower: leader o is paused and the
// others elect n in a later term. o resumes and steps, in one batch as the
// server does, n's heartbeat and then holder h's ask. Raft has made o a
// follower, though its Core goes only at the next Advance: o must promise
// as a follower of n's term, not as its leader. Broken
// (ReadLeaseDeposedGrant), it promises as the leader with its stale commit
// index, and with h's own promise that makes h a lease whose floor misses
// what n committed.
func TestReadLeaseDeposedLeaderPromisesAsFollower(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			g := newLeaseGroup(t, 3, faults.Set{ReadLeaseDeposedGrant: broken})
			o, _ := leaseFollower(t, g)
			g.down[o.ID()] = true
			n := g.runUntilLeader()
			g.run(4 * n.cfg.Settings.ReadLease.Renew) // h acknowledges n's promises
			var h *Replica
			for id, r := range g.reps {
				if r != o && r != n {
					h = g.reps[id]
				}
			}
			term := n.Status().Term
			if o.Status().Term >= term || h.rl.ack.term != term {
				t.Fatalf("o at term %d, n at %d, h acknowledges term %d", o.Status().Term, term, h.rl.ack.term)
			}
			floor := h.ReadLease(g.now).Floor
			h.rl.ask(g.now)
			var ask raftpb.Message
			for _, m := range h.rl.take() {
				if m.Type == msgLeaseAsk && m.To == o.ID() {
					ask = m // the ask to n is lost
				}
			}
			g.down[o.ID()] = false
			if o.Core() == nil {
				t.Fatal("o lost its Core while paused")
			}
			o.rl.out = nil
			_ = o.StepRaft(g.now, raftpb.Message{Type: raftpb.MsgHeartbeat, From: n.ID(), To: o.ID(), Term: term})
			_ = o.StepRaft(g.now, ask)
			if st := o.Status(); st.RaftState != raft.StateFollower || st.Lead != n.ID() {
				t.Fatalf("o is a %v following %d after n's heartbeat", st.RaftState, st.Lead)
			}
			var p *raftpb.Message
			for _, m := range o.rl.take() {
				if m.Type == msgLeasePromise && m.To == h.ID() {
					p = &m
				}
			}
			if p == nil || p.Term != term {
				t.Fatalf("o answered %+v, want a promise of term %d", p, term)
			}
			_ = h.StepRaft(g.now, *p)
			if broken {
				if !p.Reject || h.ReadLease(g.now).Floor >= floor {
					t.Fatalf("the broken twin's promise %+v left h's floor at %d (was %d): the test shows nothing", p, h.ReadLease(g.now).Floor, floor)
				}
				return
			}
			if p.Reject {
				t.Fatalf("a deposed leader promised as the leader of term %d with commit %d", term, p.Commit)
			}
			if got := h.ReadLease(g.now).Floor; got != floor {
				t.Fatalf("h's floor moved from %d to %d on a follower's promise", floor, got)
			}
		})
	}
}

// TestReadLeaseCountsTheLeadersVoters: a holder takes a lease only if the
// voters it counted its majority among are the leader's, which its promise
// names; a holder whose configuration lags the leader's takes none (the
// guard of docs/protocol.md, "Quorum read leases", boundary 4). Broken
// (ReadLeaseConfBlind), it counts against its own voters whatever the
// leader's are.
func TestReadLeaseCountsTheLeadersVoters(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			g := newLeaseGroup(t, 3, faults.Set{ReadLeaseConfBlind: broken})
			l, h := leaseFollower(t, g)
			until := h.ReadLease(g.now).Until
			g.now = g.now.Add(10 * ms) // a later ask makes a later lease
			h.rl.ask(g.now)
			var ask raftpb.Message
			for _, m := range h.rl.take() {
				if m.Type == msgLeaseAsk && m.To == l.ID() {
					ask = m
				}
			}
			l.rl.out = nil
			_ = l.StepRaft(g.now, ask)
			var p raftpb.Message
			for _, m := range l.rl.take() {
				if m.Type == msgLeasePromise && m.To == h.ID() {
					p = m
				}
			}
			if !p.Reject || p.RejectHint != votersKey(h.conf) {
				t.Fatalf("the leader's promise %+v: want one from the leader naming the voters both have", p)
			}
			// The leader has moved on to voters {1, 2, 4}; h still
			// counts {1, 2, 3}.
			p.RejectHint = votersKey(raftpb.ConfState{Voters: []uint64{1, 2, 4}})
			_ = h.StepRaft(g.now, p)
			got := h.ReadLease(g.now).Until
			if broken {
				if !got.After(until) {
					t.Fatal("the broken twin took no lease: the test shows nothing")
				}
				return
			}
			if !got.Equal(until) {
				t.Fatalf("a holder took a lease to %s from a leader with other voters", got.Sub(base))
			}
			// The same promise naming the voters h has makes the lease.
			p.RejectHint = votersKey(h.conf)
			_ = h.StepRaft(g.now, p)
			if !h.ReadLease(g.now).Until.After(until) {
				t.Fatal("the leader's promise naming the holder's own voters made no lease")
			}
		})
	}
}

// TestDeposedLeaderProposesNothing: leader o is paused and n elected in a
// later term; o resumes and steps, in one batch, an Owner's first request
// (which its Core answers with a change) and then n's heartbeat. Raft
// makes o a follower, which would forward a proposal to n: the round of a
// Core whose replica no longer leads must not reach the log, where n's
// Core, built from the applied State, does not expect it.
func TestDeposedLeaderProposesNothing(t *testing.T) {
	g := newGroup(t, 3, faults.Set{})
	o := g.runUntilLeader()
	g.run(time.Second)
	g.down[o.ID()] = true
	n := g.runUntilLeader()
	g.run(time.Second)
	g.down[o.ID()] = false
	req := &protocol.LeaseRequest{Namespace: protocol.DefaultNamespace, Owner: "z", Addr: "z:7000", Incarnation: 1, Seq: 1}
	if err := o.StepLease(g.now, req); err != nil {
		t.Fatalf("o, still the leader in Raft, refused: %v", err)
	}
	_ = o.StepRaft(g.now, raftpb.Message{Type: raftpb.MsgHeartbeat, From: n.ID(), To: o.ID(), Term: n.Status().Term})
	if err := o.StepLease(g.now, req); err == nil {
		t.Fatal("a replica Raft has deposed took an Owner's request")
	}
	g.settle()
	g.run(time.Second)
	for id, r := range g.reps {
		if _, ok := r.State().Owners(protocol.DefaultNamespace)["z"]; ok {
			t.Fatalf("replica %d applied the deposed leader's round: Owner z is a member", id)
		}
	}
}
