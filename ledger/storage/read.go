package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
)

// readRetries bounds how often a read follows an entry that compaction
// moved (or a delete removed) between the index lookup and the journal read.
const readRetries = 3

// rangeChunk is how many index entries ReadRange looks up at a time.
const rangeChunk = 64

// Read returns an entry. Errors: ErrNoEntry when this bookie can vouch it
// never had the entry (or the ledger was deleted); ErrUnknown when it may
// have had it (limbo, or the index points at a journal file that is gone);
// ErrCorrupt when the stored bytes fail verification (never served);
// ErrIO when the disk fails the read; ErrClosed.
func (s *Storage) Read(ledgerID, entryID uint64) (Entry, error) {
	start := s.now()
	e, err := s.read(ledgerID, entryID, journal.Location{}, false, false)
	if err == nil {
		s.metrics.readLatency.Observe(s.now().Sub(start).Seconds())
	}
	return e, err
}

// read reads an entry, starting from loc if known (from an index scan),
// into a buffer of journal.ReadBuffers if pooled (Entry.Held).
func (s *Storage) read(ledgerID, entryID uint64, loc journal.Location, known, pooled bool) (Entry, error) {
	for attempt := 0; ; attempt++ {
		if !known {
			var err error
			if loc, known, err = s.ix.Get(ledgerID, entryID); err != nil {
				return Entry{}, indexErr(err)
			}
			if !known {
				return Entry{}, s.missing(ledgerID, entryID)
			}
		}
		var rec journal.Record
		var held *[]byte
		var err error
		if pooled {
			rec, held, err = s.j.ReadPooled(loc)
		} else {
			rec, err = s.j.Read(loc)
		}
		switch {
		case err == nil:
			if rec.Type != journal.TypeAdd || rec.LedgerID != ledgerID || rec.EntryID != entryID {
				s.metrics.corruptions.WithLabelValues(corruptionRead).Inc()
				if held != nil {
					journal.ReadBuffers.Put(held)
				}
				return Entry{}, fmt.Errorf("%w: ledger %d entry %d: the index points at a %v record of ledger %d entry %d at %+v",
					ErrCorrupt, ledgerID, entryID, rec.Type, rec.LedgerID, rec.EntryID, loc)
			}
			return Entry{LedgerID: ledgerID, EntryID: entryID, LAC: rec.LAC, Payload: rec.Payload, Held: held}, nil
		case corruption.Is(err):
			s.metrics.corruptions.WithLabelValues(corruptionRead).Inc()
			s.logger.Error("corrupt entry: not served", "ledger", ledgerID, "entry", entryID, "err", err)
			return Entry{}, fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorrupt, ledgerID, entryID, err)
		case errors.Is(err, journal.ErrNotFound):
			// Compaction may have moved the entry, or a delete removed it,
			// and GC the file, since the lookup: look again.
			prev := loc
			if loc, known, err = s.ix.Get(ledgerID, entryID); err != nil {
				return Entry{}, indexErr(err)
			}
			if !known {
				return Entry{}, s.missing(ledgerID, entryID)
			}
			if loc == prev || attempt >= readRetries {
				return Entry{}, fmt.Errorf("%w: ledger %d entry %d is indexed in journal file %016x, which is gone",
					ErrUnknown, ledgerID, entryID, loc.File)
			}
		default:
			return Entry{}, s.readFailed(ledgerID, entryID, loc, translate(err))
		}
	}
}

// readFailed reports a journal read that failed with an I/O error (a
// failing disk): counted, logged at most every readErrorLogEvery, and
// returned wrapped with ErrIO. ErrClosed is returned as it is.
func (s *Storage) readFailed(ledgerID, entryID uint64, loc journal.Location, err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	s.metrics.readErrors.Inc()
	s.readErrorLog.Warn(s.logger, s.now(), "reading an entry failed: disk I/O error; readers go to another copy",
		"ledger", ledgerID, "entry", entryID, "file", loc.File, "offset", loc.Offset, "err", err)
	return fmt.Errorf("%w: ledger %d entry %d: %w", ErrIO, ledgerID, entryID, err)
}

// readErrorLogEvery: at most one line about failed reads per this
// (s.readErrorLog): a failing disk fails every read; the metric counts
// them all.
const readErrorLogEvery = 10 * time.Second

// missing is the answer for an entry the index does not have.
func (s *Storage) missing(ledgerID, entryID uint64) error {
	if s.Limbo() {
		return fmt.Errorf("%w: ledger %d entry %d: not here, and the bookie is in limbo", ErrUnknown, ledgerID, entryID)
	}
	return fmt.Errorf("%w: ledger %d entry %d", ErrNoEntry, ledgerID, entryID)
}

// indexErr translates an index error to this package's: ErrClosed,
// ErrCorrupt, or err as it is.
func indexErr(err error) error {
	if errors.Is(err, index.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if corruption.Is(err) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// ReadRange calls fn with entries first..last of the ledger, in order,
// stopping early at the first entry this bookie does not have, or before an
// entry that would take the payload bytes past maxBytes (maxBytes <= 0: no
// limit); at least one entry is passed if the first is here. If the first
// entry is missing it returns Read's error for it (ErrNoEntry or
// ErrUnknown); a missing entry later just ends the range (nil). Other errors
// (ErrCorrupt, ErrIO) and fn's error are returned as they happen, after the
// entries before them were passed. fn runs without locks held. Each entry
// is read into a buffer of journal.ReadBuffers (Entry.Held), which fn may
// give back once done with the entry.
func (s *Storage) ReadRange(ledgerID, first, last uint64, maxBytes int64, fn func(Entry) error) error {
	if last < first {
		return fmt.Errorf("%w: last entry %d before first %d", ErrInvalid, last, first)
	}
	next, delivered, total := first, 0, int64(0)
	for {
		es, err := s.ix.Entries(ledgerID, next, last, rangeChunk)
		if err != nil {
			return indexErr(err)
		}
		for _, e := range es {
			if e.EntryID != next {
				return s.rangeGap(ledgerID, next, delivered)
			}
			size := int64(e.Location.Length) - journal.RecordHeaderSize
			if delivered > 0 && maxBytes > 0 && total+size > maxBytes {
				return nil
			}
			start := s.now()
			entry, err := s.read(ledgerID, e.EntryID, e.Location, true, true)
			switch {
			case err == nil:
			case delivered > 0 && (errors.Is(err, ErrNoEntry) || errors.Is(err, ErrUnknown)):
				return nil
			default:
				return err
			}
			s.metrics.readLatency.Observe(s.now().Sub(start).Seconds())
			if err := fn(entry); err != nil {
				return err
			}
			delivered++
			total += int64(len(entry.Payload))
			if next == last {
				return nil
			}
			next++
		}
		if len(es) < rangeChunk {
			return s.rangeGap(ledgerID, next, delivered)
		}
	}
}

// rangeGap ends a range at a missing entry.
func (s *Storage) rangeGap(ledgerID, entryID uint64, delivered int) error {
	if delivered > 0 {
		return nil
	}
	return s.missing(ledgerID, entryID)
}

// State returns the ledger's state; false if this bookie has no record of
// the ledger (then LAC and LastEntryID are -1), as after its delete. LAC and
// LastEntryID reflect durable records; Fenced is true from the moment Fence
// is called. A deleted fenced ledger answers false with Fenced still true
// (F1).
func (s *Storage) State(ledgerID uint64) (LedgerState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.mu.ledgers[ledgerID]
	if l == nil || !l.held() {
		return LedgerState{LAC: -1, LastEntryID: -1, Fenced: l != nil && l.fenced}, false
	}
	return l.state(), true
}

// Ledgers returns, in id order, the ids of the ledgers this bookie has a
// record of (the ones State reports): an applied add, fence or LAC, or a
// fence in flight; never a fenced tombstone (F1), so the orphan sweep does
// not delete a deleted ledger again. It reads memory only. The bookie's
// orphan sweep lists these before it lists metad, so a ledger listed here
// had its metadata written before the listing began (writers create the
// metadata first).
func (s *Storage) Ledgers() []uint64 {
	s.mu.Lock()
	ids := make([]uint64, 0, len(s.mu.ledgers))
	for id, l := range s.mu.ledgers {
		if l.held() {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// WaitLAC long-polls: it returns the ledger's state as soon as its LAC is
// above previous (at once if it already is). If ctx ends first it returns
// the current state and ctx's error; ErrClosed if the storage closes.
func (s *Storage) WaitLAC(ctx context.Context, ledgerID uint64, previous int64) (LedgerState, error) {
	s.mu.Lock()
	l := s.ledgerLocked(ledgerID)
	l.waiters++
	defer func() {
		s.mu.Lock()
		l.waiters--
		s.dropIdleLocked(ledgerID, l)
		s.mu.Unlock()
	}()
	for {
		st := l.state()
		if st.LAC > previous {
			s.mu.Unlock()
			return st, nil
		}
		if l.lacAdvanced == nil {
			l.lacAdvanced = make(chan struct{})
		}
		advanced := l.lacAdvanced
		s.mu.Unlock()
		select {
		case <-advanced:
		case <-ctx.Done():
			s.mu.Lock()
			st := l.state()
			s.mu.Unlock()
			return st, ctx.Err()
		case <-s.stopCtx.Done():
			return LedgerState{}, ErrClosed
		}
		s.mu.Lock()
	}
}
