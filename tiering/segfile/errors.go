package segfile

import (
	"errors"
	"fmt"

	"github.com/strata-log/strata/internal/corruption"
)

// Sentinel errors; the package wraps them with %w to say what exactly is
// wrong. See the package documentation for which call returns which.
var (
	// ErrCorrupt marks a segment object that is not what a Writer
	// produces: a checksum mismatch, an impossible length or position, an
	// index that disagrees with the batches, a truncated object. Every
	// such error is a *CorruptError that says where.
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrCorrupt = corruption.Mark(errors.New("segfile: corrupt segment"))
	// ErrInvalidBatch: Writer.Append was given a batch that is not a valid
	// Kafka v2 batch (magic, size, CRC-32C, record count). It also wraps
	// the recordbatch error when there is one.
	ErrInvalidBatch = errors.New("segfile: invalid batch")
	// ErrOffsetOrder: Writer.Append was given a batch whose base offset
	// does not follow the previous batch (or Options.BaseOffset).
	ErrOffsetOrder = errors.New("segfile: offset out of order")
	// ErrEmpty: Writer.Finish was called before any batch was appended.
	ErrEmpty = errors.New("segfile: no batches")
	// ErrFinished: the Writer was already finished.
	ErrFinished = errors.New("segfile: writer finished")
	// ErrTooLarge: the segment's tail (index, footer, trailer) would exceed
	// MaxTailBytes, or its footer 4 GiB.
	ErrTooLarge = errors.New("segfile: segment tail too large")
	// ErrInvalidOptions: Options.Validate failed.
	ErrInvalidOptions = errors.New("segfile: invalid options")
	// ErrIncompleteTail: ParseTail was given bytes that do not reach back
	// to the start of the index; read from Trailer.IndexPos instead.
	ErrIncompleteTail = errors.New("segfile: tail not fully read")
	// ErrMACMismatch is the cause (CorruptError.Err) when an object's MAC
	// or a block tag does not match: its bytes were not written by
	// this cluster under this name (replaced, moved from another name,
	// or damaged), or its MAC is under another key.
	ErrMACMismatch = errors.New("segfile: MAC mismatch")
	// ErrUnauthenticated is the cause (CorruptError.Err) when an object
	// without a MAC (version 1) is read with Auth.Required.
	ErrUnauthenticated = errors.New("segfile: no MAC")
	// ErrNoKey: an authenticated object (version 2) was read without a
	// key (Auth.Key nil). Not corruption: the reader cannot tell.
	ErrNoKey = errors.New("segfile: no tier key to authenticate the object")
)

// CorruptError is the error for a corrupt segment (errors.Is(err,
// ErrCorrupt) holds). Pos is the absolute byte position in the object
// where the problem was found, or -1 when it concerns the object as a
// whole; Section names the part of the format.
type CorruptError struct {
	Pos     int64
	Section string // "header", "data", "index", "footer", "trailer", "object"
	Detail  string
	// Err is the underlying cause when there is one (a recordbatch error,
	// a protobuf error, io.ErrUnexpectedEOF); it is matched by errors.Is.
	Err error
}

func (e *CorruptError) Error() string {
	where := e.Section
	if e.Pos >= 0 {
		where = fmt.Sprintf("%s at byte %d", e.Section, e.Pos)
	}
	msg := fmt.Sprintf("segfile: corrupt segment: %s: %s", where, e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap lets errors.Is match ErrCorrupt and the cause.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

func corruptf(pos int64, section, format string, args ...any) error {
	return &CorruptError{Pos: pos, Section: section, Detail: fmt.Sprintf(format, args...)}
}

func corruptWrap(pos int64, section string, cause error, format string, args ...any) error {
	return &CorruptError{Pos: pos, Section: section, Detail: fmt.Sprintf(format, args...), Err: cause}
}
