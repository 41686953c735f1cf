package journal

import (
	"errors"
	"fmt"

	"github.com/strata-log/strata/internal/corruption"
)

// Sentinel errors; match with errors.Is. See doc.go for which call returns
// which.
var (
	// ErrCorrupt: bytes on disk are not what the journal wrote (checksum,
	// type, length or position mismatch, a damaged or misplaced file).
	// Corrupt data is never returned. Errors carrying it are
	// *CorruptError values.
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrCorrupt = corruption.Mark(errors.New("journal: corrupt"))
	// ErrClosed: the journal is closed (or closing).
	ErrClosed = errors.New("journal: closed")
	// ErrFailed: a write, sync or file creation failed; the journal
	// acknowledges nothing more. The error also wraps the I/O error.
	ErrFailed = errors.New("journal: failed")
	// ErrTooLarge: a record's encoding exceeds MaxRecordBytes.
	ErrTooLarge = errors.New("journal: record too large")
	// ErrInvalidRecord: a record is malformed (unknown type, or a field set
	// that its type does not have).
	ErrInvalidRecord = errors.New("journal: invalid record")
	// ErrNotReplayed: Append was called before Replay completed.
	ErrNotReplayed = errors.New("journal: not replayed")
	// ErrNotFound: Read or RemoveFile named a file the journal does not
	// have, or Read named bytes of the current file that are not durable.
	ErrNotFound = errors.New("journal: not found")
	// ErrFileInUse: RemoveFile named the file being written.
	ErrFileInUse = errors.New("journal: file in use")
)

// CorruptError locates corruption. errors.Is(err, ErrCorrupt) and
// corruption.Is(err) hold.
type CorruptError struct {
	File   uint64 // sequence number of the file
	Offset int64  // byte offset in the file
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v: file %016x offset %d: %s", ErrCorrupt, e.File, e.Offset, e.Reason)
}

// Unwrap is ErrCorrupt, so that errors.Is(err, ErrCorrupt) holds and the
// corruption mark ErrCorrupt carries is seen.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corruptf(file uint64, off int64, format string, args ...any) *CorruptError {
	return &CorruptError{File: file, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
