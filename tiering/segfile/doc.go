// Package segfile writes and reads segment objects: the immutable objects
// that hold a run of a partition's Kafka record batches in the object
// store once their ledgers are closed (tiering, format "STRATSEG",
// versions 1 and 2).
//
// An object is the batches exactly as they were stored in the ledger
// entries, preceded by a small header and followed by a sparse
// offset/time index, in version 2 the tags of its blocks, a protobuf
// footer and a fixed-size trailer (with, in version 2, a MAC). The
// index sits at the end so that a Writer needs one streaming pass and no
// sizes up front (a multipart upload); metad records the index position
// and the size, so a reader gets index, footer and trailer with one
// ranged read, then the batches it wants with a second one.
//
// # Contract
//
//   - Writer.Append refuses (and Writer stays failed) any batch that is
//     not a Kafka v2 batch with a valid CRC-32C, or whose offsets do not
//     follow: a plain segment is dense (each base offset is the previous
//     batch's last offset + 1, the first is Options.BaseOffset); a
//     compacted one (Options.Compacted) only increases. Batches are
//     written byte for byte; nothing is re-encoded, so a consumer gets
//     the bytes the producer sent (with the base offset and partition
//     leader epoch the owner stamped).
//   - Writer.Finish writes the tail and returns the Summary to record in
//     metad. A segment has at least one batch.
//   - Reading checks before it returns: ReadTail, FindTail and ParseTail
//     check the whole tail (CRC, MAC and consistency), an Iterator checks
//     every batch it returns (see Reading for the limits of a partial
//     read), ReadFetch and ReadOffsetForTime authenticate every byte they
//     use, and Verify checks every byte of the object. Anything that is
//     not what a Writer produces, including an object shorter than
//     expected, is an error marked ErrCorrupt (a *CorruptError saying
//     where); a short read is never taken as the end of the data. Readers
//     fail closed (tiering invariant T10).
//   - Authentication (version 2, see below): an object written with a
//     Key is readable only with that key and under the name it was
//     written for; anyone who can write the bucket but does not hold the
//     key cannot make a reader accept bytes the cluster did not write
//     there. No byte of an authenticated object reaches a caller, and no
//     footer is decoded nor batch parsed by ReadFetch or
//     ReadOffsetForTime, before it was checked against the MAC or its
//     block's tag. Verify, which reads every byte and decodes no
//     record, authenticates the data as it streams; a caller walking
//     bytes it read itself authenticates them with a BlockChecker.
//   - Lookups on a Tail: FetchRange (offset -> byte range holding the
//     batch with that offset or the next one, plus maxBytes), TimeRange
//     (timestamp -> byte range holding the first batch whose max
//     timestamp reaches it, Kafka ListOffsets), then Batches over the
//     bytes read and OffsetForTime inside the batch found. ReadFetch and
//     ReadOffsetForTime do the read and the walk over a RangeReader.
//   - A RangeReader is all reading needs (a ranged GET or a file), so the
//     same code serves the object store, local files and tests.
//   - A Tail is immutable and safe for concurrent use; Writer and
//     Iterator are not.
//
// # Format
//
// All integers are big-endian, like Kafka's. CRC-32C is Castagnoli
// (hash/crc32, standard initial value and final xor), as in batches. A
// version 1 object of S bytes is, in order:
//
//	position   size  section
//	0          32    header
//	32         D     data: the batches back to back
//	I = 32+D   24*N  index: N entries
//	F = I+24*N L     footer: SegmentFooter (proto/tiering/v1/segment.proto)
//	S-48       48    trailer
//
// and a version 2 (authenticated) one, with B-byte blocks and
// M = ceil(I / B):
//
//	position        size  section
//	0               32    header
//	32              D     data
//	I = 32+D        24*N  index
//	I+24*N          16*M  block tags
//	F = I+24N+16M   L     footer
//	S-96            96    trailer
//
// Header:
//
//	offset size field
//	0      8    magic "STRATSEG" (53 54 52 41 54 53 45 47)
//	8      2    version, uint16 = 1 or 2, the trailer's
//	10     2    flags, uint16: bit 0 compacted (offsets may have holes);
//	            other bits 0
//	12     4    header_len, uint32 = 32
//	16     8    base_offset, int64: the first offset the segment covers
//	24     8    reserved, 0
//
// Data: Kafka record batches v2 (recordbatch) as stored in the
// ledger entries, one after the other with no framing: each batch is
// self-delimiting (batchLength at bytes 8..12) and carries its own
// CRC-32C over bytes [21, end). Base offsets follow each other as
// described in the contract; the first batch of a plain segment starts at
// base_offset, a compacted one's at or after it.
//
// Index entry (24 bytes), one for the first batch and then one for the
// first batch that starts IndexIntervalBytes (default 1 MiB, the same as
// broker/partlog's LedgerIndex) or more after the previous entry's batch,
// so consecutive entries are less than the interval plus one batch apart:
//
//	offset size field
//	0      8    base_offset, int64: the batch's base offset
//	8      8    position, uint64: the batch's absolute position
//	16     8    max_timestamp_ms, int64: the largest batch max timestamp
//	            of every batch up to and including this one (-1: none)
//
// Footer: a protobuf strata.tiering.v1.SegmentFooter, encoded with
// deterministic field order. The writer computes base_offset,
// last_offset, records, batches, data_bytes, min/max_timestamp_ms,
// min_tombstone_horizon_ms, index_interval_bytes and compacted; the caller
// supplies the rest (topic, topic id, partition, provenance, generation,
// creation time, writer, epoch, upload id, producer state).
// min_timestamp_ms is the smallest first-record timestamp of the batches
// (baseTimestamp; the append time for LogAppendTime batches; batches with
// a KIP-534 delete horizon skipped): a hint, not a bound, because records
// inside a batch may be older than its first. max_timestamp_ms is exact
// (what retention uses).
//
// Block tags (version 2): for k in [0, M), the AES-GMAC tag of block k,
// the bytes [k*B, min((k+1)*B, I)) of the object (header and data; block
// 0 holds the header): AES-256-GCM under the object's key (below), nonce
// 4 zero bytes | k (uint64), no plaintext, the block as additional data;
// the 16-byte tag. Blocks are aligned on object positions, like the tier
// reader's chunks, so that a chunk whose size is a multiple of B is whole
// blocks.
//
// Trailer, version 1 (48 bytes, at S-48):
//
//	offset size field
//	0      8    index_pos, uint64 = I
//	8      4    index_count, uint32 = N (at least 1)
//	12     8    footer_pos, uint64 = F = I + 24*N
//	20     4    footer_len, uint32 = L, with F + L = S - 48
//	24     4    data_crc32c: CRC-32C of bytes [0, I) (header and data)
//	28     2    version, uint16 = 1
//	30     6    reserved, 0
//	36     4    meta_crc32c: CRC-32C of bytes [I, S-12) (index, footer and
//	            trailer bytes 0..36)
//	40     8    magic "STRATEND" (53 54 52 41 54 45 4e 44)
//
// Trailer, version 2 (96 bytes, at S-96):
//
//	offset size field
//	0      8    index_pos, uint64 = I
//	8      4    index_count, uint32 = N (at least 1)
//	12     8    footer_pos, uint64 = F = I + 24*N + 16*M
//	20     4    footer_len, uint32 = L, with F + L = S - 96
//	24     4    data_crc32c: CRC-32C of bytes [0, I)
//	28     4    block_bytes, uint32 = B, a power of two in [64, 64 MiB]
//	32     4    block_count, uint32 = M = ceil(I / B)
//	36     8    key_id, uint64: the id of the key of the MAC (Key.ID)
//	44     32   mac: HMAC-SHA256(key, "STRATSEG-MAC-v2\n" |
//	            uint16 len(name) | name | bytes [I, S-52)), name being the
//	            object's key in the store
//	76     2    version, uint16 = 2
//	78     6    reserved, 0
//	84     4    meta_crc32c: CRC-32C of bytes [I, S-12)
//	88     8    magic "STRATEND"
//
// The last 20 bytes have the same layout in both versions, so a reader
// reads the version at S-20 before it knows the trailer's size. The
// version is in the header too; Verify checks that the two agree.
//
// So every byte of an object is covered by a CRC or compared with a
// constant, and every position is pinned by an exact equation: one
// flipped bit anywhere is detected by Verify, and a truncated object
// cannot parse (both tested for every bit and every length of a small
// segment). The tail is at most MaxTailBytes (64 MiB).
//
// # Authentication
//
// CRCs catch damage, not intent: whoever can write the bucket can write
// batches with valid CRCs and fix up data_crc32c and meta_crc32c. A
// version 2 object is authenticated with the cluster's tier key K (32
// random bytes kept in metad, readable only by the roles that read
// objects; see tiering's doc.go) and its name (its key in the store):
//
//   - The MAC, HMAC-SHA256(K, "STRATSEG-MAC-v2\n" | uint16 len(name) |
//     name | tail up to the MAC), covers the index, the block tags, the
//     footer and the trailer's fields; the bytes after it are constants,
//     checked, and meta_crc32c.
//   - Each block's tag is a GMAC under the object's key, the first 32
//     bytes of HMAC-SHA256(K, "STRATSEG-OBJ-v2\n" | uint16 len(name) |
//     name), with the block's number as the nonce, and the tags are in the
//     table the MAC covers. A reader that reads a range checks only the
//     blocks it reads: a fetch reads FetchRange widened to whole blocks
//     (readData), at most one block more on each side, and checks each
//     block before any batch in it is parsed.
//   - Binding the name means that an object moved or copied to another
//     key (two objects swapped, an old copy put back in place of a
//     compacted one, another partition's object) fails.
//   - GMAC's nonces never repeat under one key: each object has its own
//     key, derived from its name, and a name is written once (tiering T2:
//     a random 64-bit id per upload attempt), with one tag per block
//     number. A name written twice with other bytes would give away that
//     object's GHASH key, so that whoever saw both could forge blocks of
//     that one name; nothing else.
//   - Why GMAC for blocks: it runs at several GB/s per core with AES-NI
//     and carry-less multiplication, SHA-256 at under 1 GB/s even with
//     the SHA extensions, and every byte a broker serves from the tier is
//     checked once (TestCatchUpThroughput with STRATA_TIER_CATCHUP_AUTH).
//     The tail is small, and keyed with HMAC-SHA256, which needs no nonce.
//
// The key id is HMAC-SHA256(K, "STRATSEG-KEY-ID\n") cut to its first 8
// bytes (big-endian): it tells a reader the MAC is under another key
// (another cluster's object, or a forgery) without revealing the key. The
// three labels, all 16 bytes, keep the uses of the key apart.
//
// Format versions. A Writer with a key writes version 2; without, version
// 1, which is what objects written before authentication are. Both are
// read. An Auth with Required refuses version 1 (ErrUnauthenticated): the
// tier records in metad, per object, that it was written authenticated
// (TieredSegment.authenticated), so replacing such an object by an
// unauthenticated one is a forgery, while objects written before keep
// reading. A version 2 object read without a key fails with ErrNoKey.
// Scrub reports sound version 1 objects as unauthenticated.
//
// Cost (BenchmarkCatchUpRead, BenchmarkWrite, BenchmarkVerify): a version
// 2 Writer copies each block (BlockBytes) once to tag it; readers tag
// each block they read once per read, the tier reader once per download
// (BlockChecker). Numbers are in docs/tiering.md.
//
// # Departures from the design note's sketch of STRATSEG v1
//
//   - data_crc32c covers the header too, and meta_crc32c moved after
//     version and reserved so that it covers them and the positions: in
//     the note the header and those trailer bytes were covered by no
//     checksum, so some flips went unnoticed.
//   - The footer gained `compacted` (field 21): a reader that fetched only
//     the tail must know whether offsets may have holes, to bound a fetch
//     range and to check continuity.
//   - A compacted segment's base_offset may be below its first batch (the
//     output of compaction covers the range it replaces); last_offset is
//     always the last batch's last offset, so a compactor that drops the
//     very last records folds that range into the next segment's base.
//
// # Reading
//
// With metad's index_pos and size, ReadTail reads [index_pos, S) once.
// Without them (recovery, scrub) FindTail reads the last 64 KiB
// (TailProbeBytes) and, only if the index starts earlier, the rest of
// the tail. FetchRange(X, maxBytes) starts at the last index entry at or
// below X; in a dense segment the batch holding X ends by the next entry,
// in a compacted one (X may sit in a hole) by the entry after; the range
// extends maxBytes beyond the next entry. TimeRange(T) takes the first
// entry j whose running max reaches T: the first batch with max timestamp
// >= T lies after entry j-1's batch and no later than entry j's, so the
// range is [entry j-1, entry j+1). Both therefore need one read of about
// one to two index intervals plus maxBytes.
//
// An Iterator also checks what the batch CRC does not cover: the base
// offset (bytes 0..8) of each batch against the previous one, and of
// batches at index positions against the index; the last batch against
// the footer's last offset. What a partial read cannot check: the
// partition leader epoch (batch bytes 12..16), and in a compacted segment
// a base offset changed to another value that still increases; in a
// version 1 object only Verify (the data CRC) catches those, in a
// version 2 one the block tags do on every read.
//
// Readers that read the data section themselves and walk it with an
// Iterator (Tail.Batches) authenticate it with a BlockChecker: fed the
// bytes in order, it says up to where they are verified, and only those
// may be walked. Through an AuthenticatedReader (the tier reader, whose
// downloads run a BlockChecker over each chunk as it arrives) readData
// skips the blocks already checked in the bytes of that very read.
//
// A RangeReader over an object store must report a range that starts
// past the end of the object as io.ErrUnexpectedEOF (objstore's
// ErrInvalidRange), so that a truncated object reads as corruption.
//
// # Errors
//
//   - NewKey, NewWriter: ErrInvalidOptions.
//   - Writer.Append: ErrInvalidBatch (wrapping the recordbatch error),
//     ErrOffsetOrder, ErrFinished, the io.Writer's error. Sticky.
//   - Writer.Finish: ErrEmpty, ErrTooLarge, ErrFinished, a sticky error,
//     the io.Writer's error.
//   - ParseTrailer, ParseTail, ReadTail, FindTail, Verify, ReadFetch,
//     ReadOffsetForTime, Iterator.Err, OffsetForTime, BlockChecker.Write:
//     ErrCorrupt (*CorruptError; a truncated object also matches
//     io.ErrUnexpectedEOF; a failed authentication also matches
//     ErrMACMismatch, or ErrUnauthenticated for a version 1 object read
//     with Auth.Required); ParseTail also ErrIncompleteTail; the ones
//     that parse a tail also ErrNoKey; the ones that read return the
//     RangeReader's other errors wrapped.
package segfile
