package recordbatch

import (
	"errors"

	"github.com/strata-log/strata/internal/corruption"
)

// Sentinel errors; the package wraps them with %w to say what exactly is
// wrong. See the package documentation for which call returns which.
var (
	// ErrCorrupt marks a malformed batch: CRC mismatch, an impossible
	// length, malformed records or compressed data.
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrCorrupt = corruption.Mark(errors.New("recordbatch: corrupt batch"))
	// ErrShort: the buffer ends before the batch (or its header) does.
	ErrShort = errors.New("recordbatch: short buffer")
	// ErrMagic: the batch is not a v2 (magic 2) record batch.
	ErrMagic = errors.New("recordbatch: unsupported magic")
	// ErrTooLarge: the records section decompresses to more than the
	// bound the caller gave (or MaxDecompressedBytes).
	ErrTooLarge = errors.New("recordbatch: decompressed batch too large")
	// ErrInvalid: Encode or Build was given a batch it cannot encode.
	ErrInvalid = errors.New("recordbatch: invalid batch")
)
