package manager

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/replica"
	"github.com/leasehold/leasehold/internal/wire"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

var (
	base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tm   = protocol.Fast()
)

const epoch = 3

// feedWith returns a Feed over a State whose table has been split into
// segments pieces, each granted, and sessions Lookups synced at its LSN.
func feedWith(tb testing.TB, segments, sessions int) (*lease.State, *replica.Feed) {
	st := lease.NewState(tm.LogRetention)
	if err := st.Apply(base, []lease.Change{{Op: lease.OpEpoch, Epoch: epoch}, {Op: lease.OpNamespace, NS: protocol.DefaultNamespace}}); err != nil {
		tb.Fatal(err)
	}
	grantAll(tb, st, segments, 1)
	f := replica.NewFeed(st, tm)
	for id := range uint64(sessions) {
		req := &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 1, Epoch: epoch, LSN: st.Table(protocol.DefaultNamespace).LSN()}
		if err := f.StepSync(base, id+1, req); err != nil {
			tb.Fatal(err)
		}
	}
	f.Ready()
	return st, f
}

// grantAll grants each of n equal pieces of the key space anew, in one
// entry: n changes.
func grantAll(tb testing.TB, st *lease.State, n int, lgn keyspace.LGN) {
	step := keyspace.Key(^uint64(0)/uint64(n) + 1)
	var chs []lease.Change
	for i := range n {
		r := keyspace.Range{Start: keyspace.Key(i) * step, End: keyspace.Key(i+1) * step}
		if i == n-1 {
			r.End = 0
		}
		chs = append(chs, lease.Change{Op: lease.OpSet, NS: protocol.DefaultNamespace, Range: r,
			Entry: leasetable.Entry{Owner: fmt.Sprintf("owner-%d", i%100), Addr: "10.0.0.1:7000", LGN: lgn + keyspace.LGN(i)}})
	}
	if err := st.Apply(base, chs); err != nil {
		tb.Fatal(err)
	}
}

// TestSyncResponsesShareTheirWireUpdate: the server converts an Update the
// Feed shares between Lookups to its wire form once, and every Lookup's
// message carries it with its own ID; the messages read back as what the
// Feed sent, and marshalling them concurrently (one stream goroutine each)
// is safe. Each shared update is encoded once, not once per stream: the
// codec sends its bytes with every message.
func TestSyncResponsesShareTheirWireUpdate(t *testing.T) {
	t.Parallel()
	const sessions = 50
	st, f := feedWith(t, 500, sessions)
	grantAll(t, st, 500, 10000) // a push of 500 changes to every session
	f.Push()
	// And one session asking from further back: a different update.
	if err := f.StepSync(base, 7, &protocol.SyncRequest{Namespace: protocol.DefaultNamespace, ID: 42, Epoch: epoch, LSN: 3}); err != nil {
		t.Fatal(err)
	}
	out := f.Ready()
	if len(out) != sessions+1 {
		t.Fatalf("%d messages, want %d", len(out), sessions+1)
	}
	shared := map[updateKey]*sharedUpdate{}
	var outs []syncOut
	var msgs []*pb.SyncResponse
	for _, m := range out {
		o := syncResponseToPB(m.Msg, shared, false, false)
		outs = append(outs, o)
		msgs = append(msgs, o.m)
	}
	if len(shared) != 2 {
		t.Errorf("%d updates converted for one push round and one older sync, want 2", len(shared))
	}
	for i, pm := range msgs[:sessions] {
		if pm.Update != msgs[0].Update {
			t.Fatalf("message %d has its own wire update", i)
		}
	}
	if msgs[sessions].Update == msgs[0].Update || msgs[sessions].GetId() != 42 {
		t.Fatalf("the answer to the older sync: id %d, shares the push's update: %v", msgs[sessions].GetId(), msgs[sessions].Update == msgs[0].Update)
	}
	var wg sync.WaitGroup
	encoded := make([][]byte, len(msgs))
	var encodings atomic.Int64
	codec := limitCodecV2{encodings: &encodings}
	for i, o := range outs {
		wg.Go(func() {
			bs, err := codec.Marshal(&encodedSync{m: o.m, u: o.shared})
			if err != nil {
				t.Error(err)
			}
			encoded[i] = bs.Materialize()
		})
	}
	wg.Wait()
	if n := encodings.Load(); n != 2 {
		t.Errorf("%d updates marshalled for %d messages sharing two updates, want 2", n, len(msgs))
	}
	for i, b := range encoded {
		want, err := proto.Marshal(msgs[i])
		if err != nil {
			t.Fatal(err)
		}
		var got, whole pb.SyncResponse
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(want, &whole); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &whole) || len(b) != len(want) {
			t.Fatalf("message %d: %d bytes sent shared, %d marshalled whole, and they differ", i, len(b), len(want))
		}
	}
	for i, b := range encoded {
		var back pb.SyncResponse
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got, err := wire.SyncResponseFromPB(&back)
		if err != nil {
			t.Fatal(err)
		}
		// The wire form leaves out the log's Whole marks.
		want := *out[i].Msg
		want.Update.Changes = slices.Clone(want.Update.Changes)
		for j := range want.Update.Changes {
			want.Update.Changes[j].Whole = false
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("message %d reads back otherwise than sent", i)
		}
	}
}
