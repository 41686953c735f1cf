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
//     the torn tail, and reports corruption without failing. Pad records
//     (see the format) are skipped; Read never returns one.
//
// # Group commit
//
// One writer goroutine takes every queued record, up to MaxGroupBytes (at
// least one record), encodes them into one reusable buffer, writes it with
// one Write and makes it durable with one Sync (fdatasync), then calls each
// done in order. By default (format version 2, see below) the group ends
// with a pad record up to the next 4 KiB boundary and the Write uses direct
// I/O (vfs.FS.CreateDirect: O_DIRECT), which skips copying every byte into
// the page cache, the largest CPU cost of a write; the buffer is allocated
// 4 KiB-aligned. Direct I/O flushes neither the device cache nor the file
// size, so the fdatasync stays. Where the file system refuses direct I/O
// (EINVAL when opening, or when writing a new file's header block) the
// same layout is written through the page cache, logged as a warning and
// reported by DirectIO. Options.BufferedWrites writes version 1 instead:
// records back to back, through the page cache. While the file being
// written uses direct I/O, Read does too (vfs.FS.OpenDirect): one pread of
// the 4 KiB blocks that hold the record into an aligned buffer, as those
// blocks are not in the page cache anyway; a file system that refuses a
// direct read turns them off (logged) and the read is made buffered.
// Otherwise reads are buffered (pread); Linux drops the cached pages a
// direct write covers, so they see the new bytes. There is no timer: an idle journal writes a lone record at
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
//  6. In a version-2 file every commit group starts and ends on a 4 KiB
//     boundary: the header block (header and a pad) is the first group,
//     and a group whose records end off a boundary ends with a pad record,
//     which carries the group's group offset like its other records. So a
//     pad torn by a crash is inside the last group (3, 4), and every write
//     has the offset, length and buffer alignment direct I/O needs.
//
// # Files
//
// Files are named by sequence number, DIR/%016x.journal (16 lower-case hex
// digits), starting at 1 and increasing. A group that would take the current
// file past MaxFileBytes (counting its pad) starts a new file (create,
// preallocate, write the header block, fdatasync, fsync DIR). Space is reserved with Preallocate
// (FALLOC_FL_KEEP_SIZE: readers never see it) in steps of PreallocateBytes,
// so a full disk shows up as a failed reservation before a group is written
// rather than as a partial write. The bookie is expected to stop accepting
// writes at a free-space threshold well before that.
//
// RemoveFile renames a file to DIR/%016x.journal.removing, fsyncs DIR, cuts
// it RemoveStepBytes at a time (each cut synced), unlinks it and fsyncs DIR.
// One unlink of a 256 MiB file frees its extents in one file-system commit,
// which every fdatasync on the disk then waits for (36 ms on ext4 with
// discard); the cuts keep each commit small, and the caller's pacer
// spaces them out (three bookies cutting at once still stalled the disk).
// A crash midway leaves a
// .removing file, which is not a journal file (it is never replayed) and
// which Open finishes removing; one left by an I/O error is finished by
// RemoveLeftovers (the bookie's GC calls it every run).
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
//	8      4    format version, uint32: 1 or 2 (below)
//	12     8    file sequence number, uint64 (must match the file name)
//	20     4    CRC-32C of bytes [0, 20)
//
// Version 1 (Options.BufferedWrites, and every build before direct I/O):
// records follow back to back from offset 24. Version 2 (the default):
// a pad record fills [24, 4096), and from 4096 on each commit group starts
// on a 4096-byte boundary and ends on one, padded with a pad record when
// its records do not (invariant 6). A record is a 44-byte header and a
// payload:
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
//	16     1    type: 1 add, 2 fence, 3 lac, 4 delete, 5 pad
//	17     1    flags: bit 0 = recovery add (add only); other bits 0
//	18     2    reserved, 0
//	20     8    ledger id, uint64
//	28     8    entry id, uint64 (add; 0 otherwise)
//	36     8    LAC, int64 two's complement (add: the LAC sent with the
//	            entry; lac: the explicit LAC; 0 otherwise)
//	44     n    payload, n = length - 44 (add and pad only; fence, lac
//	            and delete records are exactly 44 bytes)
//
// A pad record fills a group up to the next 4096-byte boundary: the gap
// after the group's last record, or the gap plus 4096 when the gap is
// shorter than a record header (so 44 ≤ length ≤ 4139; a group ending on a
// boundary has none). Its header is an ordinary header: header CRC as for
// any record, length, payload CRC of its payload (n zero bytes), group
// offset as for any record of its group (0 for the header block's pad at
// offset 24), type 5, and flags, reserved bytes, ledger id, entry id and
// LAC all 0. Its payload is n zero bytes. It holds nothing: Replay skips it
// and Read refuses it (ErrCorrupt), but it is checked like any record, so
// damage to a pad is a torn tail or corruption by the same rules.
//
// The header CRC covers the length, the payload CRC and every field, so one
// check verifies the header and binds the payload. A separate header CRC
// lets Replay test a candidate position after damage in constant time
// instead of checksumming up to 64 MiB at every byte. Decoding rejects
// anything the encoder never writes: a length out of range, an unknown type,
// set reserved bits, a non-add record with a payload or entry id, a group
// offset pointing before the first record; and a pad that does not end on
// a 4096-byte boundary, is longer than 4139 bytes, belongs to a group that
// starts neither at offset 24 nor on a boundary, has a non-zero field or
// flag, or a non-zero payload byte. (A pad is accepted in a version-1 file
// too: it is position-bound by its CRC and holds nothing, so the decoder
// need not know the file's version.) Length is checked against its bounds
// (after the header CRC) before anything is allocated.
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
// # Compatibility
//
// This build reads versions 1 and 2, in any mix of files. Builds before
// version 2 refuse to open a journal holding a version-2 file: Open fails
// with "has format version 2; this build reads version 1", so the bookie
// does not start. (Had the version stayed 1, such a build would find a
// pad of an unknown type after every group and report each as a
// CorruptRange, putting the bookie in limbo, which fences every ledger it
// knows; hence the new version.) To go back to such a build, run with
// BufferedWrites (--journal-direct-io=false) until GC has removed every
// version-2 file.
//
// # Errors
//
//   - Open: Options.Validate errors; I/O errors; a misplaced file
//     (*CorruptError) or unknown format version.
//   - Append, AppendWaiter: ErrInvalidRecord, ErrTooLarge, ErrClosed,
//     ErrFailed, ErrNotReplayed, or the context's error; done (the
//     Waiter) gets nil or ErrFailed.
//   - Read: ErrCorrupt (*CorruptError), ErrNotFound, ErrClosed, I/O errors.
//   - Replay: I/O errors (nothing is repaired then), fn's error, ErrClosed.
//     Corruption is not an error: see ReplayResult.
//   - RemoveFile: ErrFileInUse, ErrNotFound, ErrClosed, I/O errors.
//   - RemoveLeftovers: I/O errors.
//   - Close: the journal's ErrFailed error if it failed; ErrClosed if
//     already closed.
package journal
