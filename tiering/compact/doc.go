// Package compact is the pure core of log compaction (cleanup.policy =
// compact; DESIGN.md §7, docs reference tiering.md §4.11): deciding when
// a partition needs it (Decide), indexing the dirty range into a bounded
// key map (OffsetMap, Plan) and rewriting stored batches into their
// compacted form (Rewrite, CompactBatches). It does no I/O and reads no
// clock: batches come in as bytes, the time as Options.NowMs. The broker
// wires it (see "Wiring").
//
// # A pass
//
//  1. Decide(segments, cleanedOffset, tombstoneHorizon, now, policy)
//     says whether to run and returns CleanableEnd, the first offset that
//     may not be compacted yet (open segment or min.compaction.lag.ms).
//     It runs for dirty data (ratio or max lag) or, with nothing dirty
//     enough, once now reaches tombstoneHorizon: the earliest delete
//     horizon of the tombstones the last pass kept (C11).
//  2. Plan(map, dirty batches from cleanedOffset, CleanableEnd) fills the
//     map with key -> latest offset and returns IndexedEnd (< CleanableEnd
//     when the map filled up).
//  3. CompactBatches (Rewrite per batch) over every batch in
//     [log start, IndexedEnd), with lastOfProducer from the whole log.
//     With a Survivors that step 2 filled (Options.Survivors: Plan marks
//     keyless records and control batches, AddLatest the map's offsets),
//     a batch of the indexed range that holds none of its offsets is
//     dropped from its header alone, neither decompressed nor decoded;
//     the output is the same byte for byte.
//  4. The caller swaps the output in and stores IndexedEnd as the new
//     cleaned offset, and Stats.TombstoneHorizonMs as the tombstone
//     horizon; the next pass continues from there.
//
// # Invariants
//
//   - C1 Latest wins: a keyed record survives only if no record with the
//     same key (by 128-bit hash) has a higher offset in the indexed range;
//     a key not in the map (only possible below cleanedOffset) survives.
//   - C2 Keyless records always survive. (Kafka refuses them in compacted
//     topics at produce time; Strata keeps what it was given.)
//   - C3 A tombstone (keyed record with a null value) that survives
//     leaves the rewrite in a batch with a delete horizon: the horizon
//     already stamped, or NowMs + delete.retention.ms if none was.
//   - C4 A tombstone is dropped when NowMs >= its batch's horizon, never
//     before; a batch without a horizon never loses a latest tombstone.
//   - C5 Batch identity: an output batch has its input's base offset,
//     lastOffsetDelta (so it spans the same [base, last] and the
//     producer's last sequence survives), producer id, epoch, base
//     sequence, partition leader epoch and attributes (codec re-applied
//     as is; bit 6 per C3). A batch left with no record is dropped,
//     except the last batch of its producer id (>= 0) in the log, which
//     stays as an empty batch (RecordCount 0, codec none), as Kafka
//     keeps them for idempotence state.
//   - C6 Records keep their offsets, timestamps, keys, values and
//     headers; offsets only increase; every output batch passes
//     recordbatch.Verify and decodes.
//   - C7 Fail loudly: a batch that does not decode is an error, never
//     skipped (a skipped batch could resurrect keys it superseded).
//   - C8 Passes compose: Plan indexes whole batches only, so the map
//     describes exactly [first, IndexedEnd); several passes with a small
//     map give byte for byte what one pass with a large map gives
//     (TestTwoPassesEqualOne).
//   - C9 Only a prefix of closed segments whose newest record is at least
//     min.compaction.lag.ms old is ever cleanable; the open segment never
//     is (the takeover replay reads it).
//   - C10 A batch with nothing to drop and nothing to stamp is returned
//     as the input slice itself: callers can keep a segment with no
//     rewritten batch as is (no new object).
//   - C11 No tombstone outlives its horizon for want of new writes:
//     Stats.TombstoneHorizonMs is the earliest horizon among the
//     tombstones a pass kept, and Decide runs a pass
//     (ReasonTombstonesExpired) once the clock reaches it, with no dirty
//     byte if need be, as Kafka's cleaner does. Such a pass covers the
//     whole clean section (Decide waits while min.compaction.lag.ms holds
//     part of it back), so the horizon it reports is again the earliest
//     left; 0 (none kept) stops further passes.
//
// # Delete horizon encoding (KIP-534)
//
// Decision: exactly Kafka's. Attribute bit 6 (0x40) set means the batch's
// baseTimestamp field holds the delete horizon (ms), and every record's
// timestampDelta is re-based on it: delta = timestamp - horizon, negative
// since the horizon lies in the future. Any decoder computing
// baseTimestamp + delta (recordbatch.Decode, Kafka clients) thus reads the
// original record timestamps; nothing may assume baseTimestamp is the
// first record's time. maxTimestamp is the max of the surviving records
// (LogAppendTime batches keep theirs, which is every record's timestamp).
// Without bit 6, a rewritten batch's baseTimestamp is its first surviving
// record's timestamp, as Kafka's MemoryRecordsBuilder writes it. A
// rewritten batch keeps bit 6 only while it holds a tombstone. The
// alternative — keep baseTimestamp and store the horizon elsewhere — would
// need a format Kafka clients do not know.
//
// # Key map capacity
//
// OffsetMap stores a 128-bit hash of the key (two maphash sums under
// random per-map seeds) and an offset: 24 bytes a slot, open addressing
// with linear probing, at most 80% of the slots used. That is KeysPerMiB = 34,952 keys per MiB of budget: 128 MiB
// (Kafka's default dedupe buffer) holds about 4.47 million keys. Two
// keys colliding on 128 bits make the older key's latest record look
// superseded (dropped); for n keys the odds are about n²/2^129 — the
// risk Kafka (MD5) and Redpanda (SHA-256) accept. The seeds are secret
// and random per map, so keys cannot be chosen to collide.
//
// # Numbers (2-core AMD EPYC, go test -bench, 200 batches x 100 records)
//
//	Rewrite, uncompressed input   ~660 MB/s of input (about half the records superseded)
//	Rewrite, lz4 input            ~110 MB/s of (compressed) input
//	Plan, uncompressed            ~1,280 MB/s (860 with SHA-256 key hashes)
//	OffsetMap Put / Get           ~70-100 ns (16 MiB map at its load limit; a cache miss dominates; 220 ns with SHA-256)
//
// BenchmarkRewriteCycled, the shape of `strata bench suite`'s compaction
// sources (128 batches of 1,000 1 KiB records, keys cycling over 2,000:
// only the last two batches hold a latest record), 2026-12-04:
//
//	Rewrite, every batch decoded  ~4,000 MB/s of input (33 ms for 133 MB; 1,800 MB/s on a busy hour)
//	Rewrite with Survivors        0.17 ms for the same 133 MB (126 of 128 batches dropped by header)
//
// # Errors
//
//	Plan     ErrMapTooSmall, ErrOrder, recordbatch decode errors
//	Rewrite  recordbatch decode and encode errors
//
// # Wiring (broker/partlog P7, broker/compactor.go)
//
// Done: compaction.Compact (broker/partlog/compaction) reads closed ledgers into Plan and Rewrite
// (streaming, one batch at a time; the batches it kept in memory between
// the two are rewritten with the Survivors its Plan calls filled),
// writes new closed ledgers (one batch per entry, index written), aligns
// IndexedEnd down to a ledger boundary,
// keeps the range's last batch (empty if need be) so that no offset below
// the high watermark is left without a batch after it, and swaps the
// outputs in with one fenced CAS that stores cleaned_offset and the
// tombstone horizon (C11), re-validated
// against retention and tiering; the broker runs one pass at a time with
// one OffsetMap (--compaction-map-bytes), every
// --compaction-check-interval. __consumer_offsets is compacted. Segment
// objects in the pass's range are read from the store and rewritten into
// new compacted objects (grouped up to the tier segment size, verified
// as uploads are), swapped in by the same CAS, the replaced objects
// queued for deletion in it; an output whose last batch went ends with
// EndBatch (an empty batch at the group's last offset), because a
// segment object's last offset is its last batch's.
//
// Left:
//
//   - lastOfProducer is computed over the pass's range, not the whole log
//     (conservative: a producer's last batch in the range stays empty even
//     when it has later batches; the next pass drops it).
//   - Producer-side rule (refuse keyless records in compacted topics) if
//     wanted; control batches and transactions (passed through today).
package compact
