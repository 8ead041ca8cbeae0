package kv

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
)

// endless yields c forever: a body that never ends.
type endless byte

func (c endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

func migrateBody(t *testing.T, m migrateRequest) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMigrateRefusesBadBodies checks POST /internal/migrate refuses what is
// not a handover for this server, with a status and a message that say why,
// and keeps nothing of it.
func TestMigrateRefusesBadBodies(t *testing.T) {
	t.Parallel()
	f := &fakeLeases{}
	s := &Server{cfg: ServerConfig{ID: "kv-b", Logger: slog.New(slog.DiscardHandler)}, store: newTestStore(f)}
	h := s.handler()
	inA := keyspace.Range{Start: 0, End: keyspace.KeyOf("a") + 1}
	good := migrateRequest{From: "kv-a", To: "kv-b", WithinMS: 2000, Ranges: []migrateRange{
		{Start: uint64(inA.Start), End: uint64(inA.End), Epoch: 1, LGN: 5, Entries: []entry{{Key: "a", Value: []byte("1")}}},
	}}
	with := func(change func(*migrateRequest)) string {
		m := good
		m.Ranges = []migrateRange{good.Ranges[0]}
		m.Ranges[0].Entries = slices.Clone(good.Ranges[0].Entries)
		change(&m)
		return migrateBody(t, m)
	}
	huge := io.MultiReader(strings.NewReader(`{"to":"kv-b","ranges":[{"start":0,"end":0,"lgn":1,"entries":[{"key":"k","value":"`), endless('A'))
	for _, tc := range []struct {
		name   string
		method string
		body   io.Reader
		code   int
		want   string
	}{
		{"garbage", "POST", strings.NewReader("not json"), http.StatusBadRequest, "migrate: malformed body: invalid character"},
		{"truncated", "POST", strings.NewReader(`{"to":"kv-b","ranges":[`), http.StatusBadRequest, "migrate: malformed body: unexpected EOF"},
		{"unknown field", "POST", strings.NewReader(`{"to":"kv-b","rangez":[]}`), http.StatusBadRequest, `unknown field "rangez"`},
		{"trailing data", "POST", strings.NewReader(migrateBody(t, good) + `{}`), http.StatusBadRequest, "data after the JSON object"},
		{"value not base64", "POST", strings.NewReader(`{"to":"kv-b","ranges":[{"lgn":1,"entries":[{"key":"a","value":"!!"}]}]}`), http.StatusBadRequest, "migrate: malformed body: illegal base64"},
		{"too large", "POST", huge, http.StatusRequestEntityTooLarge, fmt.Sprintf("migrate: body larger than %d bytes", MaxMigrateBytes)},
		{"no target", "POST", strings.NewReader(with(func(m *migrateRequest) { m.To = "" })), http.StatusBadRequest, `no "to"`},
		{"deadline too far", "POST", strings.NewReader(with(func(m *migrateRequest) { m.WithinMS = MaxMigrateWithin.Milliseconds() + 1 })), http.StatusBadRequest, "within_ms"},
		{"no ranges", "POST", strings.NewReader(with(func(m *migrateRequest) { m.Ranges = nil })), http.StatusBadRequest, "migrate: no ranges"},
		{"empty range", "POST", strings.NewReader(with(func(m *migrateRequest) { m.Ranges[0].Start, m.Ranges[0].End = 5, 5 })), http.StatusBadRequest, "is empty or reversed"},
		{"no lease", "POST", strings.NewReader(with(func(m *migrateRequest) { m.Ranges[0].LGN = 0 })), http.StatusBadRequest, "no lease (lgn 0)"},
		{"key outside the range", "POST", strings.NewReader(with(func(m *migrateRequest) { m.Ranges[0].End = uint64(keyspace.KeyOf("a")) })), http.StatusBadRequest, `key "a" is not in range`},
		{"empty key", "POST", strings.NewReader(with(func(m *migrateRequest) { m.Ranges[0].Entries = []entry{{Key: ""}} })), http.StatusBadRequest, "an empty key"},
		{"value too large", "POST", strings.NewReader(with(func(m *migrateRequest) { m.Ranges[0].Entries[0].Value = make([]byte, MaxValueBytes+1) })), http.StatusBadRequest, "is larger than"},
		{"another server", "POST", strings.NewReader(with(func(m *migrateRequest) { m.To = "kv-c" })), http.StatusConflict, `migrate: this server is "kv-b", not "kv-c"`},
		{"wrong method", "PUT", strings.NewReader(migrateBody(t, good)), http.StatusMethodNotAllowed, ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, migratePath, tc.body))
		body := strings.TrimSpace(w.Body.String())
		if w.Code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: POST %s = %d %.120q, want %d and %q", tc.name, migratePath, w.Code, body, tc.code, tc.want)
		}
	}
	if p, _, _ := s.store.handedIn(); p != 0 {
		t.Fatalf("%d values kept from refused handovers", p)
	}

	// The good one is kept, and taken up with a migrated grant.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", migratePath, strings.NewReader(migrateBody(t, good))))
	if w.Code != http.StatusNoContent {
		t.Fatalf("a good handover: %d %q, want 204", w.Code, w.Body.String())
	}
	f.grant(6)
	f.migrated = true
	s.store.changed(owner.OwnershipChange{Granted: []owner.Lease{{Range: keyspace.Full, Num: f.n, Migrated: true}}})
	if v, found := mustGet(t, s.store, "a"); !found || v != "1" {
		t.Fatalf("get after a migrated grant = %q, %v; want the value handed over", v, found)
	}
}

// TestMigrateThenGrantWithoutMigrated hands values over through HTTP, then
// grants the range without the migrated mark: the handover did not
// complete, so the values are thrown away and the key reads 404.
func TestMigrateThenGrantWithoutMigrated(t *testing.T) {
	t.Parallel()
	f := &fakeLeases{}
	s := &Server{cfg: ServerConfig{ID: "kv-b", Logger: slog.New(slog.DiscardHandler)}, store: newTestStore(f)}
	h := s.handler()
	body := migrateBody(t, migrateRequest{From: "kv-a", To: "kv-b", WithinMS: 2000, Ranges: []migrateRange{
		{Start: 0, End: 0, Epoch: 1, LGN: 5, Entries: []entry{{Key: "a", Value: []byte("1")}}},
	}})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", migratePath, strings.NewReader(body)))
	if w.Code != http.StatusNoContent {
		t.Fatalf("handover: %d %q, want 204", w.Code, w.Body.String())
	}
	// Granted, but the upcall has not run and the grant shows no mark: the
	// server cannot tell yet, so the client is told to retry.
	f.grant(6)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/kv/a", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "arriving") {
		t.Fatalf("GET before the upcall = %d %q (Retry-After %q), want 503 arriving with Retry-After", w.Code, w.Body.String(), w.Header().Get("Retry-After"))
	}
	s.store.changed(owner.OwnershipChange{Granted: []owner.Lease{{Range: keyspace.Full, Num: f.n}}})
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/kv/a", nil))
	if w.Code != http.StatusNotFound {
		t.Fatalf("GET after a grant without migration = %d %q, want 404", w.Code, w.Body.String())
	}
	if p, up, gone := s.store.handedIn(); p != 0 || up != 0 || gone != 1 {
		t.Fatalf("pending %d, taken up %d, discarded %d; want 0, 0, 1", p, up, gone)
	}
}
