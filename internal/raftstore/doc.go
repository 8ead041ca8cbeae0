// Package raftstore is the durable Raft log of one Manager: the hard state,
// the log entries and the latest snapshot of the Manager's Raft group, kept in
// a single bbolt file, DIR/raft.db, in the Manager's data directory.
//
// # Why
//
// The Manager's lease table is replicated state: a lease granted by the
// leader is only safe if the log entries that granted it, the term and the
// vote survive a crash of any member. Raft (go.etcd.io/raft/v3) leaves that
// durability to the application: everything a raft.Ready asks to be stored
// must be on disk before its messages are sent and before Advance is called.
// This package is that storage, in the shape of etcd's raftexample (a WAL
// paired with a raft.MemoryStorage), but with bbolt instead of a WAL and
// snapshot files:
//
//   - One bbolt transaction per Ready, so the hard state, the new entries, a
//     truncated conflicting suffix and a received snapshot become durable
//     together with a single fsync, and a crash leaves either the old or the
//     new state, never a mix.
//   - Hot backup: bbolt can write a consistent copy of the database from a
//     read transaction while the Manager keeps writing (Store.Backup), and
//     Restore turns such a copy back into a data directory.
//   - One file and one lock: bbolt's file lock stops a second Manager from
//     using the same data directory.
//
// # Use
//
// Raft runs from a raft.MemoryStorage; the Store is its durable mirror.
// On start:
//
//	st, err := raftstore.Open(dir)
//	ms, fresh, err := st.Load()
//	rn, err := raft.NewRawNode(&raft.Config{ID: id, Storage: ms, ...})
//	if fresh {
//		err = rn.Bootstrap(peers)
//	}
//
// After a restart, Config.Applied should be the index the application's
// state already reflects (at least the snapshot index, whose Data the
// application restores itself); raft re-delivers the committed entries after
// it in Ready.CommittedEntries.
//
// For every Ready, in this order:
//
//	rd := rn.Ready()
//	if err := st.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
//		// stop the node: raft assumes the Ready is durable
//	}
//	if !raft.IsEmptySnap(rd.Snapshot) {
//		ms.ApplySnapshot(rd.Snapshot) // and restore the state machine from it
//	}
//	ms.Append(rd.Entries)
//	send(rd.Messages)           // only after Save returned nil
//	apply(rd.CommittedEntries)
//	rn.Advance(rd)
//
// Config.AsyncStorageWrites must stay false: the Store is written
// synchronously from the Ready loop. If Save fails (a full disk, an I/O
// error) nothing of that Ready was stored, and the node must not send its
// messages or call Advance.
//
// To compact the log once the application has applied index i:
//
//	snap, err := ms.CreateSnapshot(i, confState, stateMachineData)
//	err = st.Compact(snap)
//	err = ms.Compact(i)
//
// Keep some entries behind i (etcd keeps thousands) so that slow followers
// can catch up from the log instead of needing the whole snapshot.
//
// # Format
//
// raft.db has two buckets. "entries" maps the big-endian uint64 index to the
// stored form of the raftpb.Entry. "meta" holds "version" (big-endian
// uint64, currently 2; other versions but 1 are refused), "hardstate" and
// "snapshot" (stored forms). Entries at or below the snapshot index are
// deleted when the snapshot is stored.
//
// A value's stored form is the CRC-32C (Castagnoli) of its key and its
// protobuf encoding, 4 bytes big-endian, then the encoding: every read
// checks it, and a mismatch is ErrDamaged naming the value (an entry by
// index and term). bbolt checks the structure of its pages, not the bytes
// of the values in them, so an edit that leaves a value decodable (a digit
// of an LGN in an entry's JSON) would otherwise be applied (sum.go).
// Version 1 stored the encoding alone; Open rewrites such a file as
// version 2 in one transaction, after reading all of it as Load does.
package raftstore
