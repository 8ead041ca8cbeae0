package presence

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// fakeLeases holds one lease over the whole key space, or none; afterNow,
// if set, runs once after the next CheckLeaseNow (a lease change in the
// middle of an operation).
type fakeLeases struct {
	n        owner.LeaseNum
	held     bool
	afterNow func(*fakeLeases)
}

func (f *fakeLeases) CheckLeaseNow(keyspace.Key) (owner.LeaseNum, bool) {
	n, ok := f.n, f.held
	if h := f.afterNow; h != nil {
		f.afterNow = nil
		h(f)
	}
	return n, ok
}

func (f *fakeLeases) CheckLeaseContinuous(_ keyspace.Key, n owner.LeaseNum) bool {
	return f.held && f.n == n
}

func (f *fakeLeases) grant(lgn keyspace.LGN) { f.n, f.held = owner.LeaseNum{Epoch: 1, LGN: lgn}, true }

func mustQuery(t *testing.T, s *store, user string) []Device {
	t.Helper()
	a, err := s.query(user)
	if err != nil {
		t.Fatalf("query %s: %v", user, err)
	}
	return a.Devices
}

// TestStoreFiveSteps walks both operations through each step's failure.
func TestStoreFiveSteps(t *testing.T) {
	f := &fakeLeases{}
	s := newStore(f, time.Minute)
	// (1) No lease: no heartbeat stored, no answer.
	if err := s.heartbeat("alice", "phone", "on", 1); !errors.Is(err, errNotOwner) {
		t.Fatalf("heartbeat without a lease: %v, want %v", err, errNotOwner)
	}
	if _, err := s.query("alice"); !errors.Is(err, errNotOwner) {
		t.Fatalf("query without a lease: %v, want %v", err, errNotOwner)
	}
	f.grant(1)
	if err := s.heartbeat("alice", "phone", "s2", 2); err != nil {
		t.Fatal(err)
	}
	// An older heartbeat (retried, reordered) never rolls the status back.
	if err := s.heartbeat("alice", "phone", "s1", 1); err != nil {
		t.Fatal(err)
	}
	if d := mustQuery(t, s, "alice"); len(d) != 1 || d[0].Seq != 2 || d[0].Status != "s2" {
		t.Fatalf("devices %+v, want phone at seq 2", d)
	}
	// (2) The lease changed (another server may have held alice in
	// between and acknowledged newer heartbeats): the state stored under
	// lease 1 is stale, and is not answered with.
	f.grant(3)
	if d := mustQuery(t, s, "alice"); len(d) != 0 {
		t.Fatalf("under a new lease: devices %+v, want none (stale)", d)
	}
	// (4) The lease ends during the operation: 421, not an answer.
	if err := s.heartbeat("alice", "phone", "s3", 3); err != nil {
		t.Fatal(err)
	}
	f.afterNow = func(f *fakeLeases) { f.grant(4) }
	if _, err := s.query("alice"); !errors.Is(err, errLeaseLost) {
		t.Fatalf("query whose lease ended: %v, want %v", err, errLeaseLost)
	}
	f.afterNow = func(f *fakeLeases) { f.held = false }
	if err := s.heartbeat("alice", "tablet", "on", 1); !errors.Is(err, errLeaseLost) {
		t.Fatalf("heartbeat whose lease ended: %v, want %v", err, errLeaseLost)
	}
}

// TestStoreTTL checks a device not heard from for the TTL is offline, and
// sweep frees users whose lease ended.
func TestStoreTTL(t *testing.T) {
	f := &fakeLeases{}
	f.grant(1)
	s := newStore(f, time.Second)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	for _, d := range []string{"phone", "laptop"} {
		if err := s.heartbeat("bob", d, "on", 1); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(800 * time.Millisecond)
	if err := s.heartbeat("bob", "phone", "on", 2); err != nil {
		t.Fatal(err)
	}
	now = now.Add(400 * time.Millisecond)
	if d := mustQuery(t, s, "bob"); len(d) != 1 || d[0].Device != "phone" || d[0].AgeMS != 400 {
		t.Fatalf("devices %+v, want only phone, 400 ms old", d)
	}
	f.grant(2)
	s.sweep()
	if users, devices := s.counts(); users != 0 || devices != 0 {
		t.Fatalf("after the lease changed and a sweep: %d users, %d devices stored; want none", users, devices)
	}
}

// BenchmarkStoreHeartbeat is the server's own work per heartbeat, without
// HTTP: the five steps on the store, 10,000 users, from parallel goroutines.
func BenchmarkStoreHeartbeat(b *testing.B) {
	f := &fakeLeases{}
	f.grant(1)
	s := newStore(f, time.Minute)
	users := make([]string, 10000)
	for i := range users {
		users[i] = "user-" + string(rune('a'+i%26)) + "-" + time.Duration(i).String()
	}
	var next atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			if err := s.heartbeat(users[i%uint64(len(users))], "phone", "on", i); err != nil {
				b.Fatal(err)
			}
		}
	})
}
