package mail

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// fakeLeases holds one lease over the whole key space, or none.
type fakeLeases struct {
	n    owner.LeaseNum
	held bool
}

func (f *fakeLeases) CheckLeaseNow(keyspace.Key) (owner.LeaseNum, bool) { return f.n, f.held }
func (f *fakeLeases) CheckLeaseContinuous(_ keyspace.Key, n owner.LeaseNum) bool {
	return f.held && f.n == n
}
func (f *fakeLeases) Held() []owner.Lease {
	if !f.held {
		return nil
	}
	return []owner.Lease{{Range: keyspace.Full, Num: f.n}}
}
func (f *fakeLeases) grant(lgn keyspace.LGN) { f.n, f.held = owner.LeaseNum{Epoch: 1, LGN: lgn}, true }

// rebuild answers the work list as the nodes would, from their users.
func rebuild(m *maps, disks map[string][]string) {
	for l, nodes := range m.work(0) {
		for _, node := range nodes {
			m.merge(l, node, disks[node], nil)
		}
	}
}

// TestMapsRebuildUnderOneLease checks the mail map is used only under the
// lease it was rebuilt under, is complete once every node answered, and
// never takes an answer meant for an earlier lease.
func TestMapsRebuildUnderOneLease(t *testing.T) {
	f := &fakeLeases{}
	m := newMaps(f, []string{"a", "b"})
	if _, _, _, err := m.lookup("alice"); !errors.Is(err, errNotOwner) {
		t.Fatalf("lookup without a lease: %v, want %v", err, errNotOwner)
	}
	f.grant(1)
	if _, _, _, err := m.lookup("alice"); !errors.Is(err, errRebuilding) {
		t.Fatalf("lookup before the rebuild: %v, want %v", err, errRebuilding)
	}
	disks := map[string][]string{"a": {"alice"}, "b": {"alice", "bob"}}
	rebuild(m, disks)
	if _, nodes, unknown, err := m.lookup("alice"); err != nil || !slices.Equal(nodes, []string{"a", "b"}) || len(unknown) != 0 {
		t.Fatalf("alice after the rebuild: %v %v %v; want [a b], none unknown", nodes, unknown, err)
	}

	// A new lease: the map of lease 1 does not count; an answer to lease
	// 1's rebuild arriving now is thrown away.
	old := lease{keyspace.Full, f.n}
	f.grant(2)
	m.merge(old, "a", []string{"carol"}, nil) // before the upcall: lease 1's map is still there
	if m.ranges[old].users["carol"] != nil {
		t.Fatal("an answer for lease 1 was merged after lease 1 ended")
	}
	m.changed(owner.OwnershipChange{Revoked: []keyspace.Range{keyspace.Full}, Granted: f.Held()})
	if _, _, _, err := m.lookup("alice"); !errors.Is(err, errRebuilding) {
		t.Fatalf("lookup under lease 2 before its rebuild: %v, want %v", err, errRebuilding)
	}
	disks["a"] = []string{"alice", "carol"}
	var bLease lease
	for l, nodes := range m.work(0) {
		for _, node := range nodes {
			if node == "b" {
				bLease = l // b is slow: its answer is still on its way
				continue
			}
			m.merge(l, node, disks[node], nil)
		}
	}
	// A node asked and not answered yet is waited for: a read now could
	// miss its fragments without saying so (it did not fail).
	if _, _, _, err := m.lookup("alice"); !errors.Is(err, errRebuilding) {
		t.Fatalf("lookup with b's answer on its way: %v, want %v", err, errRebuilding)
	}
	m.merge(bLease, "b", nil, errors.New("b is down")) // b fails: it stays unknown
	_, nodes, unknown, err := m.lookup("alice")
	if err != nil || !slices.Equal(nodes, []string{"a"}) || !slices.Equal(unknown, []string{"b"}) {
		t.Fatalf("alice with b not answering: %v, unknown %v, %v; want [a], unknown [b]", nodes, unknown, err)
	}
	// A delivery under a lease that ended is not acknowledged.
	if err := m.added("alice", "b", old.n); !errors.Is(err, errLeaseLost) {
		t.Fatalf("added under the old lease: %v, want %v", err, errLeaseLost)
	}
	if err := m.added("alice", "b", f.n); err != nil {
		t.Fatal(err)
	}
	if _, nodes, _, _ := m.lookup("alice"); !slices.Equal(nodes, []string{"a", "b"}) {
		t.Fatalf("after delivering to b: %v, want [a b]", nodes)
	}
}

// TestDisk checks fragments are durable across a reopen, a torn last line
// is skipped, and users are listed by range.
func TestDisk(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob", "alice"} {
		if err := d.store(u, Message{ID: u + "-1", Body: "hi", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "616c696365.mbox"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"torn","bo`)
	f.Close()
	d, err = openDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := d.fetch("alice")
	if err != nil || len(ms) != 2 {
		t.Fatalf("alice's fragment: %v, %v; want the 2 messages written whole", ms, err)
	}
	users := d.usersIn(keyspace.Full)
	slices.Sort(users)
	if !slices.Equal(users, []string{"alice", "bob"}) {
		t.Fatalf("users %v, want [alice bob]", users)
	}
	k := keyspace.KeyOf("alice")
	if got := d.usersIn(keyspace.Range{Start: k, End: k + 1}); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("users in alice's key alone: %v", got)
	}
}
