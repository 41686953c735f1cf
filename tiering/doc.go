// Package tiering is Strata's tiered storage: it copies the batches of
// closed ledgers into immutable segment objects in an object store, so
// that bookies keep only recent data while consumers can still read from
// the log start; and, on top of the two tiers, retention and compaction
// (DESIGN.md §7).
//
// # What exists and what is to come
//
// Built so far:
//
//   - tiering/objstore: the object-store interface (Store) and its
//     implementations: s3, localdir (one machine), memstore (tests, with
//     fault hooks), plus a conformance suite.
//   - tiering/segfile: the segment object format STRATSEG (writer, tail
//     parser, offset and time lookups, batch iterator, full verification;
//     version 2 authenticated with the cluster's tier key).
//   - this package: the read path (Reader, below).
//   - tiering/diskcache: the read path's bounded on-disk chunk cache.
//   - tiering/scrub: checks every committed object against its record.
//   - tiering/compact: the pure core of compaction (key map, batch
//     rewrite, delete horizons, when to compact);
//     broker/partlog/compaction and broker/compactor.go run the passes.
//   - broker/partlog/tierpass and broker/partlog/retention: the upload machine (pick a
//     run, stream, verify, commit by the PartitionLog CAS), deletion of
//     bookie copies after local.retention.ms, the orphan-object sweep, and
//     retention over both tiers. The committed objects are listed in the
//     PartitionLog (field tiered), so every commit is fenced by the list's
//     version (T7) without separate intent records: an upload that never
//     commits leaves an object only the orphan sweep sees (by age, under
//     the partition's own prefix).
//
// To come: repair of a damaged object, and rebuilding partition lists from
// the bucket without metad. See docs/tiering.md and docs/operations.md.
//
// # Model
//
// A partition's log is, in offset order: LIVE segment objects covering
// [log_start_offset, tiered_end_offset), then the ledgers of its
// PartitionLog (broker/partlog), the last of which may be open. A segment
// object holds one run of consecutive closed ledgers (or a compaction
// output), byte for byte as stored. Object keys are
//
//	<prefix>/strata/<cluster-id>/t/<topic-id>/<partition>/<base:020d>-<last:020d>-<uid16>.seg
//
// with the topic's random id (never its name, so delete and recreate
// cannot collide), zero-padded offsets (key order = offset order) and 64
// random bits per upload attempt. An object is LIVE while the
// PartitionLog's tiered list names it (a TieredSegment record); once
// retention unlinks it, it is queued in the list's garbage until deleted;
// an upload that never committed is deleted at once or, if the process
// dies first, by the orphan sweep.
//
// # Invariants
//
//   - T1 Single source of truth. A byte of tiered data is readable iff a
//     LIVE TieredSegment record in metad (the PartitionLog's tiered list)
//     names its object. Object
//     listings and footers never decide readability; they serve only the
//     sweeper, scrub and recovery.
//   - T2 Immutability and uniqueness. An object key is written at most
//     once (unique upload id per attempt) and an object is never
//     modified; compaction writes new keys. (objstore.Store.Put never
//     overwrites; segfile has no update path.)
//   - T3 Coverage and contiguity. A partition's LIVE segments have
//     pairwise disjoint offset ranges, sorted by base offset, and cover
//     [first LIVE base, tiered_end_offset) with no hole between segments
//     (a compacted segment may have holes inside). While tiering is
//     enabled and ledgers remain, tiered_end_offset >= the first listed
//     ledger's first offset: no offset is in neither tier.
//   - T4 Contiguous advance. An upload commit adds one segment whose base
//     offset equals tiered_end_offset and sets tiered_end_offset to its
//     last offset + 1. tiered_end_offset never decreases, except by an
//     operator's explicit repair that accepts data loss.
//   - T5 Prefix-only deletion. Retention removes only a prefix of the log;
//     log_start_offset never decreases and is advanced in the same CAS
//     that unlinks what it covers.
//   - T6 References before objects. An object is deleted only after the
//     CAS that removes its LIVE record, and that same CAS queues it in the
//     PartitionLog's garbage list (a durable queue in metad); it leaves the
//     queue only once the store confirmed the deletion, not before the
//     delete delay (the orphan sweep leaves queued objects alone). An
//     object never committed (an upload cut short) is deleted at once,
//     and by the orphan sweep once older than its grace if that fails.
//   - T7 Fencing. Every tiering, retention and compaction commit is a CAS
//     on the PartitionLog version held by the owner; losing
//     the compare drops the partition (partlog P3). A zombie owner can
//     leave only orphan objects, never metadata.
//   - T8 Never tier what you cannot verify. Only ledgers that are CLOSED
//     and listed in the PartitionLog are uploaded. The uploader checks
//     every batch's CRC-32C and offset continuity as it streams
//     (segfile.Writer refuses anything else), and a bookie copy is
//     deleted only after its covering object was read back and verified
//     (segfile.ReadTail / segfile.Verify against the committed summary).
//   - T9 Bucket identity. No destructive action (bookie ledger deletion,
//     GC, sweep) runs unless the bucket cookie matched metad's within the
//     last cookie check interval. Built in the broker (broker/tier.go):
//     the first broker writes the cookie to the store and records it in
//     metad (both create-only); deletions of local copies and the orphan
//     sweep ask for it first (partlog.Tier.CanDestroy), and a store that
//     lost it is never given a new one. Retention's deletions go by policy
//     and are not gated.
//   - T10 Fail closed. A LIVE segment whose object is missing or corrupt
//     yields an error to the fetch, never a silent skip (segfile reports
//     segfile.ErrCorrupt and never takes a short read for the end of the
//     data); skipping requires an operator action that advances
//     log_start_offset.
//   - T11 Authenticity. Objects are written authenticated (segfile format
//     version 2: an AES-GMAC tag per block and an HMAC-SHA256 over the
//     tail, both binding the object's key) under the cluster's tier key, and their TieredSegment records
//     say so (authenticated). A byte of such an object reaches a consumer,
//     a compaction or a read-back only after it matched the MAC or its
//     block's tag; a mismatch, or a copy without a MAC, is corruption
//     (T10). The per-ledger entry digests (ledger D1) check what the
//     uploader copies from the bookies, and the MAC carries that
//     guarantee on into the bucket: whoever can write the bucket but does
//     not hold the key can delete objects, not change what is read.
//     Objects written before (version 1) stay readable, unauthenticated,
//     and scrub names them. The key is 32 random bytes in metad under
//     brokerpb.TierSegmentMACKey (/strata/tier/segment-mac-key), created
//     once, create-only, by the first broker with a tier store; brokers
//     read it to write and read objects, and `strata tier scrub` to check
//     them; no other role needs it.
//
// # Read path
//
// Reader serves fetches and ListOffsets by time from LIVE segment
// objects, knowing only what metad recorded (SegmentRef: key, size, index
// position, offsets, authenticated). Every read goes through segfile, so
// every batch returned passed its CRC-32C and offset checks and, in an
// authenticated object, its block's tag (T11).
//
//   - Tails: one GET of [IndexPos, Size) per object, parsed by
//     segfile.ReadTail (with the MAC checked under ReaderConfig.Key and the
//     object's key), checked against the ref's offsets and kept parsed in
//     an LRU of TailCacheEntries.
//   - Chunks: data is read as ChunkBytes-aligned chunks of the object (the
//     last one shorter), one ranged GET each, through a cache bounded by
//     CacheBytes: LRU, and a chunk counts from the start of its download,
//     so a reader that finds no room waits for a download to end. Readers
//     of one chunk share its download, which runs under the Reader's
//     context, not a caller's, and is cancelled once all of them gave up.
//     The chunks of one read download in parallel.
//   - Checked as they arrive: a download reads 256 KiB at a time and
//     checks the whole batches those bytes complete (segfile.CheckBatches:
//     CRC-32C and sizes), from the first batch start it knows in the chunk
//     (the data's start, an index entry, or where the chunk before got
//     to). A fetch skips the CRC of a batch lying wholly in its chunk's
//     checked range (segfile.CheckedReader) and does every other check;
//     batches straddling chunks, and those before the first known start,
//     are checked by the fetch. Checked later, from memory rather than
//     the CPU's caches, the CRCs cost a catch-up read about a quarter of
//     its CPU. In an authenticated object the download also runs a
//     segfile.BlockChecker over the bytes as they arrive (whole blocks at
//     a time, cut at segfile.Tail.BlockFloor, so none is copied), and a
//     chunk carries the range of whole blocks that matched their tags; a
//     fetch (segfile.AuthenticatedReader) checks only the blocks outside
//     it: blocks straddling chunks (when ChunkBytes is not a multiple of
//     the object's block size; the defaults are 8 MiB and 1 MiB) and one
//     that did not match, which it then reports. A chunk from the disk
//     cache is authenticated the same way when it is read from disk.
//   - Disk: with ReaderConfig.DiskCache, a chunk's download looks on disk
//     first (tiering/diskcache checks every file it serves), and a chunk
//     downloaded from the store is queued (at most spillQueue) for a
//     writer goroutine that puts it on disk; a full queue skips it. A read
//     that proves a chunk corrupt drops it from memory and disk, and a
//     copy queued or being written meanwhile is not kept.
//   - Read-ahead: a fetch that starts in or right after the chunk where an
//     earlier fetch of the segment ended, or in the object's first chunk,
//     is sequential; when one of the next ReadAhead chunks is neither
//     cached nor downloading, it starts a background download of a run of
//     ReadAhead chunks from there, with one ranged GET (MinIO spends
//     markedly less CPU per byte on a few large GETs than on many small
//     ones), each chunk handed to its readers as soon as its bytes are
//     in; never past the data, at most 16 chunks at a time and only into
//     room that needs no waiting. A run that fails at a chunk fails that
//     chunk and the rest of the run (not cached; the next read downloads
//     them again). Close cancels them and waits for them.
//   - Failures (T10): nothing that failed is cached. A missing object is
//     an error wrapping objstore.ErrNotFound with its key. An object
//     shorter than recorded (a range past its end, a body ending cleanly
//     but short) or failing a check is segfile.ErrCorrupt, and the chunks
//     of that read are dropped, so a retry downloads them again: damage in
//     transit heals, damage at rest fails again. A body cut by the network
//     stays objstore.ErrTransient. Every failed call is counted
//     (strata_broker_tier_read_errors_total).
package tiering
