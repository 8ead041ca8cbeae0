package wire

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// compactDelta is what the Manager pushes to a Lookup that says
// compact_changes: the delta marked and merged.
func compactDelta(u leasetable.Update) leasetable.Update {
	return leasetable.Merge(leasetable.MarkFromCopy(u))
}

// asDecoded is u as a Lookup decodes its compact form: no Whole and
// LeftOwner marks (the wire does not carry them), and End 0 and no Owner
// where the copy gives them.
func asDecoded(u leasetable.Update) leasetable.Update {
	u.Changes = slices.Clone(u.Changes)
	for i := range u.Changes {
		c := &u.Changes[i]
		c.Whole, c.LeftOwner = false, false
		if c.FromCopy {
			c.Range.End = 0
		}
		if c.OwnerFromCopy {
			c.Entry.Owner, c.Entry.Addr = "", ""
		}
	}
	return u
}

// randDeltas builds a table with a few owners and returns deltas of it as
// the Manager makes them: ranges freed and granted again, migrations,
// splits, over a copy's snapshot at each delta's From.
func randDeltas(seed uint64, n int) (starts []leasetable.Update, deltas []leasetable.Update) {
	r := rand.New(rand.NewPCG(seed, 11))
	tb := leasetable.New(0)
	now := time.Unix(0, 0)
	lgn := keyspace.LGN(0)
	bounds := []keyspace.Key{0}
	for range 12 {
		bounds = append(bounds, keyspace.Key(r.Uint64()))
	}
	slices.Sort(bounds)
	rng := func() keyspace.Range {
		i := r.IntN(len(bounds))
		j := i + 1 + r.IntN(2)
		if j >= len(bounds) {
			return keyspace.Range{Start: bounds[i]}
		}
		return keyspace.Range{Start: bounds[i], End: bounds[j]}
	}
	step := func() {
		rg := rng()
		old := tb.At(rg.Start).Entry
		lgn++
		o := fmt.Sprint("owner-", r.IntN(5))
		e := leasetable.Entry{Owner: o, Addr: o + ":7000", LGN: lgn}
		if old.LGN != 0 && r.IntN(4) == 0 {
			e.Migrated = true
			if r.IntN(2) == 0 {
				e.MigratedFrom = old.LGN
			}
		}
		if r.IntN(3) == 0 {
			tb.Set(now, rg, leasetable.Entry{})
			if r.IntN(2) == 0 {
				return
			}
		}
		tb.Set(now, rg, e)
	}
	for range 8 {
		step()
	}
	for range n {
		starts = append(starts, tb.Snapshot())
		from := tb.LSN()
		for range 1 + r.IntN(10) {
			step()
		}
		deltas = append(deltas, tb.Since(from))
	}
	return starts, deltas
}

// The compact form carries a delta exactly: decoded, it is the delta with
// each FromCopy change's End left to the copy, and a copy at From that
// applies it ends as one that applies the full form. Over a names_once
// stream, owners are named once per stream, and the update the Manager
// shares between streams is never changed.
func TestCompactRoundTrip(t *testing.T) {
	var l LookupNames
	var m ManagerSyncNames
	req := l.Send(&leaseholdv1.SyncRequest{Namespace: "default", Id: 1})
	if !req.GetCompactChanges() || !req.GetNamesOnce() {
		t.Fatalf("a Lookup's request does not say names_once and compact_changes: %v", req)
	}
	m.Recv(req)
	if !m.AcceptsCompact() {
		t.Fatal("the Manager's end does not take compact_changes from the request")
	}
	// Said once per stream: later requests leave it out, and the Manager's
	// end remembers it.
	m.Send(syncResp(1, &leaseholdv1.Update{}))
	l.Recv(&leaseholdv1.SyncResponse{Namespace: "default", NamesOnce: true, Update: &leaseholdv1.Update{}})
	if again := l.Send(&leaseholdv1.SyncRequest{Namespace: "default", Id: 2}); again.GetCompactChanges() || again.GetNamespace() != "" {
		t.Errorf("a later request repeats compact_changes or its namespace: %v", again)
	} else if m.Recv(again); !m.AcceptsCompact() {
		t.Error("the Manager's end forgot compact_changes")
	}
	fromCopy, viaFree := 0, 0
	for seed := range uint64(200) {
		starts, deltas := randDeltas(seed, 5)
		for i, whole := range deltas {
			u := compactDelta(whole)
			want := asDecoded(u)
			for _, c := range want.Changes {
				if c.FromCopy {
					fromCopy++
				}
				if c.ViaFree {
					viaFree++
				}
			}
			shared := CompactUpdateToPB(&u)
			b, err := proto.Marshal(shared)
			if err != nil {
				t.Fatal(err)
			}
			// Self-contained, as it is shared between streams.
			var back leaseholdv1.Update
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			got, err := UpdateFromPB(&back)
			if err != nil {
				t.Fatalf("seed %d delta %d: %v", seed, i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d delta %d decodes as\n%v\nwant\n%v", seed, i, got.Changes, want.Changes)
			}
			// Over the stream.
			keep := proto.Clone(shared)
			sent := m.Send(syncResp(0, shared))
			if !proto.Equal(shared, keep) {
				t.Fatalf("Send changed the shared update")
			}
			wb, err := proto.Marshal(sent)
			if err != nil {
				t.Fatal(err)
			}
			var onWire leaseholdv1.SyncResponse
			if err := proto.Unmarshal(wb, &onWire); err != nil {
				t.Fatal(err)
			}
			if err := l.Recv(&onWire); err != nil {
				t.Fatalf("seed %d delta %d: %v", seed, i, err)
			}
			r, err := SyncResponseFromPB(&onWire)
			if err != nil {
				t.Fatalf("seed %d delta %d: %v", seed, i, err)
			}
			if !reflect.DeepEqual(r.Update, want) {
				t.Fatalf("seed %d delta %d decodes over the stream as\n%v\nwant\n%v", seed, i, r.Update.Changes, want.Changes)
			}
			// Applied to a copy at From: the same copy as the full form.
			full, compact := leasetable.NewView(), leasetable.NewView()
			for _, v := range []*leasetable.View{full, compact} {
				if _, err := v.Apply(starts[i]); err != nil {
					t.Fatal(err)
				}
			}
			lf, err := full.Apply(whole)
			if err != nil {
				t.Fatal(err)
			}
			lc, err := compact.Apply(r.Update)
			if err != nil {
				t.Fatalf("seed %d delta %d: a compact delta does not fit the copy it was made for: %v", seed, i, err)
			}
			if !slices.Equal(lf, lc) || !slices.Equal(full.Segments(), compact.Segments()) || full.LSN() != compact.LSN() {
				t.Fatalf("seed %d delta %d: the compact delta applies otherwise", seed, i)
			}
		}
	}
	if fromCopy < 500 || viaFree < 100 {
		t.Errorf("%d changes FromCopy and %d via free: the test does not exercise the compact form", fromCopy, viaFree)
	}
}

// crashDelta is the push after an Owner's crash in a table of owners
// Owners with 64 ranges each (consistent hashing): the dead Owner's ranges
// freed, then granted to the Owners the assignment without it names.
func crashDelta(owners int) (full, compact leasetable.Update) {
	var ms []assign.Member
	for i := range owners {
		ms = append(ms, assign.Member{ID: fmt.Sprintf("owner-%03d", i)})
	}
	tb := leasetable.New(0)
	now := time.Unix(0, 0)
	lgn := keyspace.LGN(40000) // a Manager that has run a while
	for _, s := range (assign.ConsistentHash{}).Assign(ms) {
		lgn++
		tb.Set(now, s.Range, leasetable.Entry{Owner: s.Owner, Addr: "10.0.0.1:7000", LGN: lgn})
	}
	for tb.LSN() < 60000 { // and as many changes
		lgn++
		s := tb.At(keyspace.Key(0))
		tb.Set(now, s.Range, leasetable.Entry{Owner: s.Entry.Owner, Addr: s.Entry.Addr, LGN: lgn})
	}
	dead := ms[7].ID
	from := tb.LSN()
	var held []keyspace.Range
	for _, s := range tb.Segments() {
		if s.Entry.Owner == dead {
			held = append(held, s.Range)
			tb.Set(now, s.Range, leasetable.Entry{})
		}
	}
	after := (assign.ConsistentHash{}).Assign(slices.Delete(slices.Clone(ms), 7, 8))
	for _, r := range held {
		lgn++
		tb.Set(now, r, leasetable.Entry{Owner: after.Owner(r.Start), Addr: "10.0.0.1:7000", LGN: lgn})
	}
	u := tb.Since(from)
	return leasetable.Merge(u), compactDelta(u)
}

// The bytes of a crash's push, per change, on a stream that has named every
// Owner before: the full form (Change messages, owners by owner_ref) and
// the compact one. The compact form must stay under a third of the full
// one and under 12 bytes a change; and, on a stream that has named no
// Owner yet, under a quarter.
func TestCompactCrashPushBytes(t *testing.T) {
	full, compact := crashDelta(50)
	if len(full.Changes) != len(compact.Changes) || len(full.Changes) < 40 {
		t.Fatalf("crash delta: %d and %d changes", len(full.Changes), len(compact.Changes))
	}
	var m ManagerSyncNames
	m.Recv(&leaseholdv1.SyncRequest{Namespace: "default", NamesOnce: true, CompactChanges: true})
	// Every Owner named on the stream already.
	var names []*leaseholdv1.Change
	for i := range 50 {
		names = append(names, &leaseholdv1.Change{Lsn: uint64(i + 1), Range: &leaseholdv1.Range{Start: uint64(i), End: uint64(i + 1)},
			Entry: &leaseholdv1.Entry{Owner: fmt.Sprintf("owner-%03d", i), Addr: "10.0.0.1:7000", Lgn: 1}})
	}
	m.Send(syncResp(0, &leaseholdv1.Update{From: 0, To: 50, Changes: names}))
	fm := m.Send(syncResp(0, UpdateToPB(&full)))
	cm := m.Send(syncResp(0, CompactUpdateToPB(&compact)))
	n := len(full.Changes)
	fb, cb := proto.Size(fm.GetUpdate()), proto.Size(cm.GetUpdate())
	c := fm.GetUpdate().GetChanges()[0]
	fromCopy, ownerFromCopy := 0, 0
	for _, ch := range compact.Changes {
		if ch.FromCopy {
			fromCopy++
		}
		if ch.OwnerFromCopy {
			ownerFromCopy++
		}
	}
	// On a stream that has named no Owner yet (the first crash a Lookup
	// hears of): the full form names each Owner once, in full; the compact
	// one takes them from the copy.
	var fresh, fresh2 ManagerSyncNames
	fresh.Recv(&leaseholdv1.SyncRequest{Namespace: "default", NamesOnce: true, CompactChanges: true})
	fresh2.Recv(&leaseholdv1.SyncRequest{Namespace: "default", NamesOnce: true, CompactChanges: true})
	ffb := proto.Size(fresh.Send(syncResp(0, UpdateToPB(&full))).GetUpdate())
	fcb := proto.Size(fresh2.Send(syncResp(0, CompactUpdateToPB(&compact))).GetUpdate())
	t.Logf("on a fresh stream: full form %d bytes, compact %d", ffb, fcb)
	if fcb*4 > ffb {
		t.Errorf("compact crash push on a fresh stream %d bytes, full %d: want under a quarter", fcb, ffb)
	}
	t.Logf("crash push, %d changes (%d FromCopy, %d OwnerFromCopy): full form %d bytes (%.1f a change: lsn %d, range %d, entry %d, via_free 2, headers), compact %d bytes (%.1f a change)",
		n, fromCopy, ownerFromCopy, fb, float64(fb)/float64(n), proto.Size(&leaseholdv1.Change{Lsn: c.Lsn}),
		proto.Size(&leaseholdv1.Change{Range: c.Range}), proto.Size(&leaseholdv1.Change{Entry: c.Entry}), cb, float64(cb)/float64(n))
	if fromCopy < n*9/10 || ownerFromCopy < n*9/10 {
		t.Errorf("only %d of %d ranges of a crash FromCopy, %d OwnerFromCopy", fromCopy, n, ownerFromCopy)
	}
	if cb*3 > fb || float64(cb)/float64(n) > 12 {
		t.Errorf("compact crash push %d bytes for %d changes, full %d: want under a third and 12 bytes a change", cb, n, fb)
	}
}

// A malformed compact delta is refused with ErrInvalid and says why.
func TestCompactRefused(t *testing.T) {
	_, deltas := randDeltas(3, 1)
	u := compactDelta(deltas[0])
	good := func() *leaseholdv1.Update { return CompactUpdateToPB(&u) }
	if _, err := UpdateFromPB(good()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		mod        func(m *leaseholdv1.Update)
	}{
		{"snapshot", "snapshot cannot carry", func(m *leaseholdv1.Update) { m.Snapshot = true }},
		{"both forms", "not both", func(m *leaseholdv1.Update) {
			m.Changes = []*leaseholdv1.Change{{Lsn: 1, Range: &leaseholdv1.Range{Start: 0, End: 1}, Entry: &leaseholdv1.Entry{}}}
		}},
		{"stream refs", "not resolved", func(m *leaseholdv1.Update) { m.Compact.StreamRefs = true }},
		{"short starts", "starts", func(m *leaseholdv1.Update) { m.Compact.Starts = m.Compact.Starts[1:] }},
		{"bad kind", "bad kind", func(m *leaseholdv1.Update) { m.Compact.Kinds[0] |= 64 }},
		{"unnamed owner", "named", func(m *leaseholdv1.Update) { m.Compact.Names = nil }},
		{"no lgns", "lgns", func(m *leaseholdv1.Update) { m.Compact.Lgns = nil }},
		{"extra lgn", "more than", func(m *leaseholdv1.Update) { m.Compact.Lgns = append(m.Compact.Lgns, 1) }},
		{"empty range", "empty range", func(m *leaseholdv1.Update) {
			m.Compact.Kinds[0] &^= kindFromCopy
			m.Compact.Ends = []uint64{m.Compact.Starts[0]}
			for i, k := range m.Compact.Kinds[1:] {
				if k&kindFromCopy == 0 {
					m.Compact.Ends = append(m.Compact.Ends, uint64(u.Changes[i+1].Range.End))
				}
			}
		}},
		{"owner lgn 0", "LGN 0", func(m *leaseholdv1.Update) {
			for i, o := range m.Compact.Owners {
				if o != 0 {
					m.Compact.Lgns[0] = 0
					_ = i
					break
				}
			}
		}},
		{"via free unmerged", "via_free", func(m *leaseholdv1.Update) { m.Merged = false; m.Compact.Kinds[0] |= kindViaFree }},
		{"empty owner", "required", func(m *leaseholdv1.Update) { m.Compact.Names[0].Owner = "" }},
	}
	for _, tc := range cases {
		m := good()
		tc.mod(m)
		_, err := UpdateFromPB(m)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	// On the stream: an owner number the stream has not defined.
	var l LookupNames
	m := good()
	m.Compact.StreamRefs = true
	m.Compact.Names = nil
	if err := l.Recv(syncResp(0, m)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not defined") {
		t.Errorf("an undefined owner_ref: %v", err)
	}
}

// FuzzCompactUpdate decodes arbitrary bytes as an Update, in the compact
// form above all: whatever UpdateFromPB accepts converts back with
// CompactUpdateToPB to an Update that decodes to the same value; whatever
// it refuses is refused with ErrInvalid; nothing panics. The same bytes
// also go through a Lookup's end of a stream (LookupNames.Recv).
//
//	go test -run '^$' -fuzz '^FuzzCompactUpdate$' -fuzztime 2m ./internal/wire/
func FuzzCompactUpdate(f *testing.F) {
	for seed := range uint64(4) {
		_, deltas := randDeltas(seed, 2)
		for _, d := range deltas {
			u := compactDelta(d)
			b, err := proto.Marshal(CompactUpdateToPB(&u))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	_, compact := crashDelta(10)
	b, _ := proto.Marshal(CompactUpdateToPB(&compact))
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m leaseholdv1.Update
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		var l LookupNames
		resp := &leaseholdv1.SyncResponse{Namespace: "n", Update: proto.Clone(&m).(*leaseholdv1.Update)}
		if err := l.Recv(resp); err == nil {
			if _, err := SyncResponseFromPB(resp); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("LookupNames.Recv error %q does not wrap ErrInvalid", err)
		}
		u, err := UpdateFromPB(&m)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		if m.GetCompact() == nil || u.Snapshot || len(u.Changes) == 0 {
			return // the full form: FuzzSyncResponse's
		}
		again, err := UpdateFromPB(CompactUpdateToPB(&u))
		if err != nil {
			t.Fatalf("the compact form of an accepted delta is refused: %v", err)
		}
		if !reflect.DeepEqual(again, u) {
			t.Fatalf("re-encoding changed the delta\n got %+v\nwant %+v", again, u)
		}
		// Applying it to a copy never panics, and refuses with an error
		// what does not fit.
		v := leasetable.NewView()
		_, _ = v.Apply(leasetable.Update{To: u.From, Snapshot: true, Segments: []leasetable.Segment{{Range: keyspace.Full}}})
		_, _ = v.Apply(u)
	})
}
