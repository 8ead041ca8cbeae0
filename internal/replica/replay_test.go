package replica

import (
	"testing"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestReplayAppliesEntriesAsAReplicaDoes: ReplayLog (leasehold restore)
// reaches the State a running replica reaches from the same log, because
// both apply entries through applyEntry: a conf change that neither adds
// nor removes a replica (UpdateNode) leaves the peers as they are, where a
// restore once read it as a removal.
func TestReplayAppliesEntriesAsAReplicaDoes(t *testing.T) {
	conf := func(typ raftpb.ConfChangeType, id uint64, addr string) raftpb.Entry {
		cc := raftpb.ConfChange{Type: typ, NodeID: id, Context: PeerContext(addr)}
		data, err := cc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return raftpb.Entry{Type: raftpb.EntryConfChange, Data: data}
	}
	ents := []raftpb.Entry{
		conf(raftpb.ConfChangeAddNode, 1, "m1:7400"),
		conf(raftpb.ConfChangeAddNode, 2, "m2:7400"),
		{Type: raftpb.EntryNormal}, // a new leader's empty entry
		conf(raftpb.ConfChangeUpdateNode, 2, "m2:7401"),
		conf(raftpb.ConfChangeRemoveNode, 1, ""),
	}
	ms := raft.NewMemoryStorage()
	for i := range ents {
		ents[i].Index, ents[i].Term = uint64(i+1), 1
	}
	if err := ms.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := ms.SetHardState(raftpb.HardState{Term: 1, Commit: uint64(len(ents))}); err != nil {
		t.Fatal(err)
	}
	st, index, term, err := ReplayLog(ms, tm.LogRetention, base)
	if err != nil {
		t.Fatal(err)
	}
	if index != uint64(len(ents)) || term != 1 {
		t.Errorf("replayed to %d/%d, want %d/1", index, term, len(ents))
	}
	want := lease.NewState(tm.LogRetention)
	for _, e := range ents {
		if _, err := applyEntry(want, base, e); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.Peers(); len(got) != 1 || got[2] != "m2:7400" {
		t.Errorf("peers after replay: %v, want only 2 at m2:7400", got)
	}
	if string(st.Encode()) != string(want.Encode()) {
		t.Errorf("replay reached\n%s\nwhere applying the entries reaches\n%s", st.Encode(), want.Encode())
	}
}
