package wire

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func entry(owner string, lgn uint64) *leaseholdv1.Entry {
	if owner == "" {
		return &leaseholdv1.Entry{}
	}
	return &leaseholdv1.Entry{Owner: owner, Addr: owner + ":1", Lgn: lgn}
}

func syncResp(id uint64, u *leaseholdv1.Update) *leaseholdv1.SyncResponse {
	return &leaseholdv1.SyncResponse{Namespace: "default", Id: id, Epoch: 2, Update: u, SyncNanos: 2e9, SyncTimeoutNanos: 5e9}
}

// On a sync stream the namespace and timings are said once, and each
// owner's ID and address once: later entries name it by number, and the
// Lookup reads every message as the full one. The shared update the
// Manager hands to many streams is never changed.
func TestSyncNamesRoundTrip(t *testing.T) {
	var l LookupNames
	var m ManagerSyncNames
	snap := &leaseholdv1.Update{To: 3, Snapshot: true, Segments: []*leaseholdv1.Segment{
		{Range: &leaseholdv1.Range{Start: 0, End: 100}, Entry: entry("a", 1)},
		{Range: &leaseholdv1.Range{Start: 100, End: 200}, Entry: entry("b", 2)},
		{Range: &leaseholdv1.Range{Start: 200, End: 0}, Entry: entry("a", 3)},
	}}
	delta := &leaseholdv1.Update{From: 3, To: 5, Changes: []*leaseholdv1.Change{
		{Lsn: 4, Range: &leaseholdv1.Range{Start: 0, End: 100}, Entry: entry("", 0)},
		{Lsn: 5, Range: &leaseholdv1.Range{Start: 0, End: 100}, Entry: entry("b", 4)},
	}}
	delta2 := &leaseholdv1.Update{From: 5, To: 6, Changes: []*leaseholdv1.Change{
		{Lsn: 6, Range: &leaseholdv1.Range{Start: 100, End: 200}, Entry: entry("c", 5)},
	}}
	for i, u := range []*leaseholdv1.Update{snap, delta, delta2} {
		req := &leaseholdv1.SyncRequest{Namespace: "default", Id: uint64(i + 1), Epoch: 2}
		w := proto.Clone(l.Send(req)).(*leaseholdv1.SyncRequest)
		if i > 0 && w.Namespace != "" {
			t.Errorf("request %d repeats its namespace", i+1)
		}
		m.Recv(w)
		if w.Namespace != "default" {
			t.Errorf("request %d read with namespace %q", i+1, w.Namespace)
		}
		shared := proto.Clone(u).(*leaseholdv1.Update)
		sent := m.Send(syncResp(uint64(i+1), shared))
		if !proto.Equal(shared, u) {
			t.Fatalf("Send changed the shared update: %v", shared)
		}
		onWire := proto.Clone(sent).(*leaseholdv1.SyncResponse)
		if err := l.Recv(onWire); err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		onWire.NamesOnce = false
		if want := syncResp(uint64(i+1), u); !proto.Equal(onWire, want) {
			t.Errorf("response %d read as\n%v\nwant\n%v", i+1, onWire, want)
		}
		if i == 1 {
			if sent.Namespace != "" || sent.SyncNanos != 0 {
				t.Errorf("response 2 repeats namespace or timings: %v", sent)
			}
			if e := sent.Update.Changes[1].Entry; e.Owner != "" || e.OwnerRef != 2 {
				t.Errorf("response 2 names b in full, or by the wrong number: %v", e)
			}
		}
	}
	if n := proto.Size(m.Send(syncResp(9, proto.Clone(delta).(*leaseholdv1.Update)))); n >= proto.Size(syncResp(9, delta)) {
		t.Errorf("a delta with names said once is %d bytes, not less than %d", n, proto.Size(syncResp(9, delta)))
	}
}

// A number the stream has not defined is an error, and a Manager talking
// to a Lookup that does not say names_once sends everything in full.
func TestSyncNamesUndefinedAndOldPeers(t *testing.T) {
	var l LookupNames
	bad := syncResp(1, &leaseholdv1.Update{From: 1, To: 2, Changes: []*leaseholdv1.Change{
		{Lsn: 2, Range: &leaseholdv1.Range{Start: 0, End: 0}, Entry: &leaseholdv1.Entry{OwnerRef: 3, Lgn: 7}}}})
	if err := l.Recv(bad); err == nil || !strings.Contains(err.Error(), "owner_ref 3 not defined") {
		t.Errorf("undefined owner_ref: err %v", err)
	}
	skip := syncResp(1, &leaseholdv1.Update{From: 1, To: 2, Changes: []*leaseholdv1.Change{
		{Lsn: 2, Range: &leaseholdv1.Range{Start: 0, End: 0}, Entry: &leaseholdv1.Entry{Owner: "a", Addr: "a:1", OwnerRef: 2, Lgn: 7}}}})
	if err := l.Recv(skip); err == nil {
		t.Errorf("owner_ref 2 defined before 1 was accepted")
	}

	var m ManagerSyncNames
	m.Recv(&leaseholdv1.SyncRequest{Namespace: "default", Id: 1})
	u := &leaseholdv1.Update{To: 1, Snapshot: true, Segments: []*leaseholdv1.Segment{{Range: &leaseholdv1.Range{}, Entry: entry("a", 1)}}}
	for i := range 2 {
		r := m.Send(syncResp(uint64(i), u))
		if r.NamesOnce || r.Namespace == "" || r.Update.Segments[0].Entry.Owner != "a" || r.Update.Segments[0].Entry.OwnerRef != 0 {
			t.Errorf("to a Lookup without names_once: %v", r)
		}
	}
	var l2 LookupNames
	for i := range 3 {
		if r := l2.Send(&leaseholdv1.SyncRequest{Namespace: "default", Id: uint64(i)}); r.Namespace == "" {
			t.Errorf("request %d left its namespace out before the Manager said names_once", i)
		}
		l2.Recv(syncResp(uint64(i), &leaseholdv1.Update{}))
	}
}

// A merged delta crosses the wire as it is; via_free outside a merged
// delta, or on a free entry, and a merged snapshot are refused.
func TestMergedDeltaOnTheWire(t *testing.T) {
	u := &leaseholdv1.Update{From: 3, To: 5, Merged: true, Changes: []*leaseholdv1.Change{
		{Lsn: 5, Range: &leaseholdv1.Range{Start: 0, End: 100}, Entry: entry("b", 4), ViaFree: true}}}
	got, err := UpdateFromPB(u)
	if err != nil || !got.Merged || len(got.Changes) != 1 || !got.Changes[0].ViaFree {
		t.Fatalf("merged delta read as %+v, %v", got, err)
	}
	if back := UpdateToPB(&got); !proto.Equal(back, u) {
		t.Errorf("merged delta written back as %v, want %v", back, u)
	}
	notMerged := proto.Clone(u).(*leaseholdv1.Update)
	notMerged.Merged = false
	free := proto.Clone(u).(*leaseholdv1.Update)
	free.Changes[0].Entry = entry("", 0)
	snap := &leaseholdv1.Update{To: 5, Snapshot: true, Merged: true}
	for _, bad := range []*leaseholdv1.Update{notMerged, free, snap} {
		if _, err := UpdateFromPB(bad); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}
