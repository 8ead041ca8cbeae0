package replica

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// newLeaseGroup is newGroup with every replica holding read leases.
func newLeaseGroup(t *testing.T, n int, fs faults.Set) *group {
	t.Helper()
	return newLeaseGroupWith(t, n, fs, ReadLease{All: true})
}

// newLeaseGroupWith is newGroup with the read leases rl.
func newLeaseGroupWith(t *testing.T, n int, fs faults.Set, rl ReadLease) *group {
	t.Helper()
	g := newGroup(t, n, fs)
	var boot []Peer
	for i := 1; i <= n; i++ {
		boot = append(boot, Peer{ID: uint64(i), Addr: fmt.Sprintf("m%d:7400", i)})
	}
	for _, p := range boot {
		r, err := NewReplica(ReplicaConfig{ID: p.ID, Bootstrap: boot, Break: fs,
			Settings: Settings{Lease: lease.Settings{Timing: groupTiming, Policy: assign.Fixed{Pieces: 4}, Epoch: epoch, Seed: p.ID}, RaftTick: 25 * ms, ReadLease: rl}}, g.now)
		if err != nil {
			t.Fatal(err)
		}
		g.reps[p.ID] = r
	}
	return g
}

// leaseFollower runs a leased group until an Owner holds its ranges and a
// follower serves lease reads, and returns the leader and that follower.
func leaseFollower(t *testing.T, g *group) (l, f *Replica) {
	t.Helper()
	l = g.runUntilLeader()
	g.addOwner("a")
	g.run(groupTiming.ManagerLease + 4*groupTiming.Renew)
	for id, r := range g.reps {
		if r != l {
			f = g.reps[id]
			break
		}
	}
	if _, ok := f.LeaseRead(g.now); !ok {
		t.Fatalf("follower %d serves no lease read: %+v", f.ID(), f.ReadLease(g.now))
	}
	return l, f
}

// TestReadLeaseCutOffHolderServesUntilItsLeaseEnds: a follower cut off from
// the others serves lease reads from its copy until the lease it last took
// ends — no later than Duration after the ask that took it — and refuses
// from then on.
func TestReadLeaseCutOffHolderServesUntilItsLeaseEnds(t *testing.T) {
	for _, broken := range []bool{false, true} {
		g := newLeaseGroup(t, 3, faults.Set{ReadLeaseServeExpired: broken})
		_, f := leaseFollower(t, g)
		cut := g.now
		g.cut[f.ID()] = true
		until := f.ReadLease(g.now).Until
		if d := f.cfg.Settings.ReadLease.Duration; until.Sub(cut) > d {
			t.Fatalf("the lease ends %s after the cut, more than Duration %s", until.Sub(cut), d)
		}
		idx, _ := f.LeaseRead(g.now)
		served, refused := 0, 0
		for g.now.Before(until.Add(time.Second)) {
			g.run(10 * ms)
			got, ok := f.LeaseRead(g.now)
			switch {
			case ok && !g.now.Before(until) && !broken:
				t.Fatalf("served at %s, after the lease ended at %s", g.now.Sub(cut), until.Sub(cut))
			case ok && got != idx:
				t.Fatalf("a cut-off holder's copy moved from %d to %d", idx, got)
			case ok:
				served++
			case g.now.Before(until):
				t.Fatalf("refused at %s, before its lease ended (%s)", g.now.Sub(cut), until.Sub(cut))
			default:
				refused++
			}
		}
		if broken {
			if refused != 0 {
				t.Fatalf("the broken twin refused %d reads after the lease ended", refused)
			}
			continue
		}
		if served == 0 || refused == 0 {
			t.Fatalf("served %d, refused %d: want both", served, refused)
		}
	}
}

// TestReadLeaseWriteWaitsForHolder: with a holder cut off, the leader makes
// nothing past the holder's log visible (and acknowledges nothing resting
// on it) until Duration × (1 + MaxDrift) after it last promised that
// holder, and then goes on without it. Broken, it acknowledges at commit.
func TestReadLeaseWriteWaitsForHolder(t *testing.T) {
	for _, broken := range []bool{false, true} {
		g := newLeaseGroup(t, 3, faults.Set{ReadLeaseAckEarly: broken})
		l, f := leaseFollower(t, g)
		g.cut[f.ID()] = true
		last, _ := f.ms.LastIndex()
		promised := l.rl.promised[f.ID()]
		if !promised.After(g.now) {
			t.Fatalf("the leader does not count the holder it promised (until %s, now %s)", promised.Sub(base), g.now.Sub(base))
		}
		g.addOwner("b") // a member joins: entries to commit, grants to acknowledge
		moved := time.Time{}
		for end := g.now.Add(3 * time.Second); g.now.Before(end) && moved.IsZero(); {
			g.run(10 * ms)
			if l.ReadLease(g.now).Visible > last {
				moved = g.now
			}
		}
		if moved.IsZero() {
			t.Fatalf("broken=%v: nothing past the cut-off holder's index %d became visible", broken, last)
		}
		if broken {
			if !moved.Before(promised) {
				t.Fatalf("the broken twin waited for the holder's count to end")
			}
			continue
		}
		if moved.Before(promised) {
			t.Fatalf("entry past %d visible at %s, before the leader stopped counting the holder (%s)", last, moved.Sub(base), promised.Sub(base))
		}
		if late := moved.Sub(promised); late > 3*l.cfg.Settings.RaftTick {
			t.Fatalf("visible %s after the holder stopped counting: the write stalled too long", late)
		}
		if l.ReadLeaseAcked() <= last {
			t.Fatalf("nothing past %d acknowledged", last)
		}
	}
}

// TestReadLeaseGrantsInItsOwnTerm: a voter answers a holder's ask with a
// promise stamped with its own current term, even when the holder asks in
// an older one, and the leader's promise carries its commit index; a voter
// that knows no leader promises nothing. Broken (ReadLeaseStaleGrant), it
// promises in the older term the holder names.
func TestReadLeaseGrantsInItsOwnTerm(t *testing.T) {
	for _, broken := range []bool{false, true} {
		g := newLeaseGroup(t, 3, faults.Set{ReadLeaseStaleGrant: broken})
		l, f := leaseFollower(t, g)
		term := f.rn.BasicStatus().Term
		ask := func(r *Replica, askTerm uint64) []promise {
			r.rl.out = nil
			_ = r.StepRaft(g.now, raftpbMsg(msgLeaseAsk, 3, r.ID(), 99, askTerm))
			var out []promise
			for _, m := range r.rl.take() {
				if m.Type == msgLeasePromise && m.To == 3 && m.Index == 99 {
					out = append(out, promise{term: m.Term, leader: m.Reject, commit: m.Commit, visible: m.LogTerm})
				}
			}
			return out
		}
		if f.ID() == 3 || l.ID() == 3 {
			// replica 3 asks; pick another follower to answer
			for id, r := range g.reps {
				if r != l && id != 3 {
					f = r
				}
			}
		}
		got := ask(f, term-1)
		switch {
		case len(got) != 1:
			t.Fatalf("broken=%v: follower answered %d promises", broken, len(got))
		case !broken && got[0].term != term:
			t.Fatalf("follower promised in term %d, its term is %d", got[0].term, term)
		case broken && got[0].term != term-1:
			t.Fatalf("broken twin promised in term %d, want the holder's older %d", got[0].term, term-1)
		case got[0].leader:
			t.Fatal("a follower's promise claims to be the leader's")
		}
		if l.ID() != 3 {
			lp := ask(l, term)
			if len(lp) != 1 || !lp[0].leader || lp[0].commit != l.rn.BasicStatus().Commit {
				t.Fatalf("leader's promise %+v: want one, from the leader, with its commit index %d", lp, l.rn.BasicStatus().Commit)
			}
		}
		// A follower that knows no leader (cut off until it campaigns)
		// promises nothing.
		g.cut[f.ID()] = true
		g.run(3 * time.Second)
		if f.rn.BasicStatus().Lead != 0 {
			t.Fatalf("replica %d still names leader %d 3 s after it was cut off", f.ID(), f.rn.BasicStatus().Lead)
		}
		if got := ask(f, f.rn.BasicStatus().Term); len(got) != 0 && !broken {
			t.Fatalf("a replica that knows no leader promised: %+v", got)
		}
	}
}

func raftpbMsg(t raftpb.MessageType, from, to, index, term uint64) raftpb.Message {
	return raftpb.Message{Type: t, From: from, To: to, Index: index, Term: term}
}

// TestReadLeaseHolderAnswersSyncsCutOff: a follower holder cut off from the
// leader answers a Lookup's sync at once from its own applied copy while its
// lease lasts — also once its last ReadIndex proof is more than an election
// timeout old, when the lease alone lets it answer — and refuses, naming
// the leader it knew, from the moment the lease ends. Broken
// (ReadLeaseServeExpired), it goes on answering after.
func TestReadLeaseHolderAnswersSyncsCutOff(t *testing.T) {
	for _, broken := range []bool{false, true} {
		// A lease three election timeouts long, so that it outlasts the
		// ReadIndex proof by far.
		g := newLeaseGroupWith(t, 3, faults.Set{ReadLeaseServeExpired: broken},
			ReadLease{All: true, Duration: 750 * ms})
		_, f := leaseFollower(t, g)
		g.cut[f.ID()] = true
		until := f.ReadLease(g.now).Until
		proofAt, _ := f.ReadIndexProof()
		proofEnds := proofAt.Add(f.electionTimeout())
		if !proofEnds.Before(until) {
			t.Fatalf("the ReadIndex proof (ends %s) outlasts the lease (ends %s)", proofEnds.Sub(base), until.Sub(base))
		}
		lsn := f.State().Table(protocol.DefaultNamespace).LSN()
		onLease, refused := 0, 0
		for session := uint64(1); g.now.Before(until.Add(time.Second)); session++ {
			g.run(10 * ms)
			f.feed.Ready() // pushes
			err := f.StepSync(g.now, session, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: session})
			var nl *NotLeaderError
			switch {
			case err == nil && !g.now.Before(until) && !broken:
				t.Fatalf("answered a sync %s after its lease ended", g.now.Sub(until))
			case err == nil:
				out := f.feed.Ready()
				if len(out) != 1 || out[0].To != session || out[0].Msg.Update.To != lsn {
					t.Fatalf("a sync under the lease answered %+v, want one answer at the cut-off copy's LSN %d", out, lsn)
				}
				if !g.now.Before(proofEnds) {
					onLease++
				}
			case g.now.Before(until):
				t.Fatalf("refused a sync %s before its lease ended: %v", until.Sub(g.now), err)
			case !errors.As(err, &nl):
				t.Fatalf("refused with %v, want a NotLeaderError", err)
			default:
				refused++
			}
		}
		if onLease == 0 {
			t.Fatalf("broken=%v: no sync answered on the lease alone", broken)
		}
		if got := f.ReadLease(g.now).Stats.Syncs; got < uint64(onLease) {
			t.Fatalf("Stats.Syncs = %d, want at least the %d answered on the lease alone", got, onLease)
		}
		if broken != (refused == 0) {
			t.Fatalf("broken=%v: refused %d syncs after the lease ended", broken, refused)
		}
	}
}
