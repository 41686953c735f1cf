// Package raftstore keeps metad's hashicorp/raft log and stable state in
// pebble, so metad has one storage engine. A Store is both a raft.LogStore
// and a raft.StableStore; give the same Store to raft.NewRaft for both.
//
// # Contract
//
//   - Durability: unless Options.NoSync, every write (StoreLog, StoreLogs,
//     DeleteRange, Set, SetUint64) is in pebble's WAL and fsynced before
//     it returns.
//   - Atomicity: StoreLogs writes all its entries in one pebble batch, one
//     WAL record and one fsync (raft's group commit); after a crash either
//     all of them are there or none. DeleteRange is one batch too.
//   - FirstIndex and LastIndex are the smallest and largest index on disk,
//     0 for an empty log, answered from memory. Indexes may have gaps
//     (raft leaves one after installing a snapshot); the Store does not
//     implement raft.MonotonicLogStore.
//   - A failed WAL write or fsync is fatal. Pebble v1.1 cannot tell what of
//     the batch reached the disk (and has already applied it in memory), so
//     it calls Logger.Fatalf; the logger raftstore gives pebble then panics
//     in the writing goroutine (pebble's own default exits the process).
//     The write is never acknowledged; restarting and reopening recovers
//     exactly what reached the disk.
//   - A prefix DeleteRange (raft trimming after a snapshot) compacts the
//     deleted span once 16384 entries (compactAfterDeletedLogs) have gone
//     since the last compaction, so range tombstones and the entries under
//     them do not pile up on disk. The compaction runs on the Store's one
//     background goroutine, so DeleteRange does not wait for it (raft
//     calls DeleteRange from its main loop when installing a snapshot);
//     requests made while one runs coalesce, and a failure is only logged.
//   - Open creates dir and fsyncs the parents of every directory it
//     creates, so a crash after the first Open cannot lose the store.
//   - Close waits for calls in flight; after it every method returns
//     ErrClosed. Close is idempotent.
//
// # Errors
//
//   - GetLog: raft.ErrLogNotFound when no entry has that index; an error
//     wrapping ErrCorrupt when the stored value does not decode or holds
//     another index.
//   - Get, GetUint64: ErrKeyNotFound, unwrapped, for a key never Set. Its
//     text is exactly "not found" because hashicorp/raft tests
//     err.Error() == "not found" (raft.go, api.go), as raft-boltdb's
//     ErrKeyNotFound reads; GetUint64 returns (0, ErrKeyNotFound) like
//     raft-boltdb. GetUint64 wraps ErrCorrupt when the value is not 8 bytes.
//   - Open: an error wrapping ErrCorrupt when a log key is malformed.
//   - StoreLogs, StoreLog: an error for index 0, which means "empty".
//   - Every method after Close: ErrClosed.
//   - Other pebble errors come back wrapped with "raftstore: <what>: ";
//     a failed WAL write or fsync does not return at all (see Contract).
//
// # Invariants
//
//   - firstIndex and lastIndex (the in-memory cache) equal the first and
//     last log key in pebble whenever Store.write is not held. They are
//     read from pebble on Open and changed only after the batch that
//     changes the keys commits, under Store.write, so concurrent StoreLogs
//     and DeleteRange cannot reorder cache updates against commits.
//   - Every key starts with a prefix byte naming its kind; nothing else is
//     stored.
//
// # On-disk format
//
// The directory is a pebble (v1.1) database; the options it is opened with
// (pebble.go) are tuning, not format. Keys, with their values:
//
//	log entry:   0x6C ('l') | index: 8 bytes, big-endian uint64
//	             value: the log entry encoding below
//	stable key:  0x73 ('s') | the StableStore key's bytes, as given
//	             value: the bytes given to Set, as given; SetUint64
//	             stores 8 bytes, big-endian (as raft-boltdb does)
//
// Big-endian indexes make pebble's byte order the index order, so the first
// and last log keys are the first and last index, and a span of indexes is
// a span of keys. The upper bound of all log keys is the single byte 0x6D
// ('m'); it closes ranges ending at index 2^64-1.
//
// A log entry value (raft.Log), format version 1, fields in this order:
//
//	version      1 byte     0x01
//	index        uvarint    raft.Log.Index, equal to the key's index
//	term         uvarint    raft.Log.Term
//	type         1 byte     raft.Log.Type (raft.LogType is a uint8)
//	data len     uvarint    n
//	data         n bytes    raft.Log.Data
//	ext len      uvarint    m
//	extensions   m bytes    raft.Log.Extensions
//	appended at  varint     raft.Log.AppendedAt as Unix nanoseconds,
//	                        zig-zag signed (encoding/binary.PutVarint);
//	                        0 stands for the zero time.Time
//
// uvarint and varint are encoding/binary's: 7 bits a byte, least
// significant group first, high bit set on every byte but the last, at
// most 10 bytes. The value ends after the appended-at varint; trailing
// bytes are corruption. Decoding returns empty Data and Extensions as nil
// and AppendedAt in UTC. A time of exactly the Unix epoch reads back as the
// zero time, and times outside 1678..2262 (UnixNano's range) cannot be
// stored; raft only stores "now".
//
// Decoding fails with an error wrapping ErrCorrupt on an unknown version, a
// truncated field, a varint longer than 64 bits, a length beyond the value's
// end, or trailing bytes; it never panics (FuzzDecodeLog). There is no
// per-record checksum: pebble checksums its WAL records and sstable blocks.
// A new layout must take a new version byte and keep decoding version 1.
package raftstore
