package raftstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
