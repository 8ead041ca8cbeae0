package kv

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// fakeLeases holds one lease over the whole key space, or none. afterNow,
// if set, runs once after the next CheckLeaseNow: it stands for a lease
// change in the middle of an operation.
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
	if !ok {
		return owner.LeaseNum{}, false
	}
	return n, true
}

func (f *fakeLeases) CheckLeaseContinuous(_ keyspace.Key, n owner.LeaseNum) bool {
	return f.held && f.n == n
}

func (f *fakeLeases) grant(lgn keyspace.LGN) { f.n, f.held = owner.LeaseNum{Epoch: 1, LGN: lgn}, true }

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
