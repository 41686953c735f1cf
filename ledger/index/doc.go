// Package index is the bookie's Pebble index over the journal: where each
// ledger entry is, each ledger's state, per-file accounting for garbage
// collection, and the checkpoint that says how much of the journal the index
// reflects.
//
// # Contract
//
//   - The index is derived data. Batches are committed unsynced
//     (pebble.NoSync); only SetCheckpoint (and Commit(true)) syncs. Pebble
//     writes its WAL in commit order, so a synced write makes every earlier
//     write durable too: after a crash the index holds some prefix of the
//     committed batches, at least up to the last synced checkpoint, and
//     the owner replays the journal from that checkpoint.
//   - Batch operations are idempotent under replay: applying a journal
//     record the index already reflects leaves the entries, the states and
//     the accounting unchanged (an Add of an entry already at that location
//     subtracts and adds the same bytes), and applying records in journal
//     order from any committed prefix converges to the same state (a
//     tombstone's deletion time excepted: it is the time passed to the
//     Delete that made it, so a replay that must re-add the ledger's
//     entries first makes it later).
//   - One Batch at a time (NewBatch blocks); reads run concurrently with it
//     and see committed batches only.
//   - The index stores what it is told: an Add replaces an existing entry,
//     and LACs only rise. Refusing an overwrite with different bytes and
//     bounding a LAC by the entries held are the storage engine's rules
//     (package storage, "Hostile and buggy writers"), decided before a
//     record reaches the index so that replay repeats them exactly.
//
// # Invariants
//
//  1. Usage: for every (file, ledger), the 'f' key holds the sum of the
//     lengths, and the count, of the ledger's entry keys whose location is
//     in that file; absent means zero. Each batch changes entries and usage
//     together, so every committed prefix keeps this. A negative usage is
//     a broken invariant: the batch fails with ErrCorrupt rather than ever
//     under-counting (an under-count would let GC remove a live file).
//  2. A ledger has entry keys only if it has a state key, and LastEntryID
//     is at least every stored entry id, so an Add above LastEntryID needs
//     no read to know it replaces nothing.
//  3. Delete is one DeleteRange over the ledger's entry keys (never one
//     tombstone per entry: Pulsar #1737), a delete of its usage keys (they
//     name the files, so no entry is read) and of its state key, unless
//     the ledger is fenced (invariant 4).
//  4. Fenced tombstone: Delete of a fenced ledger keeps its state key as a
//     tombstone: fenced, LAC -1, last entry -1, no entry or usage key, and
//     the deletion time given to Delete. The storage engine refuses writer
//     adds to it, so a writer fenced out before the delete stays out after
//     it (package storage, F1). Fence, SetLAC and Delete leave a tombstone
//     a tombstone (Delete keeps its first deletion time); Add makes it a
//     fenced ledger with entries again (a recovery add). Only
//     ExpireTombstone removes one. Cost: a 9-byte key and a 26-byte value
//     per tombstone, for fenced ledgers only; Ledgers lists them.
//
// # Keys and values
//
// Every key starts with a kind byte; integers are big-endian so Pebble's
// bytewise order is numeric order (a ledger's entries are contiguous and
// ascending).
//
// Entry, 17-byte key → 20-byte value:
//
//	key:   0      1    'e' (0x65)
//	       1      8    ledger id, uint64
//	       9      8    entry id, uint64 (≤ 2^63-1)
//	value: 0      8    journal file sequence number, uint64
//	       8      8    offset of the record in the file, uint64
//	       16     4    length of the record, header included, uint32
//
// A ledger's entry keys span ['e' ‖ ledger ‖ 0, 'e' ‖ ledger ‖ 2^64-1 ‖ 0x00);
// the trailing zero byte makes the bound work for ledger 2^64-1.
//
// Ledger state, 9-byte key → 18-byte value (26 bytes for a tombstone):
//
//	key:   0      1    'l' (0x6c)
//	       1      8    ledger id, uint64
//	value: 0      1    state format version = 1
//	       1      1    flags: bit 0 fenced; bit 1 tombstone (invariant 4),
//	                   only with bit 0; other bits 0
//	       2      8    LAC, int64 two's complement (-1: none)
//	       10     8    last entry id, int64 two's complement (-1: none)
//	       18     8    tombstone only: when the ledger was deleted, Unix
//	                   milliseconds, int64
//
// Builds older than the tombstone refuse a tombstone value (ErrCorrupt):
// opening an index that holds one with such a build fails rather than
// forgets a fence.
//
// File usage, 17-byte key → 16-byte value (absent when zero):
//
//	key:   0      1    'f' (0x66)
//	       1      8    journal file sequence number, uint64
//	       9      8    ledger id, uint64
//	value: 0      8    live bytes, uint64 (> 0)
//	       8      8    live entries, uint64 (> 0)
//
// Meta keys: 'm' (0x6d) followed by an ASCII name:
//
//	"mversion"     4 bytes: index format version, uint32 = 1. Written when
//	               the index is created; Open refuses another version.
//	"mcheckpoint"  16 bytes: journal file sequence number, uint64, then
//	               offset, uint64: every journal record before this
//	               position is reflected in the index. Absent in a new (or
//	               lost) index.
//	"mlimbo"       12 bytes: when limbo began, Unix milliseconds, int64,
//	               then the number of corrupt journal ranges found, uint32.
//	               Present while the bookie is in limbo (BookKeeper BP-46).
//
// # Errors
//
//   - Open: a missing Dir, Pebble errors, a format version this build does
//     not read, ErrCorrupt for a malformed usage key or value.
//   - Get, State, Ledgers, Entries, Checkpoint, Limbo: ErrClosed, Pebble
//     errors, ErrCorrupt for a malformed key or value.
//   - Batch.Add, Relocate, SetLAC: ErrInvalid for values the format
//     cannot hold (entry id > 2^63-1, LAC < -1, an impossible location).
//   - Batch.Lookup, Delete, ExpireTombstone: Pebble errors, ErrCorrupt for
//     a malformed value.
//   - Batch.Commit: ErrCorrupt when the accounting would go negative,
//     Pebble errors; on error nothing of the batch is applied.
//   - NewBatch, SetCheckpoint, ClearLimbo: ErrClosed, Pebble errors.
//   - Close: ErrClosed if already closed.
package index
