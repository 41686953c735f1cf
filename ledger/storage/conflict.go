package storage

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
)

// conflict decides whether an add of payload as (ledgerID, entryID),
// journaled at loc, may be applied to b (C2 in doc.go, "Hostile and buggy
// writers"). It returns a non-nil refusal when it may not: ErrEntryConflict
// when the entry is stored with other bytes, or the error that kept the
// stored copy from being read. The second result is an index error, which
// is fatal for the caller. live is false during replay, which repeats the
// decision silently (it was counted and logged when first made).
//
// It runs where adds are applied, in journal order (the applier, or replay),
// against the index as of b, so every add of an entry is compared with the
// one applied before it, however they raced to the bookie, and replay of
// the same journal takes the same decisions.
func (s *Storage) conflict(b *index.Batch, ledgerID, entryID uint64, payload []byte, loc journal.Location, live bool) (refused, err error) {
	prev, had, err := b.Lookup(ledgerID, entryID)
	if err != nil {
		return nil, err
	}
	if !had || prev == loc { // a new entry, or replay meeting the record the index holds
		return nil, nil
	}
	rec, err := s.j.Read(prev)
	switch {
	case err == nil && rec.Type == journal.TypeAdd && rec.LedgerID == ledgerID && rec.EntryID == entryID:
		if bytes.Equal(rec.Payload, payload) {
			return nil, nil // a recovery add or a retry: same bytes, new location
		}
		if live {
			s.metrics.overwritesRefused.Inc()
			s.refusals.Warn(s.logger, s.now(), "refused an add that would replace a stored entry with different bytes",
				"ledger", ledgerID, "entry", entryID, "stored_bytes", len(rec.Payload), "new_bytes", len(payload))
		}
		return fmt.Errorf("%w: ledger %d entry %d", ErrEntryConflict, ledgerID, entryID), nil
	case err == nil, corruption.Is(err), errors.Is(err, journal.ErrNotFound):
		// The stored copy is unreadable (corrupt, or its journal file is
		// gone): reads of it fail, so the new bytes repair it. Without a
		// copy to compare with, this is the one overwrite taken on trust.
		if live {
			s.logger.Warn("an add replaces a stored entry that cannot be read", "ledger", ledgerID,
				"entry", entryID, "stored_at", fmt.Sprintf("%+v", prev), "err", err)
		}
		return nil, nil
	}
	// An I/O error (or the journal closing): keep the stored entry; the
	// add fails with an unknown outcome.
	return fmt.Errorf("storage: ledger %d entry %d: reading the stored entry to compare: %w",
		ledgerID, entryID, translate(err)), nil
}

// applyRecord applies one journal record to b during replay. An add that
// was refused when it was first applied is refused again (conflict).
func (r *recovery) applyRecord(b *index.Batch, rec journal.Record, loc journal.Location) error {
	s := r.s
	var err error
	switch rec.Type {
	case journal.TypeAdd:
		var refused error
		if refused, err = s.conflict(b, rec.LedgerID, rec.EntryID, rec.Payload, loc, false); err == nil && refused == nil {
			_, err = b.Add(rec.LedgerID, rec.EntryID, rec.LAC, loc)
		}
		if refused != nil && !errors.Is(refused, ErrEntryConflict) {
			err = refused // the stored copy is unreadable for another reason: stop the replay
		}
	case journal.TypeFence:
		_, err = b.Fence(rec.LedgerID)
	case journal.TypeLAC:
		_, err = b.SetLAC(rec.LedgerID, rec.LAC)
	case journal.TypeDelete:
		// The fence record, if any, precedes the delete in the journal, so
		// the delete of a fenced ledger leaves its tombstone here too (F1).
		// The journal does not say when the delete was: the tombstone's age
		// counts from this replay, which only keeps it longer.
		_, err = b.Delete(rec.LedgerID, s.now().UnixMilli())
	default:
		err = fmt.Errorf("%w: journal record of type %v at %+v", ErrCorrupt, rec.Type, loc)
	}
	return err
}

// refusalLogEvery: at most one line about refused overwrites per this
// (s.refusals), so that a client sending them in a loop cannot flood the
// log; the metrics count every one.
const refusalLogEvery = 10 * time.Second
