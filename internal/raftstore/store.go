package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// FileName is the name of the database file inside a data directory.
const FileName = "raft.db"

// FormatVersion is the on-disk format this package writes: 2, each value
// with its checksum (sum.go). It reads version 1, whose values have none,
// and Open upgrades it.
const FormatVersion uint64 = sealedVersion

// ErrLocked is returned (wrapped) by Open when another process, or another
// Store in this process, has the data directory open.
var ErrLocked = errors.New("data directory is in use by another manager")

// ErrDamaged is returned (wrapped) by Open, and by any other method, when
// raft.db is not a whole, consistent database: empty (0 bytes), shorter than
// its own pages say, failing bbolt's integrity check, making bbolt panic,
// or holding a value (an entry, the hard state, the snapshot) that fails its
// checksum, which the error names.
// A damaged raft log is never taken for a new one: starting afresh would
// found a new group and forget every lease. Recovery is the operator's:
// restore a backup, or re-add the replica to its group (docs/operations.md).
var ErrDamaged = errors.New("raft.db is damaged")

// Recovery is what a damaged raft.db's error tells the operator to do.
const Recovery = "restore a backup into an empty data directory (leasehold restore), or, if other replicas of the group are running, " +
	"remove this one (leasehold cluster remove), empty its data directory and add it again (see docs/operations.md)"

func damaged(format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s", ErrDamaged, fmt.Sprintf(format, args...), Recovery)
}

// guard turns a panic, or a memory fault on the mapped file (a file that
// is shorter than bbolt believes), in fn into an error wrapping
// ErrDamaged: a storage failure must stop the Manager with an error, not
// crash it mid-write or leave it holding a lock.
func guard(what string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged("%s: bbolt failed: %v", what, r)
		}
	}()
	return fn()
}

// closeTimeout bounds Close: after a storage failure bbolt may hold a lock
// that Close would wait for forever.
const closeTimeout = 5 * time.Second

// ErrExists is returned (wrapped) by Restore when the data directory already
// has a raft.db.
var ErrExists = errors.New("data directory already has a raft log")

var (
	bucketMeta    = []byte("meta")
	bucketEntries = []byte("entries")
	keyVersion    = []byte("version")
	keyHardState  = []byte("hardstate")
	keySnapshot   = []byte("snapshot")
)

// options are the knobs Open does not expose; tests change them.
type options struct {
	lockTimeout time.Duration // how long Open waits for the file lock
	maxSize     int           // bbolt MaxSize; 0 means no limit
}

var defaultOptions = options{lockTimeout: time.Second}

// Store is the durable Raft state of one Manager: DIR/raft.db.
// Its methods may be called from several goroutines; writes are serialised
// by bbolt.
type Store struct {
	path string
	db   *bolt.DB
}

// Open opens or creates DIR/raft.db, creating DIR with mode 0700 if needed.
// Opening a directory that is already open, here or in another process, fails
// after a short wait with an error wrapping ErrLocked. A raft.db of another
// format version is refused.
func Open(dir string) (*Store, error) {
	return open(dir, defaultOptions)
}

func open(dir string, o options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("raftstore: open: empty data directory path")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftstore: create data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	fi, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	if statErr == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("raftstore: open %s: %w", path,
			damaged("the file is empty (0 bytes), which a raft log never is once created"))
	}

	var db *bolt.DB
	err := guard("open", func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{
			Timeout: o.lockTimeout,
			MaxSize: o.maxSize,
		})
		return err
	})
	if err != nil {
		if errors.Is(err, ErrDamaged) {
			return nil, fmt.Errorf("raftstore: open %s: %w", path, err)
		}
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("raftstore: open %s: %w (could not lock %s within %s)",
				path, ErrLocked, FileName, o.lockTimeout)
		}
		if !created {
			// An existing file bbolt cannot open (bad magic, bad
			// checksums, bad page size) is damaged, not foreign.
			return nil, fmt.Errorf("raftstore: open %s: %w", path, damaged("%v", err))
		}
		return nil, fmt.Errorf("raftstore: open %s: %w", path, err)
	}
	s := &Store{path: path, db: db}
	if !created {
		if err := s.check(); err != nil {
			s.Close()
			return nil, fmt.Errorf("raftstore: open %s: %w", path, err)
		}
	}
	if err := guard("initialise", s.init); err != nil {
		s.Close()
		return nil, err
	}
	if !created {
		if err := guard("upgrade", s.upgrade); err != nil {
			s.Close()
			return nil, fmt.Errorf("raftstore: open %s: upgrade to format version %d: %w", path, FormatVersion, err)
		}
	}
	if created {
		// Make the new file's directory entry durable too.
		if err := syncDir(dir); err != nil {
			db.Close()
			return nil, fmt.Errorf("raftstore: open %s: %w", path, err)
		}
	}
	return s, nil
}

// check is the integrity check of an existing raft.db at Open: the file
// must be as long as its pages say (a shorter one faults on the first read
// past its end), and bbolt's Tx.Check must find every page reachable once
// and every key in order. It reads the whole file: a second per 100-odd MB.
func (s *Store) check() error {
	return guard("integrity check", func() error {
		fi, err := os.Stat(s.path)
		if err != nil {
			return err
		}
		return s.db.View(func(tx *bolt.Tx) error {
			if want := tx.Size(); fi.Size() < want {
				return damaged("truncated: %d bytes, its pages need %d", fi.Size(), want)
			}
			var errs []string
			for err := range tx.Check() {
				if len(errs) < 3 {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) > 0 {
				return damaged("integrity check failed: %s", strings.Join(errs, "; "))
			}
			return nil
		})
	})
}

// init checks the format of an existing database, or lays out a new one.
func (s *Store) init() error {
	var empty bool
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil {
			foreign := false
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { foreign = true; return nil })
			if foreign {
				return errors.New("not a leasehold raft log (no meta bucket, other buckets present)")
			}
			empty = true
			return nil
		}
		_, err := checkFormat(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("raftstore: open %s: %w", s.path, err)
	}
	if !empty {
		return nil
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketEntries); err != nil {
			return err
		}
		return meta.Put(keyVersion, u64key(FormatVersion))
	})
	if err != nil {
		return fmt.Errorf("raftstore: initialise %s: %w", s.path, err)
	}
	return nil
}

// checkFormat verifies the version key and the buckets of a raft.db, and
// returns the version: FormatVersion, or 1 (no checksums).
func checkFormat(tx *bolt.Tx) (uint64, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, errors.New("not a leasehold raft log (no meta bucket)")
	}
	v := meta.Get(keyVersion)
	if v == nil {
		return 0, errors.New("not a leasehold raft log (no format version)")
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("corrupt format version (%d bytes, want 8)", len(v))
	}
	got := binary.BigEndian.Uint64(v)
	if got != 1 && got != FormatVersion {
		return 0, fmt.Errorf("unsupported format version %d (this build reads versions 1 and %d; was it written by a newer leasehold?)",
			got, FormatVersion)
	}
	if tx.Bucket(bucketEntries) == nil {
		return 0, errors.New("corrupt raft log: no entries bucket")
	}
	return got, nil
}

// Path returns the path of the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database and releases the data directory. It gives up
// after closeTimeout: a bbolt that failed mid-write may never let go of
// its lock, and the Manager must still be able to exit.
func (s *Store) Close() error {
	done := make(chan error, 1)
	go func() { done <- guard("close", s.db.Close) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("raftstore: close %s: %w", s.path, err)
		}
		return nil
	case <-time.After(closeTimeout):
		return fmt.Errorf("raftstore: close %s: gave up after %s", s.path, closeTimeout)
	}
}

// state is what a raft.db holds, decoded.
type state struct {
	snap    raftpb.Snapshot  // empty if none
	hs      raftpb.HardState // empty if none
	hasSnap bool
	hasHS   bool
	ents    []raftpb.Entry // contiguous, starting right after the snapshot
}

func (st *state) fresh() bool {
	return !st.hasSnap && !st.hasHS && len(st.ents) == 0
}

// Load returns a raft.MemoryStorage holding what was saved: the last
// snapshot, the hard state and the entries after the snapshot. fresh is true
// when nothing was ever saved (a new data directory); the caller then
// bootstraps the node.
//
// Load checks what it reads: a value that fails its checksum, an
// undecodable value, an entry stored under the wrong index, a gap in the
// log or a commit index outside the log gives an error wrapping ErrDamaged
// naming what is wrong (the entry by index and term), rather than a
// panic inside raft later or a state the group never agreed on.
func (s *Store) Load() (ms *raft.MemoryStorage, fresh bool, err error) {
	var st *state
	err = guard("load", func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			var err error
			st, err = readState(tx)
			if err != nil {
				err = damaged("%v", err)
			}
			return err
		})
	})
	if err != nil {
		return nil, false, fmt.Errorf("raftstore: load %s: %w", s.path, err)
	}
	ms = raft.NewMemoryStorage()
	if st.hasSnap {
		if err := ms.ApplySnapshot(st.snap); err != nil {
			return nil, false, fmt.Errorf("raftstore: load %s: apply snapshot at index %d: %w",
				s.path, st.snap.Metadata.Index, err)
		}
	}
	if st.hasHS {
		if err := ms.SetHardState(st.hs); err != nil {
			return nil, false, fmt.Errorf("raftstore: load %s: set hard state: %w", s.path, err)
		}
	}
	if err := ms.Append(st.ents); err != nil {
		return nil, false, fmt.Errorf("raftstore: load %s: append entries: %w", s.path, err)
	}
	return ms, st.fresh(), nil
}

// readState decodes and checks the whole content of a raft.db.
func readState(tx *bolt.Tx) (*state, error) {
	version, err := checkFormat(tx)
	if err != nil {
		return nil, err
	}
	sealed := version >= sealedVersion
	meta := tx.Bucket(bucketMeta)
	st := &state{}
	if st.snap, st.hasSnap, err = getSnapshot(sealed, meta); err != nil {
		return nil, err
	}
	if st.hasSnap && raft.IsEmptySnap(st.snap) {
		return nil, errors.New("corrupt snapshot: stored snapshot has index 0")
	}
	if st.hs, st.hasHS, err = getHardState(sealed, meta); err != nil {
		return nil, err
	}

	snapIndex := st.snap.Metadata.Index
	next := snapIndex + 1
	c := tx.Bucket(bucketEntries).Cursor()
	for k, v := c.Seek(u64key(next)); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			return nil, fmt.Errorf("corrupt entries bucket: key %x is not an 8-byte index", k)
		}
		index := binary.BigEndian.Uint64(k)
		if index != next {
			return nil, fmt.Errorf("corrupt log: entry %d missing (next stored entry is %d)", next, index)
		}
		e, err := getEntry(sealed, index, v)
		if err != nil {
			return nil, err
		}
		if e.Index != index {
			return nil, fmt.Errorf("corrupt entry at index %d: it says it is entry %d", index, e.Index)
		}
		st.ents = append(st.ents, e)
		next++
	}

	if !raft.IsEmptyHardState(st.hs) {
		last := next - 1
		if c := st.hs.Commit; c < snapIndex || c > last {
			return nil, fmt.Errorf("corrupt hard state: commit index %d is outside the stored log [%d, %d]",
				c, snapIndex, last)
		}
	}
	return st, nil
}

// Save durably records one raft.Ready's worth of state before it returns, in
// one bbolt transaction with one fsync: the snapshot if not empty, the hard
// state if not empty, and the entries. Pass rd.HardState, rd.Entries and
// rd.Snapshot of a raft.Ready; a Ready with none of them costs nothing.
//
// A non-empty snapshot replaces the whole stored log, as
// raft.MemoryStorage.ApplySnapshot does: raft only hands one out when the
// local log does not contain it, so stored entries after it are not part of
// the leader's log either. It must be newer than the stored snapshot.
//
// Entries overwrite any stored entries with an index at or after the first new
// one (a leader may truncate a conflicting suffix). They must be contiguous
// and must not leave a gap after the stored log; entries at or below the
// snapshot index are skipped.
//
// If Save returns an error nothing was stored; the caller must not send the
// Ready's messages or call Advance.
func (s *Store) Save(hs raftpb.HardState, ents []raftpb.Entry, snap raftpb.Snapshot) error {
	hasSnap := !raft.IsEmptySnap(snap)
	hasHS := !raft.IsEmptyHardState(hs)
	if !hasSnap && !hasHS && len(ents) == 0 {
		return nil
	}
	err := guard("save", func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			entries := tx.Bucket(bucketEntries)
			snapIndex, err := storedSnapIndex(meta)
			if err != nil {
				return err
			}
			if hasSnap {
				idx := snap.Metadata.Index
				if idx <= snapIndex {
					return fmt.Errorf("snapshot at index %d: %w (stored snapshot is at %d)",
						idx, raft.ErrSnapOutOfDate, snapIndex)
				}
				if err := putSealed(meta, keySnapshot, &snap); err != nil {
					return fmt.Errorf("snapshot at index %d: %w", idx, err)
				}
				if err := deleteFrom(entries, 0); err != nil {
					return err
				}
				snapIndex = idx
			}
			if err := putEntries(entries, snapIndex, ents); err != nil {
				return err
			}
			if hasHS {
				if err := putSealed(meta, keyHardState, &hs); err != nil {
					return fmt.Errorf("hard state: %w", err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("raftstore: save to %s: %w", s.path, err)
	}
	return nil
}

// putEntries writes ents after deleting stored entries at or after ents[0].
func putEntries(b *bolt.Bucket, snapIndex uint64, ents []raftpb.Entry) error {
	// Skip what the snapshot already covers, as MemoryStorage.Append does.
	for len(ents) > 0 && ents[0].Index <= snapIndex {
		ents = ents[1:]
	}
	if len(ents) == 0 {
		return nil
	}
	first := ents[0].Index
	for i := range ents {
		if ents[i].Index != first+uint64(i) {
			return fmt.Errorf("entries not contiguous: entry %d follows entry %d", ents[i].Index, first+uint64(i)-1)
		}
	}
	last := snapIndex
	if k, _ := b.Cursor().Last(); k != nil {
		last = max(last, binary.BigEndian.Uint64(k))
	}
	if first > last+1 {
		return fmt.Errorf("entries %d..%d would leave a gap after the stored log, which ends at %d",
			first, ents[len(ents)-1].Index, last)
	}
	if err := deleteFrom(b, first); err != nil {
		return err
	}
	for i := range ents {
		e := &ents[i]
		data, err := e.Marshal()
		if err != nil {
			return fmt.Errorf("encode entry %d: %w", e.Index, err)
		}
		if err := b.Put(u64key(e.Index), seal(u64key(e.Index), data)); err != nil {
			return fmt.Errorf("store entry %d: %w", e.Index, err)
		}
	}
	return nil
}

// Compact records a snapshot the application made itself (with
// raft.MemoryStorage.CreateSnapshot) and deletes the entries at or below its
// index; the entries after it stay. The snapshot must be newer than the stored
// one and its index and term must match a stored entry. Call
// raft.MemoryStorage.Compact with the same index after Compact succeeds.
func (s *Store) Compact(snap raftpb.Snapshot) error {
	if raft.IsEmptySnap(snap) {
		return fmt.Errorf("raftstore: compact %s: snapshot is empty (index 0)", s.path)
	}
	idx, term := snap.Metadata.Index, snap.Metadata.Term
	err := guard("compact", func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			entries := tx.Bucket(bucketEntries)
			snapIndex, err := storedSnapIndex(meta)
			if err != nil {
				return err
			}
			if idx <= snapIndex {
				return fmt.Errorf("%w (stored snapshot is at %d)", raft.ErrSnapOutOfDate, snapIndex)
			}
			v := entries.Get(u64key(idx))
			if v == nil {
				return fmt.Errorf("entry %d is not in the stored log", idx)
			}
			e, err := getEntry(true, idx, v)
			if err != nil {
				return damaged("%v", err)
			}
			if e.Term != term {
				return fmt.Errorf("snapshot term %d does not match the stored entry %d (term %d)", term, idx, e.Term)
			}
			if err := putSealed(meta, keySnapshot, &snap); err != nil {
				return err
			}
			return deleteThrough(entries, idx)
		})
	})
	if err != nil {
		return fmt.Errorf("raftstore: compact %s at index %d: %w", s.path, idx, err)
	}
	return nil
}

// Backup writes a consistent copy of the database to w while the store stays
// in use; Restore turns it back into a data directory.
func (s *Store) Backup(w io.Writer) error {
	err := guard("backup", func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			_, err := tx.WriteTo(w)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("raftstore: back up %s: %w", s.path, err)
	}
	return nil
}

// Restore creates DIR/raft.db from a stream written by Backup. It refuses a
// directory that already has a raft.db (the error wraps ErrExists), and a
// stream that is not a complete, readable raft log of this format version.
// The manager must not be running on DIR.
func Restore(dir string, r io.Reader) (err error) {
	path := filepath.Join(dir, FileName)
	wrap := func(err error) error { return fmt.Errorf("raftstore: restore %s: %w", path, err) }
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return wrap(fmt.Errorf("create data directory: %w", err))
	}
	if _, err := os.Lstat(path); err == nil {
		return wrap(ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return wrap(err)
	}

	tmp, err := os.CreateTemp(dir, FileName+".restore-*")
	if err != nil {
		return wrap(err)
	}
	tmpPath := tmp.Name()
	defer func() {
		if err != nil {
			os.Remove(tmpPath)
		}
	}()
	n, err := io.Copy(tmp, r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return wrap(fmt.Errorf("write %s: %w", tmpPath, err))
	}
	if n == 0 {
		return wrap(errors.New("backup rejected: the stream is empty"))
	}
	if err := checkBackup(tmpPath, n); err != nil {
		return wrap(fmt.Errorf("backup rejected: %w", err))
	}

	// Link rather than rename, so that a raft.db created meanwhile is never
	// replaced.
	if err := os.Link(tmpPath, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return wrap(ErrExists)
		}
		return wrap(err)
	}
	if err := os.Remove(tmpPath); err != nil {
		return wrap(err)
	}
	if err := syncDir(dir); err != nil {
		return wrap(err)
	}
	return nil
}

// checkBackup opens a restored file read-only and decodes all of it.
func checkBackup(path string, size int64) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: defaultOptions.lockTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		// A truncated copy would fault on reading the pages past its end.
		if want := tx.Size(); size < want {
			return fmt.Errorf("truncated: %d bytes, the database needs %d", size, want)
		}
		_, err := readState(tx)
		return err
	})
}

// storedSnapIndex returns the index of the stored snapshot (0: none). An
// open Store's file is of the current version: Open upgraded it.
func storedSnapIndex(meta *bolt.Bucket) (uint64, error) {
	snap, _, err := getSnapshot(true, meta)
	if err != nil {
		return 0, damaged("%v", err)
	}
	return snap.Metadata.Index, nil
}

// marshaler is what the gogo-generated raftpb types implement.
type marshaler interface{ Marshal() ([]byte, error) }

// deleteFrom deletes the entries with index >= from. Keys are copied before
// deleting: a bbolt cursor must not be advanced across deletes.
func deleteFrom(b *bolt.Bucket, from uint64) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(u64key(from)); k != nil; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	return deleteKeys(b, keys)
}

// deleteThrough deletes the entries with index <= through.
func deleteThrough(b *bolt.Bucket, through uint64) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && len(k) == 8 && binary.BigEndian.Uint64(k) <= through; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	return deleteKeys(b, keys)
}

func deleteKeys(b *bolt.Bucket, keys [][]byte) error {
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete entry %x: %w", k, err)
		}
	}
	return nil
}

func u64key(i uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, i)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
