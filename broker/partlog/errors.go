package partlog

import (
	"errors"
	"fmt"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
)

// Sentinel errors. Match with errors.Is; the package wraps them with %w.
//
// Which call returns which:
//
//	Open         ErrConflict (the PartitionLog changed during takeover),
//	             ErrFenced (a newer owner epoch is recorded: an
//	             *EpochBehindError), or the
//	             store's / ledger's error, wrapped.
//	Append       ErrCorruptBatch, ErrTooLarge, ErrInflated, ErrInvalidTimestamp,
//	             ErrOutOfOrderSequence, ErrUnknownProducer,
//	             ErrProducerFenced, ErrListFull, ErrNoLedger,
//	             ErrNotEnoughBookies (rejected: nothing written;
//	             also while a roll waits for a stalled writer);
//	             ErrClosed; the failed log's error (ErrFenced,
//	             ErrConflict, ErrUnknownOutcome: refused, nothing written);
//	             ErrUnknownOutcome (the batch was handed to the ledger and
//	             the outcome is unknown: the log failed meanwhile, wrapped
//	             with its error, or ctx ended while waiting for the
//	             acknowledgement, or ErrNotEnoughBookiesAfterAppend: the
//	             writer stalled).
//	Fetch,       *OutOfRangeError, ErrClosed (also once the log failed,
//	ListOffset   its cause in the message only), a ledger read error,
//	             wrapped; below the first ledger,
//	             ErrTierUnavailable or the object store's / segfile's
//	             error (not found, corrupt).
//	Close        the failed log's error, ErrConflict, ErrFenced, or the
//	             store's / ledger's error.
//	Swap         ErrListMoved, ErrClosed, the failed log's error, ctx's
//	             (nothing sent); ErrConflict or ErrUnknownOutcome when
//	             its CAS failed (the log fails). Update: Swap's, or its
//	             edit's. The passes (retention, tierpass, compaction)
//	             return these and their own.
//	ReadPartitionLog  ErrNotFound (no log yet), or the store's error.
var (
	ErrClosed       = errors.New("partlog: closed")
	ErrFenced       = errors.New("partlog: fenced by another owner")
	ErrConflict     = errors.New("partlog: partition log changed under its owner")
	ErrCorruptBatch = errors.New("partlog: corrupt record batch")
	ErrTooLarge     = errors.New("partlog: record batch too large")
	// ErrInflated: a compressed batch whose records decompress to more
	// than max.compression.ratio times its size (InflationBound).
	ErrInflated           = errors.New("partlog: record batch inflates past max.compression.ratio")
	ErrInvalidTimestamp   = errors.New("partlog: record timestamp too far in the future")
	ErrOutOfOrderSequence = errors.New("partlog: out of order sequence number")
	ErrProducerFenced     = errors.New("partlog: producer fenced (stale epoch)")
	// ErrUnknownProducer: the partition holds no state for the batch's
	// producer id and the batch does not start at sequence 0, and no
	// predecessor arrived within SequenceGapWait. Either they are still
	// on their way (the client retries it after them) or the producer's
	// state expired (the client starts a new producer id). Never
	// accepted: appending it would put it before predecessors still in
	// flight.
	ErrUnknownProducer = errors.New("partlog: unknown producer id")
	// ErrAuthorityLost: a quorum acknowledgement came after the owner's
	// authority lapsed (Config.Authority): it does not count, and the log
	// fails (wrapped with ErrUnknownOutcome: the entry may be stored).
	ErrAuthorityLost  = errors.New("partlog: the owner's metad session may have expired")
	ErrUnknownOutcome = errors.New("partlog: write outcome unknown")
	// ErrListMoved: a Swap whose snapshot is no longer the log's list (a
	// roll or another swap came first): nothing was written; take a new
	// snapshot (Update does).
	ErrListMoved = errors.New("partlog: the segment list moved since the snapshot")
	// ErrTierUnavailable: a read from the object store failed in a way
	// that may pass (timeout, 5xx, a body cut short): retry. A missing or
	// corrupt object is not this (T10: the error stays until an operator
	// acts).
	ErrTierUnavailable = errors.New("partlog: object store unavailable")
	// ErrNotFound is metaclient.ErrNotFound: ReadPartitionLog (and
	// Store.Get) of a missing key.
	ErrNotFound = metaclient.ErrNotFound
	// ErrListFull: the open segment holds MaxSegmentEntries and cannot
	// roll, because one more segment could make the PartitionLog too
	// large for metad (L1 in roll.go). Nothing was written; appends
	// succeed again once retention (or tiering) shortens the list.
	ErrListFull = errors.New("partlog: the partition's segment list is full")
	// ErrNoLedger: the log had no open segment (P8) and no ledger could
	// be created for the append (too few writable bookies, metad
	// unavailable). Nothing was written; the log stays healthy.
	ErrNoLedger = errors.New("partlog: no ledger for the append")
	// ErrNotEnoughBookies: fewer than the ack quorum of the open ledger's
	// bookies take writes (they failed, or turned read-only with a full
	// disk) and no spare bookie could replace them, so an append could
	// not be acknowledged until they come back (Kafka's
	// NOT_ENOUGH_REPLICAS). Nothing was written; the log stays healthy.
	ErrNotEnoughBookies = errors.New("partlog: fewer bookies take writes than the ack quorum")
	// ErrNotEnoughBookiesAfterAppend: the append was handed to the open
	// ledger's writer, which then stalled (ledger.Writer.Stalled: fewer
	// than the ack quorum of its bookies take writes and no spare can
	// replace them), so it was answered at once instead of at its
	// deadline. Its outcome is unknown: the writer keeps the entry and
	// writes it if the bookies come back, so it wraps ErrUnknownOutcome
	// (not ErrNotEnoughBookies, which says nothing was written). Kafka's
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND.
	ErrNotEnoughBookiesAfterAppend = fmt.Errorf("%w: fewer bookies take writes than the ack quorum, and none can replace them", ErrUnknownOutcome)
)

// OutOfRangeError is returned when a fetch or read asks for an offset outside
// [Start, End] (End is the high watermark: fetching at it waits).
type OutOfRangeError struct {
	Offset, Start, End int64
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("partlog: offset %d out of range: valid offsets are %d..%d", e.Offset, e.Start, e.End)
}

// writeError maps a ledger writer error to the log's terminal error.
func writeError(err error) error {
	if errors.Is(err, ledger.ErrFenced) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}

// EpochBehindError is Open's ErrFenced: the PartitionLog records an owner
// epoch above the one Open was given.
type EpochBehindError struct {
	Key            string
	Recorded, Ours int64
}

func (e *EpochBehindError) Error() string {
	return fmt.Sprintf("%v: %s records owner epoch %d, ours is %d", ErrFenced, e.Key, e.Recorded, e.Ours)
}

func (e *EpochBehindError) Unwrap() error { return ErrFenced }
