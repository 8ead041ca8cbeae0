package kv

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// fakeLeases holds one lease over the whole key space, or none. afterNow,
// if set, runs once after the next CheckLeaseNow: it stands for a lease
// change in the middle of an operation.
type fakeLeases struct {
	n        owner.LeaseNum
	held     bool
	migrated bool // the lease is a grant marked migrated, as Held shows it
	promoted bool // the lease is a grant marked promoted (and migrated)
	afterNow func(*fakeLeases)
}

func (f *fakeLeases) CheckLeaseNow(keyspace.Key) (owner.LeaseNum, bool) {
	n, ok := f.n, f.held
	if h := f.afterNow; h != nil {
		f.afterNow = nil
		h(f)
	}
	if !ok {
		return owner.LeaseNum{}, false
	}
	return n, true
}

func (f *fakeLeases) CheckLeaseContinuous(_ keyspace.Key, n owner.LeaseNum) bool {
	return f.held && f.n == n
}

func (f *fakeLeases) Held() []owner.Lease {
	if !f.held {
		return nil
	}
	return []owner.Lease{{Range: keyspace.Full, Num: f.n, Expiry: time.Now().Add(time.Hour), Migrated: f.migrated || f.promoted, Promoted: f.promoted}}
}

func (f *fakeLeases) grant(lgn keyspace.LGN) {
	f.n, f.held, f.migrated = owner.LeaseNum{Epoch: 1, LGN: lgn}, true, false
}

func newTestStore(f *fakeLeases) *store {
	s := newStore()
	s.setLeases(f)
	return s
}

func mustGet(t *testing.T, s *store, key string) (string, bool) {
	t.Helper()
	v, found, err := s.get(key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return string(v), found
}

// TestStoreFiveSteps walks PRS Figure 4's Put and Get through each step's
// failure.
func TestStoreFiveSteps(t *testing.T) {
	t.Run("step 1: not the owner", func(t *testing.T) {
		s := newTestStore(&fakeLeases{})
		if err := s.put("a", []byte("1")); !errors.Is(err, errNotOwner) {
			t.Errorf("put: %v, want %v", err, errNotOwner)
		}
		if _, _, err := s.get("a"); !errors.Is(err, errNotOwner) {
			t.Errorf("get: %v, want %v", err, errNotOwner)
		}
		if s.len() != 0 {
			t.Errorf("stored %d values without a lease", s.len())
		}
	})
	t.Run("round trip under one lease", func(t *testing.T) {
		f := &fakeLeases{}
		f.grant(1)
		s := newTestStore(f)
		if _, found := mustGet(t, s, "a"); found {
			t.Fatal("found a value never put")
		}
		if err := s.put("a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		if v, found := mustGet(t, s, "a"); !found || v != "1" {
			t.Fatalf("get = %q, %v; want \"1\", true", v, found)
		}
	})
	t.Run("step 2: a value from an earlier lease is stale", func(t *testing.T) {
		f := &fakeLeases{}
		f.grant(1)
		s := newTestStore(f)
		if err := s.put("a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		f.grant(2) // the key was lost and granted anew: another server may have held it
		if v, found := mustGet(t, s, "a"); found {
			t.Fatalf("get exposed %q stored under an earlier lease", v)
		}
		if s.len() != 0 {
			t.Error("the stale value was not dropped")
		}
	})
	t.Run("step 4: lease lost during put", func(t *testing.T) {
		f := &fakeLeases{}
		f.grant(1)
		f.afterNow = func(f *fakeLeases) { f.grant(2) }
		s := newTestStore(f)
		if err := s.put("a", []byte("1")); !errors.Is(err, errLeaseLost) {
			t.Fatalf("put: %v, want %v", err, errLeaseLost)
		}
		// The value is stored under lease 1, so step 2 finds it stale.
		if v, found := mustGet(t, s, "a"); found {
			t.Fatalf("get exposed %q from a put that lost its lease", v)
		}
	})
	t.Run("step 4: lease lost during get", func(t *testing.T) {
		f := &fakeLeases{}
		f.grant(1)
		s := newTestStore(f)
		if err := s.put("a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		f.afterNow = func(f *fakeLeases) { f.held = false }
		if v, _, err := s.get("a"); !errors.Is(err, errLeaseLost) || v != nil {
			t.Fatalf("get = %q, %v; want nothing and %v", v, err, errLeaseLost)
		}
	})
}

// TestStoreSweepDropsOnlyStale checks the OnChange cleanup: a late upcall
// must not drop a value stored under the lease held now.
func TestStoreSweepDropsOnlyStale(t *testing.T) {
	f := &fakeLeases{}
	f.grant(1)
	s := newTestStore(f)
	if err := s.put("old", []byte("1")); err != nil {
		t.Fatal(err)
	}
	f.grant(2)
	if err := s.put("new", []byte("2")); err != nil {
		t.Fatal(err)
	}
	s.sweep()
	if s.len() != 1 {
		t.Fatalf("%d values after the sweep, want 1", s.len())
	}
	if v, found := mustGet(t, s, "new"); !found || v != "2" {
		t.Fatalf("get new = %q, %v; want \"2\", true", v, found)
	}
}

// TestHandlerHTTP checks status codes and bodies of the HTTP API.
func TestHandlerHTTP(t *testing.T) {
	f := &fakeLeases{}
	s := &Server{store: newTestStore(f)}
	h := s.handler()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w.Code, strings.TrimSpace(w.Body.String())
	}
	odd := "a/b c%?"
	path := "/kv/" + url.PathEscape(odd)
	for _, tc := range []struct {
		name         string
		before       func()
		method, path string
		body         string
		code         int
		want         string
	}{
		{"healthz", nil, "GET", "/healthz", "", http.StatusOK, "ok"},
		{"put without the lease", nil, "PUT", path, "v", http.StatusMisdirectedRequest, "not the owner"},
		{"get without the lease", nil, "GET", path, "", http.StatusMisdirectedRequest, "not the owner"},
		{"get missing", func() { f.grant(1) }, "GET", path, "", http.StatusNotFound, "not found"},
		{"put", nil, "PUT", path, "v1", http.StatusNoContent, ""},
		{"get", nil, "GET", path, "", http.StatusOK, "v1"},
		{"put too large", nil, "PUT", path, strings.Repeat("x", MaxValueBytes+1), http.StatusRequestEntityTooLarge, ""},
		{"get after a failed put", nil, "GET", path, "", http.StatusOK, "v1"},
		{"put at the limit", nil, "PUT", path, strings.Repeat("x", MaxValueBytes), http.StatusNoContent, ""},
		{"lease lost", func() { f.afterNow = func(f *fakeLeases) { f.grant(2) } }, "PUT", path, "v2", http.StatusMisdirectedRequest, "lease lost"},
		{"get under the new lease", nil, "GET", path, "", http.StatusNotFound, "not found"},
		{"wrong method", nil, "DELETE", path, "", http.StatusMethodNotAllowed, ""},
	} {
		if tc.before != nil {
			tc.before()
		}
		code, body := do(tc.method, tc.path, tc.body)
		if code != tc.code || (tc.want != "" && body != tc.want) {
			t.Errorf("%s: %s %s = %d %.40q, want %d %q", tc.name, tc.method, tc.path, code, body, tc.code, tc.want)
		}
	}
	if _, found := mustGet(t, s.store, odd); found {
		t.Error("the value stored under the old lease is still exposed")
	}
}

// TestStoreHandoverRefusesWrites checks the holder's side of a planned
// move: the copy holds every value of the range, writes on it are refused
// from then on (they would be lost) while reads are still served, and a
// failed handover, or one past its deadline, lets writes in again.
func TestStoreHandoverRefusesWrites(t *testing.T) {
	f := &fakeLeases{}
	f.grant(1)
	s := newTestStore(f)
	now := time.Now()
	s.now = func() time.Time { return now }
	for _, k := range []string{"a", "b"} {
		if err := s.put(k, []byte("1-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	h := owner.Handover{Range: keyspace.Full, Lease: f.n, To: "kv-b", Addr: "127.0.0.1:1", Deadline: now.Add(time.Minute)}
	entries, held := s.beginHandover(h)
	if !held || len(entries) != 2 {
		t.Fatalf("beginHandover = %v, %v; want both values", entries, held)
	}
	if err := s.put("a", []byte("2")); !errors.Is(err, errMoving) {
		t.Fatalf("put while handing over: %v, want %v", err, errMoving)
	}
	if v, found := mustGet(t, s, "a"); !found || v != "1-a" {
		t.Fatalf("get while handing over = %q, %v; want the value handed over", v, found)
	}
	s.endHandover(h) // the target refused: the range stays until recalled
	if err := s.put("a", []byte("2")); err != nil {
		t.Fatalf("put after a failed handover: %v", err)
	}
	if _, held := s.beginHandover(h); !held {
		t.Fatal("second handover: lease not held")
	}
	now = now.Add(2 * time.Minute) // past the deadline: the Manager recalls, or changed its mind
	if err := s.put("a", []byte("3")); err != nil {
		t.Fatalf("put past the handover's deadline: %v", err)
	}
	// A handover under another lease does not stop writes under this one.
	f.grant(2)
	if _, held := s.beginHandover(h); !held {
		t.Fatal("beginHandover refused")
	}
	now = time.Now()
	if err := s.put("a", []byte("4")); err != nil {
		t.Fatalf("put under a lease not handed over: %v", err)
	}
}

// TestStorePendingSettledByGrant checks the receiver's side: values handed
// over wait for the grant of their range, are taken up with a grant marked
// migrated, and are thrown away with a grant without the mark.
func TestStorePendingSettledByGrant(t *testing.T) {
	from := owner.LeaseNum{Epoch: 1, LGN: 7}
	handed := []entry{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}
	expires := time.Now().Add(time.Minute)
	grant := func(f *fakeLeases, lgn keyspace.LGN, migrated bool) owner.OwnershipChange {
		f.grant(lgn)
		f.migrated = migrated
		return owner.OwnershipChange{Granted: []owner.Lease{{Range: keyspace.Full, Num: f.n, Migrated: migrated}}}
	}
	t.Run("grant without migrated discards", func(t *testing.T) {
		f := &fakeLeases{}
		s := newTestStore(f)
		s.receive(keyspace.Full, from, handed, expires)
		if _, _, err := s.get("a"); !errors.Is(err, errNotOwner) {
			t.Fatalf("get before the grant: %v, want %v", err, errNotOwner)
		}
		s.changed(grant(f, 8, false))
		if v, found := mustGet(t, s, "a"); found {
			t.Fatalf("get = %q after a grant without migration, want not found", v)
		}
		if p, up, gone := s.handedIn(); p != 0 || up != 0 || gone != 2 {
			t.Fatalf("pending %d, taken up %d, discarded %d; want 0, 0, 2", p, up, gone)
		}
		// Values arriving after the grant was reported are stale.
		s.receive(keyspace.Full, owner.LeaseNum{Epoch: 1, LGN: 9}, handed, expires)
		if v, found := mustGet(t, s, "b"); found {
			t.Fatalf("get = %q from a handover that arrived after the grant", v)
		}
	})
	t.Run("migrated grant takes up", func(t *testing.T) {
		f := &fakeLeases{}
		s := newTestStore(f)
		s.receive(keyspace.Full, from, handed, expires)
		ch := grant(f, 8, true)
		// A request before the upcall: Held shows the grant migrated.
		if v, found := mustGet(t, s, "a"); !found || v != "1" {
			t.Fatalf("get before the upcall = %q, %v; want the value handed over", v, found)
		}
		s.changed(ch)
		if v, found := mustGet(t, s, "b"); !found || v != "2" {
			t.Fatalf("get after the upcall = %q, %v; want the value handed over", v, found)
		}
		if p, up, gone := s.handedIn(); p != 0 || up != 2 || gone != 0 {
			t.Fatalf("pending %d, taken up %d, discarded %d; want 0, 2, 0", p, up, gone)
		}
	})
	t.Run("unknown until the upcall", func(t *testing.T) {
		f := &fakeLeases{}
		s := newTestStore(f)
		s.receive(keyspace.Full, from, handed, expires)
		ch := grant(f, 8, true)
		f.migrated = false // renewed before the upcall: Held no longer shows the mark
		if err := s.put("a", []byte("new")); !errors.Is(err, errArriving) {
			t.Fatalf("put before the upcall: %v, want %v", err, errArriving)
		}
		s.changed(ch)
		if err := s.put("a", []byte("new")); err != nil {
			t.Fatal(err)
		}
		if v, found := mustGet(t, s, "a"); !found || v != "new" {
			t.Fatalf("get = %q, %v; want the value written after the take-up", v, found)
		}
		if v, found := mustGet(t, s, "b"); !found || v != "2" {
			t.Fatalf("get b = %q, %v; want the value handed over", v, found)
		}
	})
	t.Run("upcall before the grant shows", func(t *testing.T) {
		// The Owner may run OnChange a moment before CheckLeaseNow shows
		// the change it reports.
		f := &fakeLeases{}
		s := newTestStore(f)
		s.receive(keyspace.Full, from, handed, expires)
		n := owner.LeaseNum{Epoch: 1, LGN: 8}
		s.changed(owner.OwnershipChange{Granted: []owner.Lease{{Range: keyspace.Full, Num: n, Migrated: true}}})
		s.changed(owner.OwnershipChange{}) // another upcall sweeps
		f.n, f.held = n, true
		if v, found := mustGet(t, s, "a"); !found || v != "1" {
			t.Fatalf("get = %q, %v; want the value handed over", v, found)
		}
	})
	t.Run("expired", func(t *testing.T) {
		f := &fakeLeases{}
		s := newTestStore(f)
		s.receive(keyspace.Full, from, handed, time.Now().Add(-time.Second))
		grant(f, 8, true)
		if v, found := mustGet(t, s, "a"); found {
			t.Fatalf("get = %q from a handover past its deadline", v)
		}
	})
}
