// Package journal is the bookie's append-only journal, which is also where
// ledger entries are stored: the index (Pebble, built on top) maps
// (ledger, entry) to a Location in these files.
//
// # Contract
//
//   - Open checks the files of Options.Dir and starts the writer goroutine;
//     it reads no records. Replay must complete before the first Append.
//     After a restart new records always go to a new file: an old file is
//     never appended to again.
//   - Append queues a record. Its done callback runs exactly once, from the
//     writer goroutine, after the record and every record queued before it
//     are durable (fdatasync returned), with the record's Location; or with
//     an error wrapping ErrFailed. Queue order is file order.
//   - Read returns a record after verifying it; corrupt bytes are never
//     returned, only a *CorruptError (ErrCorrupt).
//   - Replay hands every valid record to a callback in journal order, cuts
//     the torn tail, and reports corruption without failing.
//
// # Group commit
//
// One writer goroutine takes every queued record, up to MaxGroupBytes (at
// least one record), encodes them into one reusable buffer, writes it with
// one Write and makes it durable with one Sync (fdatasync), then calls each
// done in order. There is no timer: an idle journal writes a lone record at
// once, and under load the queue fills while a sync runs, so groups grow by
// themselves. Append blocks (honouring its context) while the bytes accepted
// and not yet completed exceed MaxQueueBytes.
//
// An error from Write, Sync, preallocation or creating the next file is
// fatal: OnFatal is called once, every pending Append fails with ErrFailed,
// every later Append returns ErrFailed, and nothing is acknowledged again.
// A failed sync is never retried (after a failed fdatasync Linux may drop
// the dirty pages, so a retry can "succeed" without the data).
//
// # Invariants
//
//  1. A record is acknowledged only after its bytes and all earlier bytes of
//     the journal are synced.
//  2. A file's header is synced and the directory is synced before any
//     record is written to the file.
//  3. At most one group is written but not yet synced, and it is the last
//     group of the newest file: a group is synced before the next is
//     written, groups never span files, and a file is created only after the
//     previous one is fully synced. So after a crash only the last group can
//     be damaged by the crash itself.
//  4. Replay cuts a tail only if it holds no valid record, or only records
//     of that last group (see below); it never cuts an acknowledged record
//     unless the disk damaged the last acknowledged group itself, which is
//     indistinguishable from a torn write.
//  5. Cuts are synced before the new file is created, so a cut tail cannot
//     later look like corruption followed by valid records.
//
// # Files
//
// Files are named by sequence number, DIR/%016x.journal (16 lower-case hex
// digits), starting at 1 and increasing. A group that would take the current
// file past MaxFileBytes starts a new file (create, preallocate, write
// header, fdatasync, fsync DIR). Space is reserved with Preallocate
// (FALLOC_FL_KEEP_SIZE: readers never see it) in steps of PreallocateBytes,
// so a full disk shows up as a failed reservation before a group is written
// rather than as a partial write. The bookie is expected to stop accepting
// writes at a free-space threshold well before that.
//
// # On-disk format
//
// All integers are little-endian. CRC-32C is Castagnoli (hash/crc32), with
// the standard initial value and final xor (crc32.Checksum/crc32.Update).
//
// File header, 24 bytes at offset 0:
//
//	offset size field
//	0      8    magic "STRATAJL" (53 54 52 41 54 41 4a 4c)
//	8      4    format version, uint32 = 1
//	12     8    file sequence number, uint64 (must match the file name)
//	20     4    CRC-32C of bytes [0, 20)
//
// Records follow back to back from offset 24. A record is a 44-byte header
// and a payload:
//
//	offset size field
//	0      4    header CRC: CRC-32C of seq(8) ‖ offset(8) ‖ header bytes
//	            [4, 44), where seq and offset are the file sequence number
//	            and the record's byte offset in the file, as uint64. A
//	            record is valid only at the place it was written.
//	4      4    length, uint32: the whole record, header included;
//	            44 ≤ length ≤ MaxRecordBytes (64 MiB)
//	8      4    payload CRC: CRC-32C of bytes [44, length) (0 if empty)
//	12     4    group offset, uint32: the record's offset minus the offset
//	            of the first record of its commit group (0 for the first)
//	16     1    type: 1 add, 2 fence, 3 lac, 4 delete
//	17     1    flags: bit 0 = recovery add (add only); other bits 0
//	18     2    reserved, 0
//	20     8    ledger id, uint64
//	28     8    entry id, uint64 (add; 0 otherwise)
//	36     8    LAC, int64 two's complement (add: the LAC sent with the
//	            entry; lac: the explicit LAC; 0 otherwise)
//	44     n    payload, n = length - 44 (add only; fence, lac and delete
//	            records are exactly 44 bytes)
//
// The header CRC covers the length, the payload CRC and every field, so one
// check verifies the header and binds the payload. A separate header CRC
// lets Replay test a candidate position after damage in constant time
// instead of checksumming up to 64 MiB at every byte. Decoding rejects
// anything the encoder never writes: a length out of range, an unknown type,
// set reserved bits, a non-add record with a payload or entry id, a group
// offset pointing before the first record. Length is checked against its
// bounds (after the header CRC) before anything is allocated.
//
// A header whose first 8 bytes are zero (CRC and length 0, as in zeroed or
// never-written space) is not a record; it is where the log ends unless a
// valid record follows.
//
// # Replay and damage
//
// Replay scans each file from its header (or from the given Position) and
// decodes record after record. At the first offset b where no valid record
// starts, it searches forward byte by byte, in this file and then later
// files, for the next position where a valid record starts:
//
//   - none: b is the torn tail. The file is cut to b; later files (holding
//     no valid record) are cut to their header, or removed if their header
//     is not intact. Counted in TruncatedBytes.
//   - a record r in the same file whose group started at or before b, and
//     every valid record from r on belongs to that same group: the damage is
//     inside the last group, the one written but possibly not synced at the
//     crash (invariant 3). Write-back may persist a group's pages in any
//     order, so such holes are expected after a power failure. None of that
//     group was acknowledged, so the file is cut at b as above.
//   - otherwise: the bytes [b, r) are corruption, reported in Corrupt and
//     skipped; scanning resumes at r. Their records were synced (a later
//     group or file exists), may have been acknowledged, and are never
//     passed to fn.
//
// A file whose header is not intact is treated the same way: with nothing
// valid after it, it is an interrupted creation and is removed; otherwise
// its header is reported as a CorruptRange and its records are still
// scanned. A file whose intact header names another sequence number or an
// unknown version makes Open fail: it does not belong here.
//
// # Errors
//
//   - Open: Options.Validate errors; I/O errors; a misplaced file
//     (*CorruptError) or unknown format version.
//   - Append: ErrInvalidRecord, ErrTooLarge, ErrClosed, ErrFailed,
//     ErrNotReplayed, or the context's error; done gets nil or ErrFailed.
//   - Read: ErrCorrupt (*CorruptError), ErrNotFound, ErrClosed, I/O errors.
//   - Replay: I/O errors (nothing is repaired then), fn's error, ErrClosed.
//     Corruption is not an error: see ReplayResult.
//   - RemoveFile: ErrFileInUse, ErrNotFound, ErrClosed, I/O errors.
//   - Close: the journal's ErrFailed error if it failed; ErrClosed if
//     already closed.
package journal
