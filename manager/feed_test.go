package manager

import (
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// TestFeedBehindWaits: a replica whose table is behind a Lookup's copy (the
// Lookup last synced with a replica further ahead) answers nothing until it
// has caught up, then pushes from the Lookup's LSN: a copy never moves back.
func TestFeedBehindWaits(t *testing.T) {
	st := NewState(tm.LogRetention)
	set := func(lgn keyspace.LGN) {
		t.Helper()
		if err := st.Apply(base, []Change{{Op: OpSet, NS: DefaultNamespace, Range: keyspace.Full,
			Entry: leasetable.Entry{Owner: "a", Addr: "a:1", LGN: lgn}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Apply(base, []Change{{Op: OpEpoch, Epoch: epoch}, {Op: OpNamespace, NS: DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	set(1) // LSN 1
	f := NewFeed(st, tm)
	if err := f.StepSync(base, 7, &protocol.SyncRequest{Namespace: DefaultNamespace, ID: 1, Epoch: epoch, LSN: 3}); err != nil {
		t.Fatal(err)
	}
	f.Push()
	if got := f.Ready(); len(got) != 0 {
		t.Fatalf("a replica at LSN 1 answered a copy at LSN 3: %+v", got)
	}
	set(2) // LSN 2: still behind
	f.Push()
	if got := f.Ready(); len(got) != 0 {
		t.Fatalf("a replica at LSN 2 pushed to a copy at LSN 3: %+v", got)
	}
	set(3)
	set(4) // LSN 4
	f.Push()
	got := f.Ready()
	if len(got) != 1 || got[0].To != 7 {
		t.Fatalf("after catching up: %+v, want one push to session 7", got)
	}
	if u := got[0].Msg.Update; u.Snapshot || u.From != 3 || u.To != 4 || len(u.Changes) != 1 {
		t.Fatalf("push %+v, want the one change after LSN 3", u)
	}
}
