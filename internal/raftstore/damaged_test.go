package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
)

// writeLog creates a raft.db in a new directory holding a few thousand
// entries (many pages), and returns the directory.
func writeLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	for lo := uint64(1); lo <= 3000; lo += 500 {
		mustSave(t, s, hardState(2, 1, lo+499), ents(lo, lo+499, 2), raftpb.Snapshot{})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openAndLoad opens dir and loads its log, as a Manager starts; it returns
// the first error, and fails the test if the store comes up fresh.
func openAndLoad(t *testing.T, dir string) error {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		return err
	}
	defer s.Close()
	_, fresh, err := s.Load()
	if err == nil && fresh {
		t.Fatal("a damaged raft.db loaded as a fresh log: the Manager would found a new group")
	}
	return err
}

// TestDamagedFileIsRefused: a raft.db that is empty, cut to half its
// length, or has random bytes written over one of its pages is refused by
// Open or Load with an error wrapping ErrDamaged that says how to recover;
// never a panic, never a fresh log.
func TestDamagedFileIsRefused(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"empty", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"half", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for page := range 24 {
		cases = append(cases, struct {
			name   string
			damage func(t *testing.T, path string)
		}{fmt.Sprintf("page%d", page), func(t *testing.T, path string) {
			// The two meta pages, then pages in use spread over the file
			// (a free page may hold anything).
			used := usedPages(t, path)
			p := used[page*len(used)/24]
			if page < 2 {
				p = int64(page)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			pageSize := int64(os.Getpagesize())
			junk := make([]byte, pageSize)
			r := rand.New(rand.NewPCG(uint64(page), 7))
			for i := range junk {
				junk[i] = byte(r.Uint32())
			}
			if _, err := f.WriteAt(junk, p*pageSize); err != nil {
				t.Fatal(err)
			}
		}},
		)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeLog(t)
			tc.damage(t, filepath.Join(dir, FileName))
			err := openAndLoad(t, dir)
			if tc.name == "page0" || tc.name == "page1" {
				// One meta page of two: bbolt falls back to the
				// other, an older but whole state.
				if err != nil && !errors.Is(err, ErrDamaged) {
					t.Fatalf("one meta page overwritten: %v, want no error or ErrDamaged", err)
				}
				return
			}
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("got %v, want an error wrapping ErrDamaged", err)
			}
			if !strings.Contains(err.Error(), "leasehold restore") {
				t.Errorf("the error %q does not say how to recover", err)
			}
		})
	}
}

// usedPages lists the pages of the raft.db at path that are not free.
func usedPages(t *testing.T, path string) []int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []int64
	err = db.View(func(tx *bolt.Tx) error {
		for id := 0; ; id++ {
			info, err := tx.Page(id)
			if err != nil {
				return err
			}
			if info == nil {
				return nil
			}
			if info.Type != "free" {
				out = append(out, int64(id))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFaultWhileOpenIsAnError: a raft.db cut to half its length under an
// open Store (a disk failure, an operator's mistake) makes the next read
// fault on the mapped file; Load returns an error wrapping ErrDamaged
// instead of crashing the process, and Close returns.
func TestFaultWhileOpenIsAnError(t *testing.T) {
	dir := writeLog(t)
	s := mustOpen(t, dir)
	path := filepath.Join(dir, FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Load after the file was cut: %v, want ErrDamaged", err)
	}
	_ = s.Close() // returns, with or without an error
}

// TestEditedValueIsRefused: edits of raft.db that keep every value
// decodable — a digit of an LGN changed or an Owner renamed in an entry's
// JSON, the same in the snapshot, the commit index of the hard state —
// pass bbolt's checks and would be applied as if the group had agreed on
// them. Each fails its checksum: Load refuses the log with ErrDamaged,
// naming the entry by index and term, and says how to recover.
func TestEditedValueIsRefused(t *testing.T) {
	const (
		entry = `{"Op":"set","NS":"default","Range":"[0x0,0x4000000000000000)","Entry":{"Owner":"kv-1","LGN":1234}}`
		state = `{"Owners":{"kv-1":{"Incarnation":7}},"LGN":1234}`
	)
	write := func(t *testing.T) string {
		dir := t.TempDir()
		s := mustOpen(t, dir)
		var es []raftpb.Entry
		for i := uint64(11); i <= 20; i++ {
			es = append(es, ent(i, 3, entry))
		}
		mustSave(t, s, hardState(3, 1, 20), es, snapshot(10, 2, state, 1))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	edit := func(bucket, key []byte, from, to string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b := tx.Bucket(bucket)
			v := b.Get(key)
			if !bytes.Contains(v, []byte(from)) {
				return fmt.Errorf("%q not in the value of %q", from, key)
			}
			return b.Put(key, bytes.Replace(v, []byte(from), []byte(to), 1))
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*bolt.Tx) error
		want string
	}{
		{"an LGN digit", edit(bucketEntries, u64key(15), `"LGN":1234`, `"LGN":1235`), "entry 15 (term 3"},
		{"an owner renamed", edit(bucketEntries, u64key(20), `"Owner":"kv-1"`, `"Owner":"kv-2"`), "entry 20 (term 3"},
		{"the snapshot", edit(bucketMeta, keySnapshot, `"LGN":1234`, `"LGN":9234`), "snapshot (index 10, term 2"},
		{"the hard state", func(tx *bolt.Tx) error {
			m := tx.Bucket(bucketMeta)
			v := append([]byte(nil), m.Get(keyHardState)...)
			v[len(v)-1] = 19 // the commit index, the last field: 20 → 19
			return m.Put(keyHardState, v)
		}, "hard state fails its checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t)
			db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tc.edit); err != nil {
				t.Fatal(err)
			}
			db.Close()
			err = openAndLoad(t, dir)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "fails its checksum") || !strings.Contains(err.Error(), "leasehold restore") {
				t.Fatalf("an edit of %s: %v, want ErrDamaged naming %q, the checksum and the way to recover", tc.name, err, tc.want)
			}
		})
	}
}

// writeVersion1 creates a raft.db of format version 1, whose values carry
// no checksum, holding hs, es and snap, as an earlier leasehold wrote it.
func writeVersion1(t *testing.T, hs raftpb.HardState, es []raftpb.Entry, snap raftpb.Snapshot) string {
	t.Helper()
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		entries, _ := tx.CreateBucket(bucketEntries)
		meta.Put(keyVersion, u64key(1))
		meta.Put(keyHardState, encoded(t, &hs))
		meta.Put(keySnapshot, encoded(t, &snap))
		for i := range es {
			entries.Put(u64key(es[i].Index), encoded(t, &es[i]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestVersion1IsUpgraded: a data directory of format version 1 (no
// checksums) loads as it was, and Open rewrites it with a checksum on
// every value, at the current version, so later damage is found; one whose
// damage shows already is refused, not sealed in, and left as it was.
func TestVersion1IsUpgraded(t *testing.T) {
	hs, es, snap := hardState(3, 1, 20), ents(11, 20, 3), snapshot(10, 2, "state", 1)
	dir := writeVersion1(t, hs, es, snap)
	s := mustOpen(t, dir)
	ms, fresh := mustLoad(t, s)
	if fresh {
		t.Fatal("a version 1 log loaded as fresh")
	}
	if last, _ := ms.LastIndex(); last != 20 {
		t.Fatalf("last index %d after the upgrade, want 20", last)
	}
	got, err := ms.Entries(11, 21, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if !bytes.Equal(encoded(t, &got[i]), encoded(t, &es[i])) {
			t.Fatalf("entry %d is %v after the upgrade, want %v", es[i].Index, got[i], es[i])
		}
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		if v, err := checkFormat(tx); v != FormatVersion {
			return fmt.Errorf("format version %d after the upgrade (%v), want %d", v, err, FormatVersion)
		}
		_, err := readState(tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Damage after the upgrade is found.
	poke(t, s, func(_, e *bolt.Bucket) error {
		v := append([]byte(nil), e.Get(u64key(12))...)
		v[len(v)-1] ^= 1
		return e.Put(u64key(12), v)
	})
	if _, _, err := s.Load(); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "entry 12 (term 3") {
		t.Fatalf("Load after an entry of the upgraded log changed: %v, want ErrDamaged naming entry 12", err)
	}
	s.Close()

	// A version 1 log with a gap is refused, and stays version 1.
	dir = writeVersion1(t, hs, append(slices.Clone(es[:3]), es[4:]...), snap)
	if _, err := Open(dir); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "entry 14 missing") {
		t.Fatalf("Open of a version 1 log with a gap: %v, want ErrDamaged naming the missing entry", err)
	}
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		if v, _ := checkFormat(tx); v != 1 {
			t.Errorf("a refused version 1 log was rewritten as version %d", v)
		}
		return nil
	})
}
