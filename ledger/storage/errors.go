package storage

import (
	"errors"
	"fmt"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/ledger/journal"
)

// Sentinel errors; match with errors.Is. doc.go lists which call returns
// which.
var (
	// ErrFenced: the ledger is fenced and the add is not a recovery add.
	ErrFenced = errors.New("storage: ledger fenced")
	// ErrEntryConflict: an add named an entry this bookie already holds,
	// with different bytes. Entries are immutable (a recovery rewrites the
	// same bytes), so the add is refused and the stored entry kept. Not
	// retryable.
	ErrEntryConflict = errors.New("storage: entry already stored with different bytes")
	// ErrReadOnly: the disk is nearly full; adds are refused until space
	// frees. Retriable (elsewhere).
	ErrReadOnly = errors.New("storage: read-only (disk nearly full)")
	// ErrNoEntry: this bookie never had the entry (or the ledger was
	// deleted) and can vouch for it.
	ErrNoEntry = errors.New("storage: no such entry")
	// ErrUnknown: the entry is not here, but this bookie may have had it
	// (limbo after journal corruption, or an index pointing at a missing
	// journal file). Never to be taken as "absent".
	ErrUnknown = errors.New("storage: entry unknown (the bookie may have lost it)")
	// ErrCorrupt: stored bytes failed verification. Corrupt data is never
	// returned. Errors carrying it also wrap the journal's *CorruptError
	// when there is one.
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrCorrupt = corruption.Mark(errors.New("storage: corrupt"))
	// ErrInvalid: a malformed argument (entry too large, entry id above
	// 2^63-1, LAC below -1, nil callback, last before first).
	ErrInvalid = errors.New("storage: invalid argument")
	// ErrIO: the disk failed a read of an entry (EIO, or any error of the
	// file system that is not one of the above). Nothing was served; the
	// entry may be fine on another bookie, and here once the disk
	// recovers. Counted in strata_bookie_read_errors_total.
	ErrIO = errors.New("storage: disk I/O error")
	// ErrClosed: the storage is closed or closing.
	ErrClosed = errors.New("storage: closed")
	// ErrFailed: a journal write or sync, or an index write, failed; the
	// storage acknowledges nothing more and the process must restart. An
	// add that fails with it has an unknown outcome.
	ErrFailed = errors.New("storage: failed")
)

// translate maps errors from the journal and the index to this package's
// sentinels, keeping the cause in the chain.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrFailed), errors.Is(err, ErrClosed), errors.Is(err, ErrCorrupt),
		errors.Is(err, ErrInvalid), errors.Is(err, ErrEntryConflict):
		return err
	case errors.Is(err, journal.ErrFailed):
		return fmt.Errorf("%w: %w", ErrFailed, err)
	case errors.Is(err, journal.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, journal.ErrTooLarge), errors.Is(err, journal.ErrInvalidRecord):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case corruption.Is(err):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}
