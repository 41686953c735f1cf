package ledger

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// Close stops appends, waits for the pending entries to be acknowledged
// and for AppendAcks level callbacks to be decided (or, when ctx ends
// first, fails them with ErrLedgerClosed: unknown outcome) and for every
// callback to have run, stops the writer's
// background work, and closes the ledger in
// the metadata: state CLOSED, last_entry_id = LAC, length = the bytes of
// entries 0..LAC. Always call it, also after the writer failed: it waits
// for every goroutine the writer started.
//
// A ledger closes exactly once (by compare-and-set). When the CAS conflicts
// Close re-reads: CLOSED at the writer's LAC means an earlier attempt (or a
// recovery that found exactly the acknowledged entries) closed it: success.
// OPEN with only bookie swaps in fragments before the writer's last (a
// repair, W7), or with an ensemble change of the writer whose answer was
// lost: closes on top of it. OPEN otherwise: ErrWriterFailed wrapping
// ErrMetadataConflict. IN_RECOVERY, CLOSED at another entry, or deleted:
// ErrFenced. A fenced writer
// returns ErrFenced without touching the metadata. Calling Close again
// returns the first call's result.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.mu.closing {
		// Another Close is running or ran: wait for its result.
		for !w.mu.closed {
			changed := w.changedLocked()
			w.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
				return ctx.Err()
			}
			w.mu.Lock()
		}
		err := w.mu.closeErr
		w.mu.Unlock()
		return err
	}
	w.mu.closing = true
	w.notifyLocked() // appends waiting for bytes now fail
	for (len(w.mu.entries) > 0 || w.mu.levels.pending() > 0) && w.mu.err == nil {
		changed := w.changedLocked()
		w.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		w.mu.Lock()
		if ctx.Err() != nil {
			w.failLocked(fmt.Errorf("%w: ledger %d closed before the entry was acknowledged (outcome unknown): %w",
				ErrLedgerClosed, w.id, ctx.Err()))
		}
	}
	// Nothing new is scheduled, and what has not started never will.
	w.mu.stopped = true
	w.bg.stop()
	w.mu.Unlock()
	w.bgCancel()
	w.bg.wait()     // no background work runs from here on
	w.waitFlushed() // every callback has run

	w.mu.Lock()
	fenced := w.mu.err != nil && errors.Is(w.mu.err, ErrFenced)
	md := proto.Clone(w.mu.md).(*ledgerpb.LedgerMetadata)
	pending := w.mu.unresolved // an ensemble change that may have applied
	if c := w.mu.change; c != nil {
		pending = c.md
	}
	version, lac, length := w.mu.version, w.mu.lac, w.mu.length
	w.mu.Unlock()

	var err error
	if fenced {
		err = fmt.Errorf("%w: ledger %d: not closed by its writer", ErrFenced, w.id)
	} else {
		err = w.closeMetadata(ctx, md, pending, version, lac, length)
	}
	w.mu.Lock()
	w.mu.closed, w.mu.closeErr = true, err
	if w.mu.err == nil {
		w.mu.err = fmt.Errorf("%w: ledger %d", ErrLedgerClosed, w.id)
	}
	w.notifyLocked()
	w.mu.Unlock()
	if err == nil {
		w.log.Info("ledger closed", "last_entry", lac, "length", length)
	}
	return err
}

// closeMetadata compare-and-sets the metadata to CLOSED at lac. md is the
// writer's durable metadata at version, pending the metadata of an ensemble
// change still being written (nil when none): its answer may have been
// lost after it applied.
func (w *Writer) closeMetadata(ctx context.Context, md, pending *ledgerpb.LedgerMetadata, version, lac, length int64) error {
	mine := md
	backoff := w.opts.MetadataRetryMin
	for {
		closed := proto.Clone(md).(*ledgerpb.LedgerMetadata)
		closed.State = ledgerpb.LedgerState_CLOSED
		closed.LastEntryId = lac
		closed.Length = length
		closed.ClosedAtMs = now(w.env).UnixMilli()
		v, err := w.env.Meta.Update(ctx, closed, version)
		if err == nil {
			w.mu.Lock()
			w.mu.md, w.mu.version = closed, v
			w.mu.Unlock()
			return nil
		}
		if errors.Is(err, ErrNoSuchLedger) {
			// Deleted: a recovery found it empty and its owner dropped it.
			return fmt.Errorf("%w: ledger %d was deleted: %w", ErrFenced, w.id, err)
		}
		if !errors.Is(err, ErrMetadataConflict) {
			// Unknown outcome: wait, then read what is there.
			w.log.Warn("closing: metadata unavailable; retrying", "err", err, "in", backoff)
			if serr := sleep(ctx, w.sched, backoff); serr != nil {
				return fmt.Errorf("ledger %d: closing: %w (last error: %w)", w.id, serr, err)
			}
			backoff = min(2*backoff, w.opts.MetadataRetryMax)
		}
		got, gotVersion, gerr := w.env.Meta.Get(ctx, w.id)
		if errors.Is(gerr, ErrNoSuchLedger) {
			return fmt.Errorf("%w: ledger %d was deleted: %w", ErrFenced, w.id, gerr)
		}
		if gerr != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("ledger %d: closing: %w", w.id, gerr)
			}
			continue
		}
		switch got.State {
		case ledgerpb.LedgerState_CLOSED:
			if got.LastEntryId == lac {
				w.mu.Lock()
				w.mu.md, w.mu.version = got, gotVersion
				w.mu.Unlock()
				return nil
			}
			return fmt.Errorf("%w: ledger %d was closed at entry %d; the writer acknowledged up to %d",
				ErrFenced, w.id, got.LastEntryId, lac)
		case ledgerpb.LedgerState_IN_RECOVERY:
			return fmt.Errorf("%w: ledger %d is being recovered", ErrFenced, w.id)
		default:
			// Still OPEN at another version: an ensemble change whose
			// answer was lost did apply, or a repair swapped bookies in
			// fragments before the last (W7). Close on top of it. Its
			// last fragment must be the writer's own: every acknowledged
			// entry's write set is then the one it was acknowledged on.
			// Anything else changed under the writer, and closing on
			// top of it could name bookies that lack acknowledged entries.
			if !swapsBelowLast(got, mine) && (pending == nil || !swapsBelowLast(got, pending)) {
				return fmt.Errorf("%w: %w: ledger %d changed under its writer (version %d, expected %d)",
					ErrWriterFailed, ErrMetadataConflict, w.id, gotVersion, version)
			}
			md, version = got, gotVersion
		}
	}
}
