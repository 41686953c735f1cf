// Package partlog is a partition's log on the broker that owns it: an
// ordered list of ledgers (segments) kept in metad, written through one
// ledger.Writer at a time (DESIGN.md §5).
//
// # State in metad
//
//	/strata/partitions/<topic>/<partition>   brokerpb.PartitionLog, every
//	                                          change a CAS on the key version
//	/strata/ledger-index/<20-digit ledger id> brokerpb.LedgerIndex of a
//	                                          closed segment
//
// Only the last segment of a PartitionLog may be open. Every segment
// records its first and last offset (last = first-1 while empty), last
// entry id, bytes and max timestamp; an open segment's numbers are those of
// its creation (the live numbers are in memory: Describe).
//
// # Entries
//
// One ledger entry is one Kafka record batch v2 (recordbatch),
// byte for byte as the producer sent it, except two fields outside the
// CRC that the owner stamps: the base offset (bytes 0..8) and the
// partition leader epoch = the owner epoch (bytes 12..16). Offsets
// increase: entry e+1's base offset is above entry e's last offset. They
// are dense (entry e's last offset + 1) as written, in the open segment
// and in every segment compaction did not rewrite; a compacted segment
// has holes (P7). Segments stay contiguous over offsets whatever their
// entries: a segment's first offset is the previous one's last + 1, so
// the list still says which ledger an offset belongs to, and a fetch at
// a removed offset returns the next batch after it.
//
// # Invariants
//
//   - P1 One writer: a Log appends only to a ledger it created; taking
//     over fences (ledger.Recover) every segment not closed in the list
//     (the last two are considered) before it creates one (P8).
//   - P2 Visibility: Fetch and ListOffset never return data at or above
//     the high watermark (HW = last offset + 1 of the highest entry
//     acknowledged at the ack quorum, in order). Produce acks (one, all)
//     change when a producer hears back, never what consumers see.
//   - P3 Lost CAS or fenced ledger: the Log fails at once (Failed closes);
//     every pending append gets ErrUnknownOutcome (wrapping the cause:
//     it was handed to the ledger, and the new owner's recovery may keep
//     it), later ones get the cause (ErrFenced, ErrConflict: nothing
//     written), and nothing more is accepted. The broker must drop the
//     partition.
//   - P4 Roll: close the ledger, write its index, (for a roll by size)
//     create the next ledger, then ONE CAS; appends arriving meanwhile
//     wait. So at most one segment is open, and the list always names
//     every ledger holding acknowledged data. A roll happens only while the list, with its
//     producer table at its bound, still fits in a metad value with room
//     to spare (L1 in roll.go, 12,000 to 17,000 segments): past that the open
//     segment grows until retention shortens the list, and an append past
//     MaxSegmentEntries fails with ErrListFull.
//   - P5 Idempotence: per producer id the epoch and the last 5 batches
//     (sequence range -> offsets) are kept, for at most 2,000 producers
//     (a new one evicts the longest idle, so the snapshot always fits in
//     a metad value); a retried batch gets its original offsets. The state is snapshotted in the PartitionLog at
//     every CAS (as of the end of the last closed segment) and rebuilt on
//     takeover from that snapshot plus the recovered segments' batches.
//   - P6 Retention: only a prefix of closed segments is ever removed, by
//     one CAS that also moves log_start_offset to the first segment kept
//     (never past the open segment); the ledgers and indexes are deleted
//     after the CAS, so the list never names deleted data and a crash
//     between the two only leaves unlisted ledgers (swept by the
//     controller). log_start_offset never decreases.
//   - P7 Compaction (cleanup.policy compact): only sealed pieces are
//     rewritten (the open segment never: takeover replays it): segment
//     objects, then the closed segments no object covers (a ledger an
//     object covers is a local copy, skipped), whole pieces only, from
//     the first one up to the cleaned end (the map's indexed end aligned
//     down to a piece boundary). Outputs keep their inputs' offset
//     ranges: new objects (grouped up to the tier segment size, verified
//     as uploads are) for objects, new closed ledgers (one batch per
//     entry, index written) for ledgers; batches keep their offsets
//     (tiering/compact C1-C10). An output whose last batch went ends with
//     an empty batch at its last offset, so that every offset below the
//     high watermark has a batch at or after it (a consumer at a hole is
//     never stuck). ONE CAS replaces the inputs by the outputs, stores
//     cleaned_offset and the earliest delete horizon of the tombstones
//     the pass kept (tombstone_horizon_ms, kept across takeovers: a pass
//     runs once it passes, with nothing dirty if need be; compact C11)
//     and queues replaced objects for deletion, after
//     re-checking that the inputs are still listed, in order, and (for
//     ledgers) untiered, and that the policy still compacts (a topic
//     switched to delete mid-pass keeps its records); otherwise (ErrCompactionStale, or a lost CAS)
//     the outputs are deleted or left to the orphan sweeps. Inputs are
//     deleted after the CAS, like retention's (P6). An upload commits only
//     if its ledgers are still listed (a pass may have replaced them). The
//     producer state is unaffected: it is snapshotted in the list (P5)
//     and compaction keeps each producer's last batch (C5).
//   - P8 Ledgers only while written: a log has an open segment (and a
//     ledger on the bookies) only once it is written to. Taking over
//     creates none, and a roll for age, idleness or compaction lag leaves
//     none; the next append creates one and lists it open by ONE CAS
//     before it is handed to it (a failed CAS fails the log, P3; a ledger
//     that cannot be created fails only that append, ErrNoLedger). So an
//     idle partition holds no ledger, and its next takeover fences and
//     recovers nothing. A log has a goroutine (run) only while it has an
//     open segment, so an idle one, written or not, has none.
//   - P9 Appends it cannot acknowledge are refused: while the open
//     ledger's writer lacks an ack quorum of bookies that take writes
//     (ledger.Writer.CanAcknowledge: the others failed and none could
//     replace them), an append fails with ErrNotEnoughBookies before it
//     is handed to the writer, so its outcome is known (not written)
//     instead of unknown at its deadline. Appends already handed over
//     stay with the writer, which writes them if the bookies come back;
//     their callers are answered as soon as the writer stalls
//     (ledger.Writer.Stalled: its attempt to replace the bookies found no
//     spare) with ErrNotEnoughBookiesAfterAppend, an unknown outcome,
//     rather than at their deadline. Rolls wait while the writer cannot
//     acknowledge (sealing would wait for its entries), and an append
//     waiting behind a roll whose writer stalls is refused with
//     ErrNotEnoughBookies.
//   - P10 Leader epochs: each takeover's CAS (Open) appends its owner
//     epoch and the first offset it will write to the list's
//     leader_epochs (withLeaderEpoch): epochs and start offsets increase,
//     an epoch that wrote nothing is replaced by the next, entries wholly
//     below the log start and beyond the newest 256 are dropped. EpochEnd
//     answers Kafka's OffsetForLeaderEpoch from it: an offset never past
//     what a consumer of the requested epoch can have read, so no client
//     sees a truncation (Strata truncates nothing it acknowledged).
//   - P11 Snapshots are values: the stored list (Snapshot.List) is never
//     modified, by the log or by anyone; every change of the list makes a
//     new one (a roll, a takeover, a Swap) and replaces the log's whole.
//     A pass may keep a snapshot as long as it likes and decide over it
//     without a lock; it changes a copy (Snapshot.Edit).
//   - P12 The passes' one write: a pass (tiering, retention, compaction)
//     changes the list only by Swap(base, next), which the log applies
//     under its own discipline, holding appendSem like a roll (so it is
//     serialized with rolls, appends' ledger openings and Close), and only
//     if the list is still the one base was taken from: otherwise it
//     writes nothing and returns ErrListMoved. A swap is ONE CAS at the
//     list's version; a lost CAS fails the log like any other (P3).
//     Update takes the snapshot, runs the pass's pure edit and swaps, all
//     holding appendSem, so the list cannot move in between: a pass's
//     change is always decided over the list it replaces, a busy
//     partition's rolls never starve it, and a roll is never lost to a
//     pass (nor a pass's change to a roll). What the change
//     unlinked the pass deletes after it (DeleteUnlisted, P6).
//
// # Concurrency
//
// One mutex (Log.mu) guards the state; it is never held across a metad or
// bookie call. Appends are serialized in offset order by a one-slot
// semaphore (appendSem) held while an append is handed to the ledger
// writer (which may block on back-pressure) and for the whole of a roll,
// a Swap or Close: every CAS of the list holds it, so the list's version
// has one writer. Writer callbacks take only Log.mu. One goroutine per Log
// (roller.run) rolls segments while one is open: size rolls at once
// (roller.poke), age, idle and compaction-lag rolls on one timer set to
// the nearest deadline; it ends when a roll leaves no open segment, and
// the next append starts it again.
//
// # Passes
//
// The background work on a log is not the Log's: packages beside this one
// drive it through the seam of P11 and P12 (Snapshot, Swap, Update,
// DeleteUnlisted, RunPass), as pebble keeps compaction picking apart from
// its DB:
//
//	tierpass     uploads closed ledgers to segment objects, deletes local
//	             copies and garbage objects, sweeps orphans (T1-T10)
//	retention    removes the prefix the policy no longer keeps (P6)
//	compaction   rewrites sealed pieces, keeping the latest record per
//	             key (P7): plan, read, rewrite, swap
//
// Retention and tiering are run by the owner over all of its logs, a few
// at a time, as passes of each log (RunPass): Close waits for them, and a
// closing or failed log runs none. Compaction is run by the broker's one
// compactor, one pass at a time; it reads and writes ledgers and objects
// holding no lock of the log's and takes appendSem only for its swap.
package partlog
