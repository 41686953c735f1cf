// Package tiering is Strata's tiered storage: it copies the batches of
// closed ledgers into immutable segment objects in an object store, so
// that bookies keep only recent data while consumers can still read from
// the log start; and, on top of the two tiers, retention and compaction
// (DESIGN.md §7).
//
// # What exists and what is to come
//
// Built so far, each with its own doc.go:
//
//   - tiering/objstore: the object-store interface (Store) and its
//     implementations: s3, localdir (one machine), memstore (tests, with
//     fault hooks), plus a conformance suite.
//   - tiering/segfile: the segment object format STRATSEG v1 (writer,
//     tail parser, offset and time lookups, batch iterator, full
//     verification).
//
// To come, in this order: the metad records (TieredSegment, UploadIntent,
// GarbageObject, the PartitionLog tier fields) and the per-partition
// metadata mutator; the upload state machine (intent, stream, verify,
// commit) with failpoints; the read path (routing to bookies or objects,
// aligned chunk reads, chunk and tail caches, ListOffsets by time); ledger
// deletion after the tier lag; retention over both tiers with the GC queue
// and the orphan sweeper; compaction; the bucket cookie; scrub and repair;
// topic recovery from the bucket. Until then nothing is uploaded, no
// ledger is deleted because of tiering, and the invariants below are the
// contract those pieces must keep (tests will cite them by name).
//
// # Model
//
// A partition's log is, in offset order: LIVE segment objects covering
// [log_start_offset, tiered_end_offset), then the ledgers of its
// PartitionLog (broker/partlog), the last of which may be open. A segment
// object holds one run of consecutive closed ledgers (or a compaction
// output), byte for byte as stored. Object keys are
//
//	<prefix>/strata/<cluster-id>/t/<topic-id>/<partition>/<base:020d>-<last:020d>-g<gen>-<uid16>.seg
//
// with the topic's random id (never its name, so delete and recreate
// cannot collide), zero-padded offsets (key order = offset order), the
// compaction generation and 64 random bits per upload attempt. Object
// states are metad records: UploadIntent (copy started) -> TieredSegment
// LIVE (copy finished) -> GarbageObject (delete started) -> gone.
//
// # Invariants
//
//   - T1 Single source of truth. A byte of tiered data is readable iff a
//     LIVE TieredSegment record in metad names its object. Object
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
//     log_start_offset never decreases and is advanced in the same Txn
//     that unlinks what it covers.
//   - T6 References before objects. An object is deleted only after (a) no
//     LIVE record names it and (b) a GC entry for it is durable; removing
//     the LIVE record and creating the GC entry happen in one Txn.
//   - T7 Fencing. Every tiering, retention and compaction commit is a Txn
//     that compares the PartitionLog version held by the owner; losing
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
//     last cookie check interval.
//   - T10 Fail closed. A LIVE segment whose object is missing or corrupt
//     yields an error to the fetch, never a silent skip (segfile reports
//     segfile.ErrCorrupt and never takes a short read for the end of the
//     data); skipping requires an operator action that advances
//     log_start_offset.
package tiering
