package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/strata-log/strata/vfs"
)

// Defaults for the zero fields of Options.
const (
	DefaultMaxFileBytes     = 256 << 20
	DefaultPreallocateBytes = 64 << 20
	DefaultMaxQueueBytes    = 64 << 20
	DefaultMaxGroupBytes    = 4 << 20
	DefaultRemoveStepBytes  = 16 << 20

	maxGroupBytesLimit = 1 << 30
)

// Options configures a Journal. The zero value of every field but Dir means
// its default.
type Options struct {
	// FS is the file system; default vfs.Default().
	FS vfs.FS
	// Dir holds the journal files; created if missing. Required.
	Dir string
	// MaxFileBytes: a group that would take the current file past this size
	// goes to a new file (a single group larger than it gets a file of its
	// own). Default 256 MiB.
	MaxFileBytes int64
	// PreallocateBytes: space is reserved in steps of this size (never past
	// MaxFileBytes unless one group needs it), so running out of disk
	// surfaces before a group is written, not in the middle of one.
	// Default 64 MiB; negative disables preallocation.
	PreallocateBytes int64
	// MaxQueueBytes bounds the encoded bytes of records accepted by Append
	// and not yet completed; Append waits for space (back-pressure). A
	// single larger record is accepted when nothing else is pending.
	// Default 64 MiB.
	MaxQueueBytes int64
	// MaxGroupBytes bounds the bytes of one write+sync group (a single
	// larger record makes a group of its own). Default 4 MiB.
	MaxGroupBytes int64
	// BufferedWrites writes new files through the page cache in format
	// version 1 (records back to back), as builds before direct I/O did
	// and can read. By default new files use version 2: commit groups
	// aligned to 4 KiB and padded, written with direct I/O (O_DIRECT),
	// which skips copying every byte into the page cache; where the file
	// system refuses direct I/O the same layout is written buffered.
	// Files of both versions are always read.
	BufferedWrites bool
	// RemoveStepBytes: RemoveFile cuts a file down this many bytes at a
	// time, each cut synced, before it unlinks it. Freeing a whole file's
	// extents in one file-system commit stalls every fdatasync on the disk
	// meanwhile (36 ms for 256 MiB on an ext4 mounted with discard, where a
	// 64 KiB fdatasync takes 0.3 ms); in 16 MiB steps no fdatasync waited
	// longer than without removals. Default 16 MiB; negative unlinks at once.
	RemoveStepBytes int64
	// OnFatal is called once, from the writer goroutine, with the error
	// (wrapping ErrFailed) when a write, sync or file creation fails. The
	// journal then fails every pending and future Append. The bookie should
	// stop serving writes and restart.
	OnFatal func(error)
	// Logger; default discards.
	Logger *slog.Logger
	// OnGroupCommit, if set, is called by the writer after every durable
	// group with its size in bytes and records and how long its fdatasync
	// took (for metrics). It must not block.
	OnGroupCommit func(groupBytes, groupRecords int, syncDuration time.Duration)
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default()
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.PreallocateBytes == 0 {
		o.PreallocateBytes = DefaultPreallocateBytes
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if o.MaxGroupBytes == 0 {
		o.MaxGroupBytes = DefaultMaxGroupBytes
	}
	if o.RemoveStepBytes == 0 {
		o.RemoveStepBytes = DefaultRemoveStepBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports whether o (after defaults) is usable.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("no Dir given"))
	}
	if o.MaxFileBytes < FileHeaderSize+RecordHeaderSize {
		errs = append(errs, fmt.Errorf("MaxFileBytes %d is below the minimum %d", o.MaxFileBytes, FileHeaderSize+RecordHeaderSize))
	}
	if o.MaxQueueBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxQueueBytes %d is negative", o.MaxQueueBytes))
	}
	if o.MaxGroupBytes < 0 || o.MaxGroupBytes > maxGroupBytesLimit {
		// Records store their offset in the group in 32 bits.
		errs = append(errs, fmt.Errorf("MaxGroupBytes %d is outside [1, %d]", o.MaxGroupBytes, maxGroupBytesLimit))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("journal: invalid options: %w", err)
	}
	return nil
}

// String describes o for logs.
func (o Options) String() string {
	o = o.withDefaults()
	return fmt.Sprintf("journal.Options{Dir: %q, MaxFileBytes: %d, PreallocateBytes: %d, MaxQueueBytes: %d, MaxGroupBytes: %d, BufferedWrites: %t, RemoveStepBytes: %d}",
		o.Dir, o.MaxFileBytes, o.PreallocateBytes, o.MaxQueueBytes, o.MaxGroupBytes, o.BufferedWrites, o.RemoveStepBytes)
}
