// Applying committed entries to the State: the same function for a running
// replica and for a replay of its log (leasehold backup and restore).

package replica

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// entryEffect is what applying an entry did beyond the State.
type entryEffect struct {
	batch *batch             // a normal entry's batch of Changes
	cc    *raftpb.ConfChange // a conf change, for Raft to apply
	peer  *Peer              // the replica it adds (Addr set) or removes
}

// applyEntry applies committed entry e to st: a normal entry's batch of
// Changes (none for a new leader's empty entry), or the replica a conf
// change adds or removes; other conf changes leave st as it is. A running
// replica and a restore (ReplayLog) both apply entries through it, so they
// reach the same State.
func applyEntry(st *lease.State, now time.Time, e raftpb.Entry) (entryEffect, error) {
	var out entryEffect
	switch e.Type {
	case raftpb.EntryNormal:
		if len(e.Data) == 0 {
			return out, nil
		}
		b, err := decodeBatch(e.Data)
		if err != nil {
			return out, fmt.Errorf("entry %d: %w", e.Index, err)
		}
		if err := st.Apply(now, b.Changes); err != nil {
			return out, fmt.Errorf("entry %d: %w", e.Index, err)
		}
		out.batch = &b
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := cc.Unmarshal(e.Data); err != nil {
			return out, fmt.Errorf("%w: entry %d: conf change: %v", lease.ErrCorrupt, e.Index, err)
		}
		out.cc = &cc
		p := Peer{ID: cc.NodeID}
		switch cc.Type {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			p.Addr, p.ReadReplica = parsePeerContext(cc.Context)
			p.ReadReplica = p.ReadReplica && cc.Type == raftpb.ConfChangeAddLearnerNode
		case raftpb.ConfChangeRemoveNode:
		default:
			return out, nil
		}
		if err := st.Apply(now, []lease.Change{{Op: lease.OpPeer, Peer: p.ID, Addr: p.Addr, Reader: p.ReadReplica}}); err != nil {
			return out, fmt.Errorf("entry %d: %w", e.Index, err)
		}
		out.peer = &p
	}
	return out, nil
}

// ReplayLog rebuilds the State a replica with storage ms would reach: the
// snapshot's, then every committed entry after it. It returns the State and
// the index and term of the last entry applied. leasehold restore uses it.
func ReplayLog(ms *raft.MemoryStorage, retention time.Duration, now time.Time) (st *lease.State, index, term uint64, err error) {
	snap, err := ms.Snapshot()
	if err != nil {
		return nil, 0, 0, err
	}
	st = lease.NewState(retention)
	if !raft.IsEmptySnap(snap) {
		if st, err = lease.DecodeState(snap.Data, retention); err != nil {
			return nil, 0, 0, err
		}
		index, term = snap.Metadata.Index, snap.Metadata.Term
	}
	hs, _, err := ms.InitialState()
	if err != nil {
		return nil, 0, 0, err
	}
	if hs.Commit <= index {
		return st, index, term, nil
	}
	ents, err := ms.Entries(index+1, hs.Commit+1, 1<<62)
	if err != nil {
		return nil, 0, 0, err
	}
	for _, e := range ents {
		if _, err := applyEntry(st, now, e); err != nil {
			return nil, 0, 0, err
		}
		index, term = e.Index, e.Term
	}
	return st, index, term, nil
}
