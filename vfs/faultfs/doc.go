// Package faultfs is a vfs.FS that injects disk faults into a running
// process, switched on and off from outside it through a control file: a
// test seam for fault-injection runs against real bookie processes.
//
// A process opts in through the environment only: when STRATA_DISK_FAULTS
// (EnvVar) names a file, FromEnv wraps the file system it is given; when
// the variable is unset or empty (production) FromEnv returns that file
// system itself, so nothing is wrapped and no operation pays anything, not
// even an atomic load. cmd/bookie calls FromEnv on vfs.Default() and hands
// the result to the bookie (ledger/bookie Config.FS).
//
// # Control file
//
// The control file is read when New returns and again every PollInterval
// (default 50 ms) by one goroutine, which stores the faults it parses in
// an atomic pointer; every operation of the wrapped file system loads that
// pointer once. A missing or empty file means healthy. One fault per line,
// blank lines and lines starting with # ignored:
//
//	sync-stall DURATION   every File.Sync and FS.SyncDir waits DURATION
//	                      (a Go duration, "3s", "500ms") before it syncs;
//	                      changing the file (or Close) ends the waits in
//	                      progress at once
//	sync-eio              File.Sync and FS.SyncDir fail with EIO and sync
//	                      nothing
//	write-eio             File.Write fails with EIO and writes nothing
//	read-eio              File.ReadAt fails with EIO and reads nothing
//
// Lines combine ("sync-stall 2s" and "sync-eio": a sync waits, then fails).
// A line that does not parse is logged (at error level) and ignored; the
// other lines apply. Every change is logged ("disk faults changed", with
// the faults now in force), so a test can see when a process picked it
// up. Write the file atomically (a temporary file renamed over it): a
// half-written file read at the wrong moment may drop a line until the
// next read.
//
// Injected errors are *fs.PathError values wrapping syscall.EIO, as the
// operating system's are, with the operation ("write", "read", "fdatasync",
// "fsync") and the file's name.
//
// # What is affected
//
// Only files reached through the wrapped vfs.FS, and only while they are
// written, read or synced: opening, creating, removing, renaming, listing,
// preallocating, truncating, Stat and DiskUsage pass through untouched, so
// a fault never hides a file or its size. In a bookie that is (see
// ledger/storage and ledger/journal):
//
//   - the journal files (DATA_DIR/journal/): every commit group's write and
//     fdatasync, new files' headers and the fsync of the journal directory,
//     the reads of entries (gRPC reads, the comparison of a re-added entry
//     with its stored copy, compaction's copies) and the start-up replay;
//   - the data directory's own fsyncs and the JOURNAL-TRIMMED marker.
//
// Not affected: the Pebble index (DATA_DIR/index/, which goes through
// Pebble's own vfs), the COOKIE file (written with the os package before
// the storage opens), and the bookie's network. A full disk is not a mode:
// run the process on a small tmpfs and fill it (e2e TestBookieDiskFull).
//
// What the bookie does under each fault is documented in docs/bookie.md
// ("Fault injection for tests") and proven by the e2e tests named there.
package faultfs
