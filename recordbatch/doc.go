// Package recordbatch encodes and decodes Kafka record batches (magic 2,
// "record batch v2"), the unit Strata moves end to end: the client encodes a
// batch, the broker verifies it, stamps its base offset and stores the bytes
// unchanged as one ledger entry, and a consumer decodes the concatenated
// batches a fetch returns. It also holds Kafka's keyed partitioner (murmur2)
// and a sticky partitioner for keyless records (KIP-480).
//
// # Wire format
//
// Every fixed-width field is big-endian. A batch is a 61-byte header
// followed by the records section:
//
//	offset size field
//	     0    8 baseOffset            int64  stamped by the broker (SetBaseOffset)
//	     8    4 batchLength           int32  bytes after this field (total size - 12)
//	    12    4 partitionLeaderEpoch  int32  -1 from clients (SetPartitionLeaderEpoch)
//	    16    1 magic                 int8   always 2
//	    17    4 crc                   uint32 CRC-32C (Castagnoli) of bytes [21, end)
//	    21    2 attributes            int16  bits 0-2 compression (0 none, 1 gzip,
//	                                         2 snappy, 3 lz4, 4 zstd), bit 3 timestamp
//	                                         type (1 = LogAppendTime), bit 4
//	                                         transactional, bit 5 control batch,
//	                                         bit 6 delete horizon set (KIP-534)
//	    23    4 lastOffsetDelta       int32
//	    27    8 baseTimestamp         int64  ms; timestamp of the first record
//	    35    8 maxTimestamp          int64  ms
//	    43    8 producerId            int64  -1 = not idempotent
//	    51    2 producerEpoch         int16
//	    53    4 baseSequence          int32  -1 = none
//	    57    4 recordCount           int32
//	    61    - records               compressed as a whole when bits 0-2 != 0
//
// Because the CRC starts at attributes, the base offset and the partition
// leader epoch can be rewritten in place without recomputing it.
//
// Each record uses zigzag varints ("varint" = int32 range, "varlong" =
// int64), as in protobuf's sint32/sint64:
//
//	length          varint  bytes of the record after this field
//	attributes      int8    unused, 0
//	timestampDelta  varlong relative to baseTimestamp
//	offsetDelta     varint  relative to baseOffset (the record's index when encoded)
//	keyLength       varint  -1 = null key
//	key             bytes
//	valueLength     varint  -1 = null value (a tombstone)
//	value           bytes
//	headerCount     varint
//	headers         headerCount times: keyLength varint (never null), key
//	                (UTF-8), valueLength varint (-1 = null), value
//
// Compression codecs follow Kafka's Java client so that batches are
// interchangeable with it: gzip (RFC 1952); snappy in xerial's framing (a
// 16-byte header 0x82 "SNAPPY" 0x00, version 1, compatible version 1, then
// chunks of a big-endian int32 length and a raw snappy block of at most
// 32 KiB input) — decoding also accepts a bare snappy block, as some other
// clients send, and only standard snappy: S2's extensions, which Kafka's
// clients cannot read (and whose repeat codes inflate without bound), are
// corrupt input; lz4 in the LZ4 frame format (64 KiB independent blocks, no
// content checksum, like KafkaLZ4BlockOutputStream); zstd frames.
//
// # Contract
//
//   - Verify and Decode accept exactly one batch: size, magic and CRC are
//     checked. ParseHeader reads the header only and does not need the
//     whole batch, so a reader can learn a batch's size from its first 61
//     bytes.
//   - Decode checks every length against the buffer: it never panics and
//     never reads outside buf, whatever the input (see the fuzz tests).
//     Decompressed output is limited to MaxDecompressedBytes (DecodeLimit
//     and ScanRecords take the bound as an argument; DecodeWithin bounds
//     everything the decoded batch holds: the decompressed buffer, and
//     RecordBytes and HeaderBytes per record and header). Output buffers grow
//     with the bytes actually produced: no size a batch claims (gzip
//     ISIZE, zstd frame content size, a snappy length beyond the bound)
//     is allocated up front, so a bomb costs about twice the bound at most.
//   - ScanRecords (and OffsetForTime, which uses it) checks every
//     record's framing like Decode, without trusting RecordCount and
//     without keeping records. It streams: a compressed section goes
//     through a pooled window of 64 KiB and the records' payloads are
//     skipped, so a scan's memory is that window and the codec's state
//     whatever the records' size (snappy decodes one block at a time,
//     each within the bound).
//   - At most max(GOMAXPROCS, 4) decompressions run at once in a process;
//     more wait for one to end. Each holds a codec state that the
//     compressed bytes, not their number, size (a zstd window of up to
//     8 MiB, lz4 blocks of up to 4 MiB), and the work is CPU-bound.
//   - Records returned by Decode alias memory: for an uncompressed batch the
//     keys and values are sub-slices of buf (capacity-limited, so appending
//     to one never overwrites its neighbour); for a compressed batch they
//     alias one freshly allocated buffer. Copy them if buf is reused.
//   - Split returns capacity-limited sub-slices of its input.
//   - Encode, Decode, Verify and the partitioners are safe for concurrent
//     use; a Builder is not.
//
// Errors (match with errors.Is; messages say what is wrong):
//
//	ParseHeader   ErrShort, ErrMagic, ErrCorrupt (impossible batchLength)
//	Verify        as ParseHeader, plus ErrShort (buf shorter than the batch)
//	              and ErrCorrupt (CRC mismatch, trailing bytes, negative
//	              record count)
//	Decode        as Verify, plus ErrCorrupt (malformed records, bad
//	              compressed data, unknown codec) and ErrTooLarge
//	              (decompressed section beyond the bound)
//	DecodeWithin  as Decode; ErrTooLarge also for records and headers
//	              whose structures pass the bound
//	ScanRecords   ErrCorrupt, ErrTooLarge as Decode; fn's own error
//	Split         ErrShort (partial trailing batch), ParseHeader's errors
//	Encode/Build  ErrInvalid (no records, unknown codec)
package recordbatch
