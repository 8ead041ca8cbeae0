package peers

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// FuzzDecode feeds arbitrary bytes to the incoming-message check. It calls
// parse, not decode, so that a panic in raftpb's decoder (which decode would
// turn into an error) fails the fuzz run. Whatever parse accepts must be safe
// to hand to Raft and must survive re-encoding.
func FuzzDecode(f *testing.F) {
	const self = 2
	for _, m := range []raftpb.Message{
		hb(1, 2, 1),
		{Type: raftpb.MsgApp, From: 1, To: 2, Term: 4, LogTerm: 3, Index: 9, Commit: 8, Entries: []raftpb.Entry{
			{Term: 4, Index: 10, Type: raftpb.EntryNormal, Data: []byte("lease")},
			{Term: 4, Index: 11, Type: raftpb.EntryConfChange, Data: []byte{8, 1, 16, 3}},
		}},
		{Type: raftpb.MsgAppResp, From: 3, To: 2, Term: 4, Index: 11, Reject: true, RejectHint: 7},
		{Type: raftpb.MsgVote, From: 3, To: 2, Term: 5, LogTerm: 4, Index: 11},
		{Type: raftpb.MsgReadIndex, From: 1, To: 2, Entries: []raftpb.Entry{{Data: []byte("ctx")}}},
		snap(1, 2, 32),
		{Type: raftpb.MsgHup, From: 1, To: 2},
		hb(1, 3, 1),
	} {
		b, err := m.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(negativeType)
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // entries, length 2^32-1
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parse(self, b)
		if _, err2 := decode(self, b); (err == nil) != (err2 == nil) {
			t.Fatalf("parse: %v, decode: %v", err, err2)
		}
		if err != nil {
			return
		}
		if m.To != self || m.From == 0 || m.From == self {
			t.Fatalf("accepted a message from %d to %d", m.From, m.To)
		}
		if _, ok := raftpb.MessageType_name[int32(m.Type)]; !ok || raft.IsLocalMsg(m.Type) {
			t.Fatalf("accepted a message of type %d", int32(m.Type))
		}
		again, err := m.Marshal()
		if err != nil {
			t.Fatalf("re-encoding an accepted message: %v", err)
		}
		m2, err := parse(self, again)
		if err != nil {
			t.Fatalf("refused the re-encoding of an accepted message: %v", err)
		}
		again2, err := m2.Marshal()
		if err != nil || !bytes.Equal(again, again2) {
			t.Fatalf("re-encoding is not stable: %v", err)
		}
	})
}
