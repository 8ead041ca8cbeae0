package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
)

// Checksums. bbolt checks the structure of its pages (Tx.Check) and the
// checksum of its two meta pages, not the bytes of the values in its leaf
// pages: a value whose bytes change on disk (a bit flip, a bad sector
// remapped, an edit) still reads back, and if it still decodes, as a Raft
// entry of JSON with one digit changed does, the Manager would apply it and
// hand out leases from a table its group never agreed on. So, as etcd's WAL
// does for each record, every value this package stores (each entry, the
// hard state, the snapshot) carries a CRC-32C of its key and its bytes,
// checked whenever it is read. The key is in the sum so that a value
// copied under another key fails too.
//
// A value is stored as the 4-byte big-endian sum followed by the protobuf
// encoding. Format version 1 stored the encoding alone; Open upgrades such
// a file (see upgrade).

// sealedVersion is the first format version whose values carry a checksum.
const sealedVersion = 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sumOf is the checksum of the value payload stored under key.
func sumOf(key, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, payload)
}

// seal returns the stored form of payload under key.
func seal(key, payload []byte) []byte {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(payload)), sumOf(key, payload))
	return append(out, payload...)
}

// sumError is a value whose checksum does not match its bytes.
type sumError struct {
	stored, computed uint32
	short            bool // too short to hold a checksum
}

func (e *sumError) Error() string {
	if e.short {
		return "too short to hold its checksum"
	}
	return fmt.Sprintf("fails its checksum (stored %08x, computed %08x): its bytes changed after they were written", e.stored, e.computed)
}

// unseal returns the payload of the value v stored under key, checking its
// checksum if the format has them (sealed).
func unseal(sealed bool, key, v []byte) ([]byte, error) {
	if !sealed {
		return v, nil
	}
	if len(v) < 4 {
		return nil, &sumError{short: true}
	}
	payload := v[4:]
	if stored, computed := binary.BigEndian.Uint32(v), sumOf(key, payload); stored != computed {
		return nil, &sumError{stored: stored, computed: computed}
	}
	return payload, nil
}

// entryError names the stored entry at index whose value v (sealed or
// not) failed: by its index and, if its bytes still decode, its term.
func entryError(sealed bool, index uint64, v []byte, err error) error {
	var e raftpb.Entry
	if sealed && len(v) >= 4 {
		v = v[4:]
	}
	var se *sumError
	if errors.As(err, &se) && !se.short && e.Unmarshal(v) == nil && e.Index == index {
		return fmt.Errorf("entry %d (term %d, as its damaged bytes say) %w", index, e.Term, err)
	}
	return fmt.Errorf("entry %d (its term unreadable) %w", index, err)
}

// getEntry reads and decodes the entry stored at index (v its value).
func getEntry(sealed bool, index uint64, v []byte) (raftpb.Entry, error) {
	var e raftpb.Entry
	payload, err := unseal(sealed, u64key(index), v)
	if err != nil {
		return e, entryError(sealed, index, v, err)
	}
	if err := e.Unmarshal(payload); err != nil {
		return e, fmt.Errorf("corrupt entry at index %d: %w", index, err)
	}
	return e, nil
}

// getSnapshot reads and decodes the stored snapshot, if any.
func getSnapshot(sealed bool, meta *bolt.Bucket) (snap raftpb.Snapshot, ok bool, err error) {
	v := meta.Get(keySnapshot)
	if v == nil {
		return snap, false, nil
	}
	payload, err := unseal(sealed, keySnapshot, v)
	if err != nil {
		var md raftpb.Snapshot
		if md.Unmarshal(v[min(4, len(v)):]) == nil && md.Metadata.Index > 0 {
			return snap, false, fmt.Errorf("snapshot (index %d, term %d, as its damaged bytes say) %w",
				md.Metadata.Index, md.Metadata.Term, err)
		}
		return snap, false, fmt.Errorf("snapshot %w", err)
	}
	if err := snap.Unmarshal(payload); err != nil {
		return snap, false, fmt.Errorf("corrupt snapshot: %w", err)
	}
	return snap, true, nil
}

// getHardState reads and decodes the stored hard state, if any.
func getHardState(sealed bool, meta *bolt.Bucket) (hs raftpb.HardState, ok bool, err error) {
	v := meta.Get(keyHardState)
	if v == nil {
		return hs, false, nil
	}
	payload, err := unseal(sealed, keyHardState, v)
	if err != nil {
		return hs, false, fmt.Errorf("hard state %w", err)
	}
	if err := hs.Unmarshal(payload); err != nil {
		return hs, false, fmt.Errorf("corrupt hard state: %w", err)
	}
	return hs, true, nil
}

// putSealed stores m's encoding under key with its checksum.
func putSealed(b *bolt.Bucket, key []byte, m marshaler) error {
	data, err := m.Marshal()
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put(key, seal(key, data))
}

// upgrade rewrites a raft.db of format version 1, whose values carry no
// checksum, as the current version: every value sealed, and the version
// changed, in one transaction, so a crash leaves the old file or the new.
// It first reads the whole log as Load does: damage that shows (a value
// that does not decode, a gap) is refused, not sealed in. Damage that
// still decodes cannot be told apart in a file without checksums; from the
// upgrade on, it can. An older leasehold refuses the upgraded file
// (unsupported format version), so a downgrade needs a backup taken before.
func (s *Store) upgrade() error {
	var version uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		version, err = checkFormat(tx)
		if err == nil && version < sealedVersion {
			_, err = readState(tx)
			if err != nil {
				err = damaged("%v", err)
			}
		}
		return err
	})
	if err != nil || version >= sealedVersion {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, entries := tx.Bucket(bucketMeta), tx.Bucket(bucketEntries)
		for _, key := range [][]byte{keySnapshot, keyHardState} {
			if v := meta.Get(key); v != nil {
				if err := meta.Put(key, seal(key, append([]byte(nil), v...))); err != nil {
					return err
				}
			}
		}
		var keys, vals [][]byte
		if err := entries.ForEach(func(k, v []byte) error {
			keys, vals = append(keys, append([]byte(nil), k...)), append(vals, seal(k, v))
			return nil
		}); err != nil {
			return err
		}
		for i := range keys {
			if err := entries.Put(keys[i], vals[i]); err != nil {
				return err
			}
		}
		return meta.Put(keyVersion, u64key(FormatVersion))
	})
}
