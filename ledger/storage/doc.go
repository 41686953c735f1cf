// Package storage is the bookie's storage engine: ledger entries live in
// the journal (package journal), the Pebble index (package index) says
// where each one is and keeps each ledger's state. It serves every call of
// the bookie's gRPC API (proto/bookie/v1): adds, reads, range reads, fences,
// explicit and long-polled LACs, deletes and the bookie's disk state; and it
// lists the ledgers it holds (Ledgers) for the bookie's orphan sweep.
//
// The storage node is the part of Strata that must never lie: an
// acknowledged add is durable, an acknowledged fence holds, and "no such
// entry" is said only when it is true.
//
// # Contract
//
//   - Add acknowledges (done(nil)) only after the record and everything
//     before it are fdatasynced and applied to the index; acknowledgements
//     come in journal order. A Read after done sees the entry.
//   - Fence, WriteLAC and Delete return after their record is durable and
//     applied. Fence's effect on adds is immediate: the fence check and the
//     journal append of an add are one step under the ledger's stripe lock,
//     so an add accepted before Fence is journaled (and counted in Fence's
//     result) before the fence record, and an add after it is refused. A
//     fence outlives a delete of the ledger (F1, below).
//   - Read answers ErrNoEntry only when the bookie can vouch it never had
//     the entry; ErrUnknown when it may have (limbo; an index entry whose
//     journal file is gone); ErrCorrupt when stored bytes fail their
//     checksums (never served, counted in strata_bookie_corruptions_total).
//   - Any write or sync error of the journal, and any index write or sync
//     error, is fatal: OnFatal runs once, nothing more is acknowledged, and
//     every later write fails with ErrFailed. Nothing is retried (fsyncgate).
//   - Near a full disk (ReadOnlyAbove) adds fail with ErrReadOnly until
//     usage falls to WritableBelow; reads, fences, LACs, deletes and GC go
//     on. OnStateChange hooks hear of each change.
//   - An entry, once stored, keeps its bytes; a LAC never passes the
//     highest entry held, nor the highest one verified (next section).
//
// # Hostile and buggy writers
//
// Without TLS the bookie API has no authentication, and with it any
// broker or bookie certificate may write (docs/security.md); the recovery
// flag of an add is the client's word. Three rules bound what a
// buggy or hostile client can do to data other writers stored:
//
//   - C2 Immutable entries. An add of an entry the ledger already holds
//     (applied, or queued ahead of it) is applied only if its payload is
//     byte for byte the stored one: a recovery add or a writer's retry
//     rewrites what was written, so it succeeds and only moves the entry;
//     anything else completes with ErrEntryConflict (not retryable),
//     leaves the stored entry and the ledger's state untouched, and counts
//     in strata_bookie_entry_overwrites_refused_total (logged at most
//     once per 10s). The decision is taken where records are applied, in
//     journal order, so two racing adds of one entry are decided in the
//     order they were journaled, and replay decides every record again the
//     same way (the refused record stays in the journal but is never
//     indexed, so GC reclaims it).
//
//     The comparison reads the stored copy from the journal instead of
//     keeping a checksum in the index: it is exact (a CRC is forged in
//     microseconds, so a digest would have to be cryptographic and
//     computed on every add), it costs nothing on the hot path (only an
//     add of an entry already held reads anything, and those are rare:
//     recoveries and retries), and it needs no change of the index
//     format. If the stored copy cannot be read because it is corrupt or
//     its journal file is gone, the add replaces it (a repair: nothing
//     could be served anyway); another read error fails the add with that
//     error and keeps the stored entry.
//
//     Limits: a ledger id this bookie holds nothing of (and no fenced
//     tombstone, F1) accepts any entry (the orphan sweep of package bookie
//     collects ledgers metad does not know). An index rebuilt from a journal that GC has trimmed (see
//     Recovery) keeps the first copy of an entry that it finds, which may
//     be a refused one if the original's file is gone.
//
//   - H1 Bounded LAC. A LAC, explicit (WriteLAC) or piggybacked on an
//     add, is lowered to the highest entry id the ledger holds, counting
//     adds journaled ahead of it (-1 when there is none); a piggybacked
//     one also below the entry that carries it. Both are counted in
//     strata_bookie_lac_clamped_total. A writer's LAC never needs more: it
//     piggybacks LAC < entry (the entry it sends is not acknowledged
//     yet), and an explicit LAC goes to bookies that were sent every entry
//     up to it (readers take the highest LAC of the ensemble, so a lagging
//     bookie's lower LAC costs nothing). Recovery starts reading after the
//     highest LAC reported, and one inflated LAC on one bookie made it
//     demand entries nobody has (ledger/recovery_machine.go R10 now
//     notices). The lowered value is what the journal records, so replay
//     restores it exactly. LACs stored before this rule are kept as they
//     were.
//
//   - H2 Verified LAC. H1 alone still lets one add of entry N carrying
//     LAC N-1 (or two adds) raise the LAC to N. So a LAC is also lowered
//     to the highest entry whose add Options.Verify vouched for (the
//     bookie checks the entry's digest against its ledger's key, V1 in
//     ledger/doc.go), counting the add that carries it, and counted in
//     strata_bookie_lac_unverified_total. A writer's own adds are
//     vouched for once the bookie knows the ledger's key, so its LAC
//     lags only while the key is being looked up: recovery then starts
//     lower, which is always safe (R4). Which entries were vouched for is
//     not journaled: after Open the ledger's kept LAC stands for them,
//     and the writer's next add vouches again. An explicit LAC naming an
//     entry held but not vouched for (an idle writer's, after its last
//     adds arrived before the key, or after a restart) reads that entry
//     back and asks Verify again. The check runs outside every lock, once
//     per add.
//
// # Fences outlive deletes
//
// A new owner fences a ledger on a quorum of bookies (recovery), closes it,
// and the ledger may then be deleted (retention, compaction, an empty
// recovered ledger). The old owner, a zombie that has not noticed, may
// still hold a writer on it: if the delete also forgot the fence, its adds
// would be accepted again and acknowledged for a ledger nobody references,
// an acknowledged record lost.
//
//   - F1 Fenced tombstone. Delete of a ledger that is fenced (in the index,
//     or in memory with a fence record in flight or whose append failed)
//     removes its entries and usage as for any ledger, and keeps its state
//     as a fenced tombstone (package index, invariant 4): non-recovery
//     adds get ErrFenced; recovery adds (a recovering writer,
//     re-replication) are accepted as on any fenced ledger and make it a
//     fenced ledger with entries again. Otherwise a tombstone answers like
//     a deleted ledger: State false (with Fenced true), Read ErrNoEntry,
//     and Ledgers does not list it, so the orphan sweep of package bookie
//     does not delete it again; deleting it again changes nothing. Replay
//     rebuilds it: the fence record precedes the delete in the journal. A
//     delete of a ledger that was never fenced removes its state, as
//     before: its id takes any add.
//   - F2 Bounded tombstones. Only fenced ledgers leave one: ledgers a new
//     owner recovered, and every ledger known, or deleted in the journal
//     replayed, on entering limbo or on an index rebuild (their fence
//     records may be lost, the delete kept). Each costs a 9-byte key and a 26-byte value in the
//     index (plus Pebble's per-key overhead) and about 120 bytes of
//     memory, counted in strata_bookie_fence_tombstones. GC forgets the
//     tombstones deleted at least FenceTombstoneTTL ago (default 7 days;
//     negative: never), long after any zombie writer's session has
//     expired; the ledger is then unknown here, fence included. The
//     removal is not journaled: a crash that loses it brings the tombstone
//     back, to expire again. The deletion time is when the delete was
//     applied; the journal does not record it, so a replay of the delete
//     counts from the replay (only later).
//
// Limit: an index lost after GC trimmed the journal (Recovery, below) loses
// the tombstones whose delete records were in removed files: those ledgers
// are unknown here, not fenced.
//
// # Structure
//
// Storage is the write path's first half (admit a record under its
// ledger's stripe, append it to the journal), the read path, the ledgers'
// in-memory states and the checkpoint. Beside it, each with its own state
// and lock:
//
//   - applier (apply.go): the write path's second half, one goroutine
//     applying journaled records to the index in journal order and
//     acknowledging them.
//   - collector (gc.go): GC: tombstone expiry, removal of dead journal
//     files, compaction; one run at a time.
//   - diskGuard (disk.go): read-only near a full disk, the add budget
//     between disk checks, the disk state hooks.
//   - recovery (recover.go): Open's replay of the journal into the index,
//     limbo and a lost index.
//
// # Write path
//
// A call admits its record under the ledger's stripe lock (fence check,
// queued-record bookkeeping) and appends it to the journal, which group
// commits. The journal's done callback hands the record to the applier
// goroutine, which applies everything available in journal order in one
// unsynced index batch, updates the in-memory ledger states, wakes long
// polls, records the applied position and then acknowledges. Records in
// flight are bounded (twice the journal's queue bound): callers wait
// (honouring ctx) rather than buffer without limit.
//
// # Recovery
//
// The index is rebuildable: batches are unsynced, and a checkpoint — the
// journal position up to which everything is applied — is synced every
// CheckpointInterval (Pebble's WAL order makes every earlier batch durable
// with it). Open replays the journal from the checkpoint, re-applying adds,
// fences, LACs and deletes in journal order (a delete after adds wins: no
// resurrection; a delete after a fence leaves the fenced tombstone, F1),
// then syncs a checkpoint at the end of the journal before serving. Re-applying a record the index already holds changes nothing
// (see package index).
//
// Limbo (BookKeeper BP-46): if replay reports corrupt ranges — synced
// records, maybe acknowledged, now unreadable — the bookie cannot know what
// it lost. In one synced batch it records a persistent limbo flag and fences
// every ledger it knows (a lost fence record would otherwise let a zombie
// writer reach its ack quorum); a ledger the replayed journal deleted keeps
// a fenced tombstone (F1), since its fence record may be among the lost. While in limbo every missing entry, of any
// ledger, is ErrUnknown. ClearLimbo is for an operator who has re-replicated.
//
// A lost index: with no checkpoint in the index, replay starts at the
// oldest journal file. If GC has never removed a journal file, that
// rebuilds the index exactly. If it has (the JOURNAL-TRIMMED marker exists),
// fence and delete records may be gone with the removed files, so every
// ledger found is fenced (BookKeeper #2774), every ledger found deleted
// keeps a fenced tombstone, and entries of deleted ledgers
// that remain in kept files reappear (they are not served to anyone who
// does not ask, and a later delete removes them again).
//
// # Garbage collection
//
// GC (every GCInterval, after each Delete, or on demand) first forgets the
// fenced tombstones older than FenceTombstoneTTL (F2). It considers only
// journal files entirely before the synced checkpoint and not being
// written: replay never reads them again. A file whose live bytes (per the
// index's accounting) are zero is removed. A file whose live bytes are
// below CompactBelowLiveRatio of its size (minor compaction, every run) is
// compacted, and below MajorCompactBelowLiveRatio in a major run (once
// per MajorCompactInterval, or every run on a disk used at or above
// MajorCompactAboveUsed): each live entry is
// read (verified), re-appended through the journal as a recovery add with
// its original LAC, and the index is pointed at the copy only if it still
// points at the original (the copies of a run go at most
// CompactMaxBytesPerSecond, on average: they share the journal with
// acknowledged writes); then a checkpoint is synced and, if the file's
// live bytes reached zero, it is removed. A copy is never journaled after
// a queued delete of its ledger or a queued rewrite of one of its entries
// (either would be undone by replay); such entries are skipped until a
// later run. Compaction is skipped for a file larger than the free space
// less one journal file's reservation (a rotation that cannot reserve its
// file is fatal). Every removal, of a dead file or a compacted one, goes
// at most RemoveMaxBytesPerSecond, each file on a pacer of its own (not
// on a disk used at or above MajorCompactAboveUsed): the journal cuts the
// file down in synced steps spaced out to that rate, so that the discards
// of three bookies removing the same files do not stall every fdatasync.
// An error stops the run without removing anything on its account; a file
// with a corrupt live entry is kept, reported and set aside.
//
// # Invariants
//
//  1. Acknowledged ⇒ durable in the journal and applied to the index.
//  2. Journal order is apply order is acknowledgement order.
//  3. The synced checkpoint never passes a record whose index batch is not
//     committed, so replay from it loses nothing.
//  4. No journal file at or after the synced checkpoint, nor the file being
//     written, is removed; no file is removed while the index counts a live
//     entry in it.
//  5. Limbo, once entered, is persistent and durable before the checkpoint
//     moves past the corruption.
//
// # Lock order
//
// A goroutine holding a lock on the left may take one on its right, never
// the reverse:
//
//	closeMu (read: calls that queue records, GC) → gc.mu → cpMu
//	  → stripes[ledger % ledgerStripes] → mu
//	disk.checkMu → mu, disk.mu
//
// applier.mu (the applier's queue), disk.mu and the log limiter's mutex
// are leaves: nothing else is taken while one is held. A stripe is held across the
// journal append of a record (the fence check and the append are one
// step), so nothing that waits for the applier may run under a stripe.
// Tombstone expiry (F2) holds one stripe while it opens and commits an
// index batch: that waits for the applier's batch in progress, which
// takes no stripe, never for a record.
//
// # On disk
//
//	Dir/journal/%016x.journal  journal files (format: package journal)
//	Dir/index/                 Pebble index (key layout: package index)
//	Dir/JOURNAL-TRIMMED        created (and synced, with Dir) before GC
//	                           first removes a journal file; a short text
//	                           line, only its existence matters
//
// # Errors
//
//   - Open: Options errors; journal and index open errors; ErrCorrupt if
//     the index's checkpoint names a journal file that is missing (a
//     journal that does not belong with the index); replay I/O errors;
//     ctx's error.
//   - Add: ErrInvalid, ErrFenced, ErrReadOnly, ErrClosed, ErrFailed, ctx's;
//     then done(nil), done(ErrEntryConflict), done(ErrFailed), or
//     done(ErrClosed or an I/O error) when the stored copy of the entry
//     could not be read for the comparison (the stored entry is kept).
//   - Fence, WriteLAC, Delete: ErrInvalid (WriteLAC), ErrClosed,
//     ErrFailed, ctx's (outcome unknown).
//   - Read, ReadRange: ErrNoEntry, ErrUnknown, ErrCorrupt, ErrInvalid
//     (ReadRange with last < first), ErrClosed, ErrIO (the disk failed
//     the read; counted in strata_bookie_read_errors_total); ReadRange
//     also fn's error.
//   - WaitLAC: ctx's (with the current state), ErrClosed.
//   - State, Ledgers: none (memory only).
//   - GC: ErrClosed, ErrFailed, ctx's, I/O errors.
//   - Close: journal or index close errors; ErrClosed if called again.
package storage
