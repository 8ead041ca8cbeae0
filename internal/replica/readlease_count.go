package replica

import (
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Whom the leader counts as possibly serving a read lease, and who may
// promise as the leader (docs/protocol.md, "Quorum read leases"). A holder
// may serve under any promise the leader made it, so the leader counts a
// holder for as long as a lease such a promise completes may last; these
// rules keep that count from outliving what the holder can still use.

// leading reports whether this replica is Raft's current leader and has
// taken over: the one notion of "am I leader" the read leases, the Owners'
// and the Lookups' paths share. The Core alone does not say it: Raft may
// have made this replica a follower in the steps since the last Advance
// (a heartbeat of a later term, CheckQuorum), and only the next Advance
// takes the Core away. The server steps up to 256 messages between two
// drives, so a deposed leader's Core outlives its leadership there.
func (r *Replica) leading() bool {
	if r.core == nil {
		return false
	}
	bs := r.rn.BasicStatus()
	return bs.RaftState == raft.StateLeader && bs.Term == r.coreTerm
}

// countHolder counts holder m.From, whose ask the leader answers now in
// term, for the lease this promise may complete. The holder times that
// lease from the ask of the round it acknowledged (m.Commit, of term
// m.LogTerm): a round whose promise from this leader came back to it. The
// leader promised that round at s, after the holder asked it, so the lease
// ends before s + B on the leader's clock, and the count runs to s + B. A
// promise that never arrives is never acknowledged and extends nothing, so
// a holder the leader cannot reach stops counting B after the last promise
// that reached it, whatever it asks.
func (l *readLeases) countHolder(now time.Time, m raftpb.Message, term uint64) {
	h := m.From
	sent := l.sent[h]
	if sent == nil {
		sent = map[uint64]time.Time{}
		l.sent[h] = sent
	}
	bound := l.bound()
	// A promise older than B can no longer make a lease that lasts.
	maps.DeleteFunc(sent, func(_ uint64, at time.Time) bool { return now.Sub(at) >= bound })
	if _, ok := sent[m.Index]; !ok {
		sent[m.Index] = now
	}
	var until time.Time
	if l.brk.ReadLeaseCountUnacked {
		until = now.Add(bound) // as if every promise arrived
	} else if s, ok := sent[m.Commit]; ok && m.Commit != 0 && m.LogTerm == term {
		until = s.Add(bound)
	}
	if until.After(l.promised[h]) {
		l.promised[h] = until
	}
}

// takeover starts the leader's count: every holder may hold promises
// made in earlier terms, which end within B of now — every holder of the
// configuration, and every holder that left it recently (gone), which the
// configuration no longer names.
func (l *readLeases) takeover(now time.Time) {
	clear(l.promised)
	clear(l.sent)
	l.countAll(now)
	l.nextSend = now
}

// countAll counts every holder, present or recently gone, until now + B.
func (l *readLeases) countAll(now time.Time) {
	until := now.Add(l.bound())
	hs := l.holders()
	for h, t := range l.gone {
		if now.Before(t) {
			hs = append(hs, h)
		}
	}
	for _, h := range hs {
		if until.After(l.promised[h]) {
			l.promised[h] = until
		}
	}
}

// membersChanged runs on every replica when its applied members
// change (a conf change or a snapshot): before is the members it had. A
// holder that left may hold a lease from a promise made before it left,
// and the configuration forgets it, so every replica remembers it as gone
// for B: a leader promised it before the leader applied the removal (a
// leader that has applied it drops the holder's messages), hence before
// any replica learned the removal committed, so before now, and any such
// lease ends before now + B. The leader goes on counting it as long (its
// count is in promised, which the configuration does not prune), and a
// new leader counts it from its takeover. A change of the voters also
// recounts every holder for B (a lease counted against the former voters
// may last that long).
func (l *readLeases) membersChanged(now time.Time, before map[uint64]string) {
	if !l.on() {
		return
	}
	until := now.Add(l.bound())
	for h := range before {
		if _, ok := l.v.peers()[h]; ok || !l.cfg.Holds(h) {
			continue
		}
		if l.brk.ReadLeaseForgetRemoved {
			delete(l.promised, h)
			continue
		}
		l.gone[h] = until
	}
	if l.v.leading() {
		l.countAll(now)
	}
}

// holders lists the configured holders among the group's members.
func (l *readLeases) holders() []uint64 {
	var hs []uint64
	if l.cfg.All {
		for _, h := range slices.Sorted(maps.Keys(l.v.peers())) {
			if !l.v.reader(h) {
				hs = append(hs, h)
			}
		}
	} else {
		hs = slices.Clone(l.cfg.Holders)
	}
	return hs
}

// votersKey names a configuration's voters, 0 while it is joint: a leader's
// promise carries its own, and a holder takes a lease only if the majority
// it counted is one of the same voters.
func votersKey(c raftpb.ConfState) uint64 {
	if len(c.VotersOutgoing) > 0 || len(c.Voters) == 0 {
		return 0
	}
	h := fnv.New64a()
	var b [8]byte
	for _, v := range slices.Sorted(slices.Values(c.Voters)) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum64() | 1
}
