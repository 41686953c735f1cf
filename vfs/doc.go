// Package vfs is Strata's file-system seam: the File and FS interfaces
// that every disk operation of the bookie's journal (journal files, their
// compaction and removal) and storage engine (its directories, the
// JOURNAL-TRIMMED marker, disk usage), of the tiered read path's disk cache
// (tiering/diskcache) and of the bench suite's disk probes goes through,
// the real implementation (Default) and an in-memory twin (NewMem) that can
// crash, fail and fill up on demand. Package vfs/faultfs wraps an FS to
// inject disk faults into a running process, switched from outside it (a
// test seam: STRATA_DISK_FAULTS). The bookie's Pebble index goes through
// Pebble's own vfs (ledger/storage Options.IndexFS). The package imports
// no other Strata package, so any floor may use it.
//
// # Contract
//
// Writes always append: a File has no write offset, and reads are
// positional (ReadAt). A File's data is durable only after File.Sync
// returns nil; a directory entry (a file created, removed or renamed) is
// durable only after FS.SyncDir of its directory returns nil. Preallocate
// reserves space without changing the size readers see, so the caller can
// make "disk full" surface at a point of its choosing rather than in the
// middle of a write. An error from Sync means the data's fate is unknown and
// must never be "fixed" by syncing again (on Linux a failed fsync may drop
// the dirty pages and a retry then succeeds without them).
//
// CreateDirect creates a file written with direct I/O: no copy of the data
// into the page cache, which is most of the CPU cost of a large write.
// Every write must start at a file offset, have a length and come from a
// buffer address that are multiples of DirectAlign (4096; AlignedBuffer
// allocates such buffers). Direct I/O changes neither durability (Sync is
// still needed: it flushes the device cache and the file size) nor reads,
// which stay buffered and see the written bytes (Linux drops the page-cache
// pages a direct write covers).
//
// # Default (the operating system)
//
//   - Create opens with O_RDWR|O_CREATE|O_EXCL|O_APPEND (mode 0644),
//     OpenReadWrite with O_RDWR|O_APPEND, Open read-only.
//   - CreateDirect adds O_DIRECT (Linux). A file system that refuses it
//     fails the open with EINVAL (tmpfs before Linux 6.6, some FUSE and
//     overlay setups); the file is then opened without O_DIRECT and
//     CreateDirect reports direct = false. Elsewhere it is Create.
//   - File.Sync is fdatasync(2) on Linux (fsync elsewhere).
//   - File.Preallocate is fallocate(2) with FALLOC_FL_KEEP_SIZE over
//     [0, size) on Linux; a file system that does not support it
//     (EOPNOTSUPP) gets no reservation, which is correct but loses the
//     early ENOSPC. Elsewhere it is a no-op.
//   - SyncDir opens the directory and fsyncs it.
//   - DiskUsage is statfs(2): TotalBytes = f_blocks*f_bsize,
//     FreeBytes = f_bavail*f_bsize (what an unprivileged writer can use).
//     Linux only.
//
// # MemFS durability model
//
// MemFS tracks, per file, the bytes as of the last Sync and, per directory,
// the entries as of the last SyncDir. Crash returns a new MemFS with exactly
// that durable state:
//
//   - a file keeps the content it had at its last Sync; appends since are
//     lost, unless CrashOptions.TornTail keeps a prefix of them (none, all,
//     or a uniformly random length, a quarter, a quarter and half of the
//     time), garbled four times out of five (a few bytes changed, a range
//     zeroed, both, or all of it zeroed);
//   - a Truncate since the last Sync is undone (the synced content returns);
//   - a file created since its directory's last SyncDir is gone; a file
//     removed since is back (with its durable content); a rename is undone
//     in each directory not synced since (so a cross-directory rename with
//     only one side synced may leave the file under both names or neither);
//   - directories are durable as soon as MkdirAll returns and a directory
//     removal is immediate. The journal and index keep their files in one
//     directory they create once, so modelling directory durability would
//     add complexity without finding bugs; callers on the real OS should
//     still sync the parent of a directory they create.
//
// The original MemFS is not changed by Crash and keeps working, so the
// process under test can be shut down after the crash point.
//
// MemFS supports direct I/O: a file made by CreateDirect refuses, with
// EINVAL and without writing, a Write whose buffer address or length is not
// a multiple of DirectAlign or that would start at an unaligned size, as
// Linux does; so tests on MemFS check the caller's layout. Its data is
// otherwise handled like any other file's (unsynced writes can be lost or
// torn by Crash).
//
// InjectError installs a function called before every operation (Op) with
// the path concerned; its error is returned by that operation, which then
// does nothing. It can count calls to fail "the third Sync", block to hold a
// goroutine at a known point, or call Crash to cut the file system at an
// exact operation.
//
// SetCapacity bounds the bytes all files may hold (each file counts
// max(size, preallocated)). A Write that does not fit writes the prefix that
// fits and fails with an error wrapping syscall.ENOSPC, as a real file
// system does; a Preallocate that does not fit fails with ENOSPC and reserves
// nothing. Removing a file frees its space at once (even if a handle is still
// open, unlike Linux).
//
// Errors are *fs.PathError values wrapping syscall errnos (ENOENT, EEXIST,
// ENOSPC, EBADF, ...), so errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, syscall.ENOSPC) work as with the OS. Operations on a closed
// File fail with fs.ErrClosed.
package vfs
