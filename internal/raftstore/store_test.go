package raftstore

import (
	"bytes"
	"errors"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

func ent(index, term uint64, data string) raftpb.Entry {
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal, Data: []byte(data)}
}

// ents returns entries lo..hi (inclusive) of the given term.
func ents(lo, hi, term uint64) []raftpb.Entry {
	var es []raftpb.Entry
	for i := lo; i <= hi; i++ {
		es = append(es, ent(i, term, "e"+string(rune('a'+i%26))))
	}
	return es
}

func hardState(term, vote, commit uint64) raftpb.HardState {
	return raftpb.HardState{Term: term, Vote: vote, Commit: commit}
}

func snapshot(index, term uint64, data string, voters ...uint64) raftpb.Snapshot {
	return raftpb.Snapshot{
		Data: []byte(data),
		Metadata: raftpb.SnapshotMetadata{
			Index:     index,
			Term:      term,
			ConfState: raftpb.ConfState{Voters: voters},
		},
	}
}

// encoded is the stored form of a raftpb value, for comparisons.
func encoded(t *testing.T, m marshaler) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustSave(t *testing.T, s *Store, hs raftpb.HardState, es []raftpb.Entry, snap raftpb.Snapshot) {
	t.Helper()
	if err := s.Save(hs, es, snap); err != nil {
		t.Fatalf("Save: %v", err)
	}
}

func mustLoad(t *testing.T, s *Store) (*raft.MemoryStorage, bool) {
	t.Helper()
	ms, fresh, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return ms, fresh
}

// reopen closes s and opens its directory again.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return mustOpen(t, filepath.Dir(s.Path()))
}

// sameStorage checks that got holds what want holds, through the
// raft.Storage interface raft itself uses.
func sameStorage(t *testing.T, got, want *raft.MemoryStorage) {
	t.Helper()
	gf, _ := got.FirstIndex()
	wf, _ := want.FirstIndex()
	gl, _ := got.LastIndex()
	wl, _ := want.LastIndex()
	if gf != wf || gl != wl {
		t.Fatalf("log bounds: got [%d, %d], want [%d, %d]", gf, gl, wf, wl)
	}
	for i := wf - 1; i <= wl; i++ {
		gt, gerr := got.Term(i)
		wt, werr := want.Term(i)
		if gt != wt || gerr != werr {
			t.Fatalf("Term(%d): got %d, %v; want %d, %v", i, gt, gerr, wt, werr)
		}
	}
	if wl >= wf {
		ge, err := got.Entries(wf, wl+1, math.MaxUint64)
		if err != nil {
			t.Fatalf("Entries: %v", err)
		}
		we, _ := want.Entries(wf, wl+1, math.MaxUint64)
		if len(ge) != len(we) {
			t.Fatalf("got %d entries, want %d", len(ge), len(we))
		}
		for i := range we {
			if !bytes.Equal(encoded(t, &ge[i]), encoded(t, &we[i])) {
				t.Fatalf("entry %d: got %v, want %v", wf+uint64(i), ge[i], we[i])
			}
		}
	}
	gs, _ := got.Snapshot()
	ws, _ := want.Snapshot()
	if !bytes.Equal(encoded(t, &gs), encoded(t, &ws)) {
		t.Fatalf("snapshot: got %v, want %v", gs, ws)
	}
	ghs, gcs, _ := got.InitialState()
	whs, wcs, _ := want.InitialState()
	if ghs != whs {
		t.Fatalf("hard state: got %v, want %v", ghs, whs)
	}
	if !bytes.Equal(encoded(t, &gcs), encoded(t, &wcs)) {
		t.Fatalf("conf state: got %v, want %v", gcs, wcs)
	}
}

// storedIndexes lists the keys of the entries bucket.
func storedIndexes(t *testing.T, s *Store) []uint64 {
	t.Helper()
	var idx []uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEntries).ForEach(func(k, _ []byte) error {
			idx = append(idx, bigEndian(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func bigEndian(k []byte) uint64 {
	var v uint64
	for _, b := range k {
		v = v<<8 | uint64(b)
	}
	return v
}

func seq(lo, hi uint64) []uint64 {
	var s []uint64
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	want := raft.NewMemoryStorage()

	hs1, es1 := hardState(2, 1, 3), ents(1, 3, 2)
	mustSave(t, s, hs1, es1, raftpb.Snapshot{})
	want.SetHardState(hs1)
	want.Append(es1)

	hs2, es2 := hardState(2, 1, 5), ents(4, 5, 2)
	mustSave(t, s, hs2, es2, raftpb.Snapshot{})
	want.SetHardState(hs2)
	want.Append(es2)

	// A Ready with only a hard state change keeps the entries.
	hs3 := hardState(3, 0, 5)
	mustSave(t, s, hs3, nil, raftpb.Snapshot{})
	want.SetHardState(hs3)

	s = reopen(t, s)
	got, fresh := mustLoad(t, s)
	if fresh {
		t.Fatal("fresh = true after saving")
	}
	sameStorage(t, got, want)
}

func TestFresh(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ms, fresh := mustLoad(t, s)
	if !fresh {
		t.Fatal("new data dir: fresh = false")
	}
	sameStorage(t, ms, raft.NewMemoryStorage())

	// Opening alone saves nothing.
	s = reopen(t, s)
	if _, fresh := mustLoad(t, s); !fresh {
		t.Fatal("reopened empty data dir: fresh = false")
	}
	// Nothing to save is not a save either.
	mustSave(t, s, raftpb.HardState{}, nil, raftpb.Snapshot{})
	if _, fresh := mustLoad(t, s); !fresh {
		t.Fatal("after empty Saves: fresh = false")
	}

	mustSave(t, s, hardState(1, 0, 0), nil, raftpb.Snapshot{})
	s = reopen(t, s)
	if _, fresh := mustLoad(t, s); fresh {
		t.Fatal("existing data dir: fresh = true")
	}
}

func TestOpenCreatesPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	mustOpen(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("data dir mode %o, want 700", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
}

func TestConflictingSuffix(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	want := raft.NewMemoryStorage()

	mustSave(t, s, hardState(1, 1, 2), ents(1, 5, 1), raftpb.Snapshot{})
	want.SetHardState(hardState(1, 1, 2))
	want.Append(ents(1, 5, 1))

	// A new leader of term 2 overwrites 3..5 with a shorter log.
	mustSave(t, s, hardState(2, 2, 2), ents(3, 4, 2), raftpb.Snapshot{})
	want.SetHardState(hardState(2, 2, 2))
	want.Append(ents(3, 4, 2))

	if got := storedIndexes(t, s); !slices.Equal(got, seq(1, 4)) {
		t.Fatalf("stored indexes %v, want 1..4", got)
	}
	s = reopen(t, s)
	got, _ := mustLoad(t, s)
	sameStorage(t, got, want)
	if term, _ := got.Term(3); term != 2 {
		t.Fatalf("Term(3) = %d, want 2", term)
	}
	if last, _ := got.LastIndex(); last != 4 {
		t.Fatalf("LastIndex = %d, want 4", last)
	}
}

func TestSaveRejectsGapAndNonContiguous(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	mustSave(t, s, hardState(1, 1, 3), ents(1, 3, 1), raftpb.Snapshot{})

	err := s.Save(hardState(1, 1, 6), ents(5, 6, 1), raftpb.Snapshot{})
	if err == nil || !strings.Contains(err.Error(), "gap") || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("Save with a gap: %v", err)
	}
	err = s.Save(raftpb.HardState{}, []raftpb.Entry{ent(4, 1, "x"), ent(6, 1, "y")}, raftpb.Snapshot{})
	if err == nil || !strings.Contains(err.Error(), "not contiguous") {
		t.Fatalf("Save of non-contiguous entries: %v", err)
	}
	// Nothing of the failed Saves was stored.
	ms, _ := mustLoad(t, s)
	if last, _ := ms.LastIndex(); last != 3 {
		t.Fatalf("LastIndex = %d, want 3", last)
	}
	if hs, _, _ := ms.InitialState(); hs.Commit != 3 {
		t.Fatalf("commit = %d, want 3", hs.Commit)
	}
}

func TestSnapshotViaSave(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	want := raft.NewMemoryStorage()

	mustSave(t, s, hardState(1, 1, 4), ents(1, 8, 1), raftpb.Snapshot{})
	want.SetHardState(hardState(1, 1, 4))
	want.Append(ents(1, 8, 1))

	// A leader of term 2 sends a snapshot at 5; the Ready carries it with
	// the entries that follow it.
	snap := snapshot(5, 2, "state@5", 1, 2, 3)
	hs := hardState(2, 0, 6)
	mustSave(t, s, hs, ents(6, 7, 2), snap)
	want.ApplySnapshot(snap)
	want.SetHardState(hs)
	want.Append(ents(6, 7, 2))

	if got := storedIndexes(t, s); !slices.Equal(got, seq(6, 7)) {
		t.Fatalf("stored indexes %v, want 6..7", got)
	}
	s = reopen(t, s)
	got, fresh := mustLoad(t, s)
	if fresh {
		t.Fatal("fresh = true")
	}
	sameStorage(t, got, want)
	if fi, _ := got.FirstIndex(); fi != 6 {
		t.Fatalf("FirstIndex = %d, want 6", fi)
	}
	if term, _ := got.Term(5); term != 2 {
		t.Fatalf("Term(5) = %d, want 2", term)
	}
	if _, err := got.Term(4); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Term(4): %v, want ErrCompacted", err)
	}

	// An older snapshot is refused and changes nothing.
	err := s.Save(hardState(2, 0, 7), nil, snapshot(4, 1, "old", 1))
	if !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("Save of an older snapshot: %v", err)
	}
	got, _ = mustLoad(t, s)
	sameStorage(t, got, want)
}

func TestSnapshotViaCompact(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	want := raft.NewMemoryStorage()
	mustSave(t, s, hardState(1, 1, 10), ents(1, 10, 1), raftpb.Snapshot{})
	want.SetHardState(hardState(1, 1, 10))
	want.Append(ents(1, 10, 1))

	snap, err := want.CreateSnapshot(6, &raftpb.ConfState{Voters: []uint64{1}}, []byte("state@6"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(snap); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if err := want.Compact(6); err != nil {
		t.Fatal(err)
	}
	if got := storedIndexes(t, s); !slices.Equal(got, seq(7, 10)) {
		t.Fatalf("stored indexes %v, want 7..10", got)
	}

	s = reopen(t, s)
	got, _ := mustLoad(t, s)
	sameStorage(t, got, want)
	if fi, li := first(got), last(got); fi != 7 || li != 10 {
		t.Fatalf("log [%d, %d], want [7, 10]", fi, li)
	}
	if term, _ := got.Term(6); term != 1 {
		t.Fatalf("Term(6) = %d, want 1", term)
	}
	gs, _ := got.Snapshot()
	if string(gs.Data) != "state@6" || gs.Metadata.Index != 6 {
		t.Fatalf("snapshot %v", gs)
	}

	// New entries after a compaction append as usual.
	mustSave(t, s, hardState(1, 1, 11), ents(11, 11, 1), raftpb.Snapshot{})
	want.Append(ents(11, 11, 1))
	want.SetHardState(hardState(1, 1, 11))
	got, _ = mustLoad(t, s)
	sameStorage(t, got, want)

	if err := s.Compact(snap); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("Compact with the same snapshot again: %v", err)
	}
	if err := s.Compact(snapshot(20, 1, "x", 1)); err == nil || !strings.Contains(err.Error(), "entry 20 is not in the stored log") {
		t.Fatalf("Compact past the log: %v", err)
	}
	if err := s.Compact(snapshot(8, 7, "x", 1)); err == nil || !strings.Contains(err.Error(), "term") {
		t.Fatalf("Compact with the wrong term: %v", err)
	}
	if err := s.Compact(raftpb.Snapshot{}); err == nil {
		t.Fatal("Compact of an empty snapshot succeeded")
	}
	got, _ = mustLoad(t, s)
	sameStorage(t, got, want)
}

func first(ms *raft.MemoryStorage) uint64 { i, _ := ms.FirstIndex(); return i }
func last(ms *raft.MemoryStorage) uint64  { i, _ := ms.LastIndex(); return i }

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	s2, err := Open(dir)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of the same dir succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "another manager") || !strings.Contains(msg, dir) {
		t.Fatalf("second Open: unclear error %q", msg)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, dir)
}

func TestBackupRestore(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	want := raft.NewMemoryStorage()
	mustSave(t, s, hardState(3, 1, 9), ents(1, 9, 3), raftpb.Snapshot{})
	want.SetHardState(hardState(3, 1, 9))
	want.Append(ents(1, 9, 3))
	snap, _ := want.CreateSnapshot(4, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("state@4"))
	if err := s.Compact(snap); err != nil {
		t.Fatal(err)
	}
	want.Compact(4)

	var backup bytes.Buffer
	if err := s.Backup(&backup); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	// The running store keeps going; the backup is of the moment it was taken.
	mustSave(t, s, hardState(3, 1, 10), ents(10, 10, 3), raftpb.Snapshot{})

	dir2 := filepath.Join(t.TempDir(), "restored")
	if err := Restore(dir2, bytes.NewReader(backup.Bytes())); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	s2 := mustOpen(t, dir2)
	got, fresh := mustLoad(t, s2)
	if fresh {
		t.Fatal("restored store is fresh")
	}
	sameStorage(t, got, want)
	assertOnlyDB(t, dir2)

	// Restore refuses a directory with a raft.db, restored or in use.
	for _, dir := range []string{dir2, filepath.Dir(s.Path())} {
		err := Restore(dir, bytes.NewReader(backup.Bytes()))
		if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Restore into %s: %v, want ErrExists", dir, err)
		}
	}
	assertOnlyDB(t, dir2)
	got, _ = mustLoad(t, s2)
	sameStorage(t, got, want)
}

func TestRestoreRejectsBadStreams(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	mustSave(t, s, hardState(1, 1, 200), ents(1, 200, 1), raftpb.Snapshot{})
	var backup bytes.Buffer
	if err := s.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	b := backup.Bytes()
	for name, stream := range map[string][]byte{
		"truncated": b[:len(b)-4096],
		"garbage":   bytes.Repeat([]byte("not a database "), 2000),
		"empty":     nil,
	} {
		dir := t.TempDir()
		err := Restore(dir, bytes.NewReader(stream))
		if err == nil {
			t.Fatalf("%s: Restore succeeded", name)
		}
		if !strings.Contains(err.Error(), filepath.Join(dir, FileName)) || !strings.Contains(err.Error(), "backup rejected") {
			t.Fatalf("%s: error does not name the path: %v", name, err)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Fatalf("%s: Restore left %v behind", name, names)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func assertOnlyDB(t *testing.T, dir string) {
	t.Helper()
	if names := dirNames(t, dir); !slices.Equal(names, []string{FileName}) {
		t.Fatalf("%s holds %v, want only %s", dir, names, FileName)
	}
}

// poke changes the raw database under a store.
func poke(t *testing.T, s *Store, f func(meta, entries *bolt.Bucket) error) {
	t.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		return f(tx.Bucket(bucketMeta), tx.Bucket(bucketEntries))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCorruptEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(meta, entries *bolt.Bucket) error
		want string
	}{
		// Damage that keeps the checksum right (the value stored again
		// with its sum, as a writer's bug would), found by decoding.
		{"undecodable", func(_, e *bolt.Bucket) error { return e.Put(u64key(3), seal(u64key(3), []byte{0xff, 0xff, 0xff})) },
			"corrupt entry at index 3"},
		{"wrong index", func(_, e *bolt.Bucket) error {
			wrong := ent(7, 1, "x")
			data, _ := wrong.Marshal()
			return e.Put(u64key(3), seal(u64key(3), data))
		}, "corrupt entry at index 3: it says it is entry 7"},
		{"missing", func(_, e *bolt.Bucket) error { return e.Delete(u64key(3)) },
			"entry 3 missing"},
		{"hard state", func(m, _ *bolt.Bucket) error { return m.Put(keyHardState, seal(keyHardState, []byte{0x08})) },
			"corrupt hard state"},
		{"commit past the log", func(m, _ *bolt.Bucket) error {
			hs := hardState(1, 1, 9)
			data, _ := hs.Marshal()
			return m.Put(keyHardState, seal(keyHardState, data))
		}, "commit index 9 is outside the stored log [0, 5]"},
		{"snapshot", func(m, _ *bolt.Bucket) error { return m.Put(keySnapshot, seal(keySnapshot, []byte{0x12, 0x05})) },
			"corrupt snapshot"},
		// Damage that still decodes, found by the checksum.
		{"entry edited", func(_, e *bolt.Bucket) error {
			v := append([]byte(nil), e.Get(u64key(3))...)
			v[len(v)-1] = 'x' // its data, "ed", becomes "ex"
			return e.Put(u64key(3), v)
		}, "entry 3 (term 1, as its damaged bytes say) fails its checksum"},
		{"entry under another key", func(_, e *bolt.Bucket) error {
			return e.Put(u64key(3), append([]byte(nil), e.Get(u64key(4))...))
		}, "entry 3 (its term unreadable) fails its checksum"},
		{"unsealed", func(_, e *bolt.Bucket) error { return e.Put(u64key(3), []byte{0xff}) },
			"entry 3 (its term unreadable) too short to hold its checksum"},
		{"hard state edited", func(m, _ *bolt.Bucket) error {
			v := append([]byte(nil), m.Get(keyHardState)...)
			v[len(v)-1]++ // the commit index, 5 → 6
			return m.Put(keyHardState, v)
		}, "hard state fails its checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustOpen(t, t.TempDir())
			mustSave(t, s, hardState(1, 1, 5), ents(1, 5, 1), raftpb.Snapshot{})
			poke(t, s, tc.f)
			_, _, err := s.Load()
			if err == nil {
				t.Fatal("Load of a corrupt store succeeded")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, s.Path()) {
				t.Fatalf("Load: %q, want it to name %q and the path", msg, tc.want)
			}
			// Backup copies it as is, and Restore refuses the copy.
			var b bytes.Buffer
			if err := s.Backup(&b); err != nil {
				t.Fatal(err)
			}
			if err := Restore(t.TempDir(), &b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore of a corrupt backup: %v", err)
			}
		})
	}
}

func TestFormatVersion(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	poke(t, s, func(m, _ *bolt.Bucket) error { return m.Put(keyVersion, u64key(99)) })
	s.Close()
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "unsupported format version 99") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open of a version 99 store: %v", err)
	}

	// A bbolt file that is not a raft log is refused too.
	dir2 := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir2, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	db.Close()
	if _, err := Open(dir2); err == nil || !strings.Contains(err.Error(), "not a leasehold raft log") {
		t.Fatalf("Open of a foreign bbolt file: %v", err)
	}

	// And a file that is not bbolt at all.
	dir3 := t.TempDir()
	os.WriteFile(filepath.Join(dir3, FileName), bytes.Repeat([]byte("x"), 1<<14), 0o600)
	if _, err := Open(dir3); err == nil || !strings.Contains(err.Error(), dir3) {
		t.Fatalf("Open of a non-bbolt file: %v", err)
	}
}

// TestWriteFailure stands in for a full disk: bbolt's size limit makes the
// file's growth fail inside the commit.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	s, err := open(dir, options{lockTimeout: defaultOptions.lockTimeout, maxSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	payload := strings.Repeat("x", 64<<10)
	var saved uint64
	for i := uint64(1); i <= 64; i++ {
		e := ent(i, 1, payload)
		if err = s.Save(hardState(1, 1, i), []raftpb.Entry{e}, raftpb.Snapshot{}); err != nil {
			break
		}
		saved = i
	}
	if err == nil {
		t.Fatal("64 MiB fit in a 1 MiB store")
	}
	if !errors.Is(err, berrors.ErrMaxSizeReached) || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("Save: %v", err)
	}
	// The failed Save stored nothing; everything before it is intact.
	ms, _ := mustLoad(t, s)
	if li := last(ms); li != saved {
		t.Fatalf("LastIndex = %d, want %d", li, saved)
	}
	if hs, _, _ := ms.InitialState(); hs.Commit != saved {
		t.Fatalf("commit = %d, want %d", hs.Commit, saved)
	}
	// A small write still fits.
	if err := s.Save(hardState(2, 1, saved), nil, raftpb.Snapshot{}); err != nil {
		t.Fatalf("Save after a failure: %v", err)
	}
}

// node is a single-member Raft group driven the way a Manager drives it.
type node struct {
	t       *testing.T
	st      *Store
	ms      *raft.MemoryStorage
	rn      *raft.RawNode
	cs      *raftpb.ConfState
	applied uint64   // index of the last applied entry
	data    []string // the applied normal entries' data: the state machine
}

var quiet = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

// startNode opens dir and starts a RawNode on it. A node restarting from a
// snapshot restores its state machine from the snapshot data.
func startNode(t *testing.T, dir string) *node {
	t.Helper()
	n := &node{t: t, st: mustOpen(t, dir)}
	var fresh bool
	n.ms, fresh = mustLoad(t, n.st)
	snap, _ := n.ms.Snapshot()
	if !raft.IsEmptySnap(snap) {
		n.applied = snap.Metadata.Index
		n.cs = &snap.Metadata.ConfState
		n.data = strings.Split(string(snap.Data), ",")
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              1,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         n.ms,
		Applied:         n.applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		CheckQuorum:     true,
		PreVote:         true,
		Logger:          quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.rn = rn
	if fresh {
		if err := rn.Bootstrap([]raft.Peer{{ID: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	n.drain()
	return n
}

// drain handles Readies until there are none: persist, then send, apply and
// Advance.
func (n *node) drain() {
	t := n.t
	t.Helper()
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if err := n.st.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
			t.Fatalf("Save: %v", err)
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			t.Fatalf("single node received a snapshot")
		}
		if err := n.ms.Append(rd.Entries); err != nil {
			t.Fatal(err)
		}
		for _, m := range rd.Messages {
			if m.To != 1 {
				t.Fatalf("single node sends %v", m)
			}
		}
		for _, e := range rd.CommittedEntries {
			switch e.Type {
			case raftpb.EntryConfChange:
				var cc raftpb.ConfChange
				if err := cc.Unmarshal(e.Data); err != nil {
					t.Fatal(err)
				}
				n.cs = n.rn.ApplyConfChange(cc)
			case raftpb.EntryNormal:
				if len(e.Data) > 0 {
					n.data = append(n.data, string(e.Data))
				}
			}
			n.applied = e.Index
		}
		n.rn.Advance(rd)
	}
}

func (n *node) campaign() {
	n.t.Helper()
	if err := n.rn.Campaign(); err != nil {
		n.t.Fatal(err)
	}
	n.drain()
	if st := n.rn.Status(); st.RaftState != raft.StateLeader {
		n.t.Fatalf("state %v after campaigning alone, want leader", st.RaftState)
	}
}

func (n *node) propose(data ...string) {
	n.t.Helper()
	for _, d := range data {
		if err := n.rn.Propose([]byte(d)); err != nil {
			n.t.Fatal(err)
		}
		n.drain()
	}
}

func (n *node) close() {
	n.t.Helper()
	if err := n.st.Close(); err != nil {
		n.t.Fatal(err)
	}
}

func TestRawNodeRestart(t *testing.T) {
	dir := t.TempDir()

	// First life: bootstrap, elect, commit a, b, c.
	n := startNode(t, dir)
	n.campaign()
	n.propose("a", "b", "c")
	if !slices.Equal(n.data, []string{"a", "b", "c"}) {
		t.Fatalf("applied %v", n.data)
	}
	hs1 := n.rn.Status().HardState
	if hs1.Commit != n.applied {
		t.Fatalf("commit %d, applied %d", hs1.Commit, n.applied)
	}
	n.close()

	// Second life: the committed entries come back, the term and vote too.
	n = startNode(t, dir)
	if !slices.Equal(n.data, []string{"a", "b", "c"}) {
		t.Fatalf("after restart, re-applied %v, want [a b c]", n.data)
	}
	hs2 := n.rn.Status().HardState
	if hs2 != hs1 {
		t.Fatalf("after restart hard state %v, want %v", hs2, hs1)
	}
	if !slices.Equal(n.cs.Voters, []uint64{1}) {
		t.Fatalf("voters %v", n.cs.Voters)
	}
	n.campaign()
	if term := n.rn.Status().Term; term <= hs1.Term {
		t.Fatalf("term %d after re-election, want > %d", term, hs1.Term)
	}
	n.propose("d")

	// Compact the log at what is applied, then commit one more.
	snap, err := n.ms.CreateSnapshot(n.applied, n.cs, []byte(strings.Join(n.data, ",")))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.st.Compact(snap); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if err := n.ms.Compact(n.applied); err != nil {
		t.Fatal(err)
	}
	snapIndex := n.applied
	n.propose("e")
	n.close()

	// Third life: state from the snapshot, "e" from the log.
	n = startNode(t, dir)
	if fi := first(n.ms); fi != snapIndex+1 {
		t.Fatalf("FirstIndex %d, want %d", fi, snapIndex+1)
	}
	if !slices.Equal(n.data, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("after restart from snapshot, state %v", n.data)
	}
	n.campaign()
	n.propose("f")
	if !slices.Equal(n.data, []string{"a", "b", "c", "d", "e", "f"}) {
		t.Fatalf("state %v", n.data)
	}
	if got := storedIndexes(t, n.st); got[0] != snapIndex+1 || got[len(got)-1] != n.applied {
		t.Fatalf("stored indexes %v, want %d..%d", got, snapIndex+1, n.applied)
	}
	n.close()
}
