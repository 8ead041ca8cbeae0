package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestDamagedDataDirFailsLoudly runs a Manager with a data directory, stops
// it, damages its raft.db three ways (cut to 0 bytes, cut to half, random
// bytes over a page in use) and starts it again on each copy: each time the
// process must exit with an error naming the damage and the way to recover
// within 10 s, never found a new group or elect itself, and never hang.
// (Random bytes in a leaf page's values pass bbolt's integrity check, which
// checks structure; the Manager finds them when it applies the log.)
func TestDamagedDataDirFailsLoudly(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	dir := t.TempDir()
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast", "--data-dir", dir)
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	// An Owner's join and grants give the log entries and pages.
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	kv := c.serve("kv-1")
	c.settle("one owner", func(s status) bool { return s.sumRanges() == 64 })
	kv.stop()
	mgr.stop()
	good, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string) []byte
	}{
		{"empty", func(*testing.T, string) []byte { return nil }},
		{"half", func(*testing.T, string) []byte { return good[:len(good)/2] }},
		{"random page", func(t *testing.T, path string) []byte {
			b := append([]byte(nil), good...)
			used := usedPages(t, path)
			p := used[len(used)/2]
			size := os.Getpagesize()
			r := rand.New(rand.NewPCG(uint64(p), 1))
			for i := p * size; i < (p+1)*size && i < len(b); i++ {
				b[i] = byte(r.Uint32())
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			path := filepath.Join(d, "raft.db")
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(t, path), 0o600); err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			p := start(t, "manager on a damaged raft.db", leasehold, "manager", "--listen", "127.0.0.1:0",
				"--timings", "fast", "--data-dir", d)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the manager still runs %s after starting on a damaged raft.db", time.Since(started))
			}
			if p.cmd.ProcessState.Success() {
				t.Fatal("the manager exited 0 on a damaged raft.db")
			}
			stderr := p.stderr.String()
			if strings.Contains(stderr, "restored=false") || strings.Contains(stderr, "leader changed") {
				t.Fatalf("the manager started a group on a damaged raft.db:\n%s", stderr)
			}
			if !strings.Contains(stderr, "raft.db is damaged") || !strings.Contains(stderr, "leasehold restore") {
				t.Fatalf("the manager's error does not say raft.db is damaged and how to recover:\n%s", stderr)
			}
			t.Logf("exit %v after %v", p.cmd.ProcessState, time.Since(started).Round(time.Millisecond))
		})
	}
}

// usedPages lists the pages of the bbolt file at path past the two meta
// pages that are in use (a free page may hold anything).
func usedPages(t *testing.T, path string) []int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []int
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			if info.Type != "free" {
				out = append(out, id)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no page in use besides the meta pages")
	}
	return out
}

// TestEditedDataDirFailsLoudly: damage that keeps raft.db whole and every
// value decodable — one entry's JSON with a digit of an LGN changed, or an
// Owner renamed — passes bbolt's checks; each value's checksum finds it.
// The Manager started on the edited copy must exit non-zero within 10 s
// naming the entry (index and term) and the way to recover, and never
// start a group.
func TestEditedDataDirFailsLoudly(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	t.Parallel()
	leasehold := buildLeasehold(t)
	dir := t.TempDir()
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast", "--data-dir", dir)
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: buildKV(t), manager: addr} // kv may link while the Manager starts
	kv := c.serve("kv-1")
	c.settle("one owner", func(s status) bool { return s.sumRanges() == 64 })
	kv.stop()
	mgr.stop()
	good, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}

	lgn := regexp.MustCompile(`"LGN":[1-9]`)
	for _, tc := range []struct {
		name string
		edit func(v []byte) []byte // nil: not this entry
	}{
		{"an LGN digit", func(v []byte) []byte {
			loc := lgn.FindIndex(v)
			if loc == nil {
				return nil
			}
			w := append([]byte(nil), v...)
			if d := &w[loc[1]-1]; *d == '9' {
				*d = '1'
			} else {
				*d++
			}
			return w
		}},
		{"an owner renamed", func(v []byte) []byte {
			if !bytes.Contains(v, []byte(`"kv-1"`)) {
				return nil
			}
			return bytes.Replace(v, []byte(`"kv-1"`), []byte(`"kv-9"`), 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			path := filepath.Join(d, "raft.db")
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			index := editLastEntry(t, path, tc.edit)
			started := time.Now()
			p := start(t, "manager on an edited raft.db", leasehold, "manager", "--listen", "127.0.0.1:0",
				"--timings", "fast", "--data-dir", d)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the manager still runs %s after starting on a raft.db with entry %d edited", time.Since(started), index)
			}
			took := time.Since(started)
			if p.cmd.ProcessState.Success() {
				t.Fatalf("the manager exited 0 on a raft.db with entry %d edited", index)
			}
			stderr := p.stderr.String()
			if strings.Contains(stderr, "restored=") || strings.Contains(stderr, "leader changed") {
				t.Fatalf("the manager started on a raft.db with entry %d edited:\n%s", index, stderr)
			}
			want := fmt.Sprintf("entry %d (term ", index)
			if !strings.Contains(stderr, "raft.db is damaged") || !strings.Contains(stderr, want) ||
				!strings.Contains(stderr, "fails its checksum") || !strings.Contains(stderr, "leasehold restore") {
				t.Fatalf("the manager's error does not name the damaged entry (%q), its checksum and the way to recover:\n%s", want, stderr)
			}
			_, msg, _ := strings.Cut(stderr, "raft.db is damaged")
			msg, _, _ = strings.Cut(msg, "\n")
			t.Logf("entry %d edited: %v after %v: raft.db is damaged%s", index, p.cmd.ProcessState, took.Round(time.Millisecond), msg)
		})
	}
}

// editLastEntry applies edit to the last Raft entry in the bbolt file at
// path that it changes, keeping the rest of the stored value (its checksum
// included) as it was, and returns the entry's index.
func editLastEntry(t *testing.T, path string, edit func([]byte) []byte) uint64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var index uint64
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("entries"))
		c := b.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if w := edit(v); w != nil {
				index = binary.BigEndian.Uint64(k)
				return b.Put(append([]byte(nil), k...), w)
			}
		}
		return errors.New("no entry to edit")
	})
	if err != nil {
		t.Fatal(err)
	}
	return index
}
