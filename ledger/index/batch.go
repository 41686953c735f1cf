package index

import (
	"errors"
	"fmt"
	"maps"
	"math"

	"github.com/cockroachdb/pebble"

	"github.com/strata-log/strata/ledger/journal"
)

// Batch applies journal records to the index atomically: entries, ledger
// states and per-file accounting change together, so any prefix of
// committed batches is self-consistent (the usage keys always equal the sum
// over the entry keys). Every operation reads through the batch, so a batch
// may hold several records of one ledger, a Delete and later Adds included.
//
// Only one Batch exists at a time: NewBatch blocks until the previous one is
// committed or closed. A Batch is not safe for concurrent use.
type Batch struct {
	ix *Index
	b  *pebble.Batch
	batchMaps
	ops  int
	err  error // first accounting violation; fails Commit
	done bool
	// key is where state builds the ledger key it reads: a key passed
	// to Pebble's Get escapes, and the Batch is on the heap already.
	key [ledgerKeyLen]byte
}

// batchMaps is what a batch knows of the records it holds. Batches take
// turns (NewBatch blocks while one is open), so the index keeps the maps
// of the last one, cleared, for the next: a batch of a few records
// (a journal group of a lightly loaded bookie) would otherwise cost more
// in maps than in records.
type batchMaps struct {
	states  map[uint64]batchState
	entries map[ledgerEntry]journal.Location // locations set here
	deleted map[uint64]bool                  // ledgers range-deleted here
	usage   map[fileLedger]Usage             // absolute usage of the pairs touched here
}

// maxSpareEntries bounds the maps kept for the next batch. Clearing a map
// costs in proportion to the most it ever held, and a batch larger than
// this pays for its maps many times over with its records: its maps are
// left to the collector.
const maxSpareEntries = 256

func newBatchMaps() batchMaps {
	return batchMaps{
		states:  map[uint64]batchState{},
		entries: map[ledgerEntry]journal.Location{},
		deleted: map[uint64]bool{},
		usage:   map[fileLedger]Usage{},
	}
}

// reusable reports whether m is small enough to keep for the next batch.
func (m *batchMaps) reusable() bool {
	return max(len(m.states), len(m.entries), len(m.deleted), len(m.usage)) <= maxSpareEntries
}

func (m *batchMaps) clear() {
	clear(m.states)
	clear(m.entries)
	clear(m.deleted)
	clear(m.usage)
}

type batchState struct {
	st     LedgerState
	exists bool
	dirty  bool
}

type ledgerEntry struct {
	ledger, entry uint64
}

type fileLedger struct {
	file, ledger uint64
}

// NewBatch starts a batch. It blocks while another batch is open; the
// caller must Commit or Close it, or Close of the index waits forever.
func (ix *Index) NewBatch() (*Batch, error) {
	ix.writeMu.Lock()
	ix.life.RLock()
	closed := ix.life.closed
	ix.life.RUnlock()
	if closed {
		ix.writeMu.Unlock()
		return nil, ErrClosed
	}
	b := &Batch{ix: ix, b: ix.db.NewBatch(), batchMaps: ix.spare}
	ix.spare = batchMaps{}
	if b.states == nil {
		b.batchMaps = newBatchMaps()
	}
	return b, nil
}

// Len is the number of operations in the batch.
func (b *Batch) Len() int { return b.ops }

func validLocation(loc journal.Location) bool {
	return loc.File > 0 && loc.Offset >= journal.FileHeaderSize && loc.Length >= journal.RecordHeaderSize
}

// state returns the ledger's state as of this batch; a change to it is
// made with setState.
func (b *Batch) state(ledgerID uint64) (batchState, error) {
	if s, ok := b.states[ledgerID]; ok {
		return s, nil
	}
	s := batchState{st: emptyState}
	putLedgerKey(b.key[:], ledgerID)
	v, closer, err := b.ix.db.Get(b.key[:])
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return batchState{}, fmt.Errorf("index: %w", err)
	default:
		s.st, err = decodeState(v) // copies what it keeps
		closer.Close()
		if err != nil {
			return batchState{}, err
		}
		s.exists = true
	}
	b.states[ledgerID] = s
	return s, nil
}

func (b *Batch) setState(ledgerID uint64, s batchState) { b.states[ledgerID] = s }

// lookup returns an entry's location as of this batch.
func (b *Batch) lookup(ledgerID, entryID uint64) (journal.Location, bool, error) {
	if loc, ok := b.entries[ledgerEntry{ledgerID, entryID}]; ok {
		return loc, true, nil
	}
	if b.deleted[ledgerID] {
		return journal.Location{}, false, nil
	}
	v, ok, err := b.ix.get(entryKey(ledgerID, entryID))
	if err != nil || !ok {
		return journal.Location{}, false, err
	}
	loc, err := decodeLocation(v)
	return loc, err == nil, err
}

// Lookup returns where entry (ledgerID, entryID) is as of this batch
// (committed state plus this batch's operations), and whether the ledger
// holds it. An entry above the ledger's LastEntryID costs no read
// (invariant 2). The storage engine uses it to compare a re-added entry
// with the stored one before Add replaces it.
func (b *Batch) Lookup(ledgerID, entryID uint64) (journal.Location, bool, error) {
	s, err := b.state(ledgerID)
	if err != nil {
		return journal.Location{}, false, err
	}
	if !s.exists || entryID > math.MaxInt64 || int64(entryID) > s.st.LastEntryID {
		return journal.Location{}, false, nil
	}
	return b.lookup(ledgerID, entryID)
}

// addUsage changes the usage of (file, ledger) by delta.
func (b *Batch) addUsage(file, ledgerID uint64, delta Usage) {
	key := fileLedger{file, ledgerID}
	u, ok := b.usage[key]
	if !ok {
		b.ix.mu.RLock()
		u = b.ix.mu.usage[file][ledgerID]
		b.ix.mu.RUnlock()
	}
	u.Bytes += delta.Bytes
	u.Entries += delta.Entries
	if (u.Bytes < 0 || u.Entries < 0) && b.err == nil {
		b.err = fmt.Errorf("%w: usage of ledger %d in journal file %d would be %+v", ErrCorrupt, ledgerID, file, u)
	}
	b.usage[key] = u
}

func (b *Batch) setEntry(ledgerID, entryID uint64, loc journal.Location) error {
	if err := b.b.Set(entryKey(ledgerID, entryID), encodeLocation(loc), nil); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	b.entries[ledgerEntry{ledgerID, entryID}] = loc
	b.addUsage(loc.File, ledgerID, Usage{Bytes: int64(loc.Length), Entries: 1})
	return nil
}

// Add stores entry (ledgerID, entryID) at loc, replacing any earlier
// location of the entry, and raises the ledger's LastEntryID and LAC. It
// returns the ledger's state after the add. Re-applying the same add is a
// no-op for the accounting (replay re-applies records the index may already
// hold).
func (b *Batch) Add(ledgerID, entryID uint64, lac int64, loc journal.Location) (LedgerState, error) {
	if entryID > math.MaxInt64 || lac < -1 || !validLocation(loc) {
		return LedgerState{}, fmt.Errorf("%w: add %d/%d lac %d at %+v", ErrInvalid, ledgerID, entryID, lac, loc)
	}
	s, err := b.state(ledgerID)
	if err != nil {
		return LedgerState{}, err
	}
	// LastEntryID bounds every stored id, so a higher id needs no lookup:
	// the common append costs no read.
	if s.exists && int64(entryID) <= s.st.LastEntryID {
		prev, had, err := b.lookup(ledgerID, entryID)
		if err != nil {
			return LedgerState{}, err
		}
		if had {
			b.addUsage(prev.File, ledgerID, Usage{Bytes: -int64(prev.Length), Entries: -1})
		}
	}
	if err := b.setEntry(ledgerID, entryID, loc); err != nil {
		return LedgerState{}, err
	}
	s.exists, s.dirty = true, true
	// A recovery add to a fenced tombstone (re-replication, a recovering
	// writer) makes it a fenced ledger with entries again.
	s.st.Tombstone, s.st.DeletedUnixMs = false, 0
	s.st.LastEntryID = max(s.st.LastEntryID, int64(entryID))
	s.st.LAC = max(s.st.LAC, lac)
	b.setState(ledgerID, s)
	b.ops++
	return s.st, nil
}

// Relocate points entry (ledgerID, entryID) at to, but only if it is still
// at from (compaction copied it from there); it reports whether it did.
// The ledger's state does not change.
func (b *Batch) Relocate(ledgerID, entryID uint64, from, to journal.Location) (bool, error) {
	if !validLocation(to) {
		return false, fmt.Errorf("%w: relocate %d/%d to %+v", ErrInvalid, ledgerID, entryID, to)
	}
	cur, had, err := b.lookup(ledgerID, entryID)
	if err != nil || !had || cur != from {
		return false, err
	}
	b.addUsage(from.File, ledgerID, Usage{Bytes: -int64(from.Length), Entries: -1})
	if err := b.setEntry(ledgerID, entryID, to); err != nil {
		return false, err
	}
	b.ops++
	return true, nil
}

// Fence marks the ledger fenced, creating its state if needed. A fenced
// tombstone stays one.
func (b *Batch) Fence(ledgerID uint64) (LedgerState, error) {
	s, err := b.state(ledgerID)
	if err != nil {
		return LedgerState{}, err
	}
	s.exists, s.dirty = true, true
	s.st.Fenced = true
	b.setState(ledgerID, s)
	b.ops++
	return s.st, nil
}

// SetLAC raises the ledger's LAC to lac (an explicit LAC), creating its
// state if needed. A fenced tombstone stays one (the storage engine keeps
// its LAC at -1: H1 bounds a LAC by the entries held).
func (b *Batch) SetLAC(ledgerID uint64, lac int64) (LedgerState, error) {
	if lac < -1 {
		return LedgerState{}, fmt.Errorf("%w: LAC %d", ErrInvalid, lac)
	}
	s, err := b.state(ledgerID)
	if err != nil {
		return LedgerState{}, err
	}
	s.exists, s.dirty = true, true
	s.st.LAC = max(s.st.LAC, lac)
	b.setState(ledgerID, s)
	b.ops++
	return s.st, nil
}

// Delete removes the ledger: one DeleteRange over its entry keys (never a
// tombstone per entry: Pulsar #1737), its usage in every file, and its
// state, unless it is fenced: then the state becomes a fenced tombstone
// deleted at atUnixMs (invariant 4), and it returns that state. A delete
// of a tombstone leaves it as it is, deletion time included, so replay
// changes nothing. The accounting needs no scan of the entries: the 'f'
// keys already say which files hold the ledger's entries.
func (b *Batch) Delete(ledgerID uint64, atUnixMs int64) (LedgerState, error) {
	s, err := b.state(ledgerID)
	if err != nil {
		return LedgerState{}, err
	}
	if err := b.b.DeleteRange(entryKey(ledgerID, 0), entryRangeEnd(ledgerID), nil); err != nil {
		return LedgerState{}, fmt.Errorf("index: %w", err)
	}
	b.deleted[ledgerID] = true
	maps.DeleteFunc(b.entries, func(k ledgerEntry, _ journal.Location) bool { return k.ledger == ledgerID })
	switch {
	case s.exists && s.st.Tombstone:
	case s.exists && s.st.Fenced:
		tomb := emptyState
		tomb.Fenced, tomb.Tombstone, tomb.DeletedUnixMs = true, true, atUnixMs
		b.setState(ledgerID, batchState{st: tomb, exists: true, dirty: true})
	default:
		b.setState(ledgerID, batchState{st: emptyState, dirty: true})
	}
	b.ix.mu.RLock()
	for file, byLedger := range b.ix.mu.usage {
		if _, ok := byLedger[ledgerID]; ok {
			if _, touched := b.usage[fileLedger{file, ledgerID}]; !touched {
				b.usage[fileLedger{file, ledgerID}] = Usage{}
			}
		}
	}
	b.ix.mu.RUnlock()
	for key := range b.usage {
		if key.ledger == ledgerID {
			b.usage[key] = Usage{}
		}
	}
	b.ops++
	return b.states[ledgerID].st, nil
}

// ExpireTombstone removes the ledger's state if it is a fenced tombstone
// deleted at or before deletedBeforeUnixMs, and reports whether it did.
// The ledger then is unknown here, fence included (invariant 4).
func (b *Batch) ExpireTombstone(ledgerID uint64, deletedBeforeUnixMs int64) (bool, error) {
	s, err := b.state(ledgerID)
	if err != nil || !s.exists || !s.st.Tombstone || s.st.DeletedUnixMs > deletedBeforeUnixMs {
		return false, err
	}
	b.setState(ledgerID, batchState{st: emptyState, dirty: true})
	b.ops++
	return true, nil
}

// SetCheckpoint records pos as the checkpoint when the batch commits.
func (b *Batch) SetCheckpoint(pos journal.Position) error {
	b.ops++
	return b.b.Set(metaCheckpointKey, encodePosition(pos), nil)
}

// SetLimbo records the limbo flag when the batch commits.
func (b *Batch) SetLimbo(l Limbo) error {
	b.ops++
	return b.b.Set(metaLimboKey, encodeLimbo(l), nil)
}

// Commit writes the batch: unsynced (pebble.NoSync) unless sync, since the
// journal can rebuild anything after the last synced checkpoint. On error
// nothing of the batch is applied. Either way the batch is finished.
func (b *Batch) Commit(sync bool) error {
	if b.done {
		return errors.New("index: batch already finished")
	}
	defer b.finish()
	if b.err != nil {
		return b.err
	}
	for ledgerID, s := range b.states {
		if !s.dirty {
			continue
		}
		var err error
		if s.exists {
			err = b.b.Set(ledgerKey(ledgerID), encodeState(s.st), nil)
		} else {
			err = b.b.Delete(ledgerKey(ledgerID), nil)
		}
		if err != nil {
			return fmt.Errorf("index: %w", err)
		}
	}
	for key, u := range b.usage {
		if u != (Usage{}) && (u.Bytes <= 0 || u.Entries <= 0) {
			return fmt.Errorf("%w: usage of ledger %d in journal file %d would be %+v", ErrCorrupt, key.ledger, key.file, u)
		}
		var err error
		if u == (Usage{}) {
			err = b.b.Delete(fileKey(key.file, key.ledger), nil)
		} else {
			err = b.b.Set(fileKey(key.file, key.ledger), encodeUsage(u), nil)
		}
		if err != nil {
			return fmt.Errorf("index: %w", err)
		}
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	if err := b.b.Commit(opts); err != nil {
		return fmt.Errorf("index: commit: %w", err)
	}
	ix := b.ix
	ix.mu.Lock()
	for key, u := range b.usage {
		byLedger := ix.mu.usage[key.file]
		if u == (Usage{}) {
			delete(byLedger, key.ledger)
			if len(byLedger) == 0 {
				delete(ix.mu.usage, key.file)
			}
			continue
		}
		if byLedger == nil {
			byLedger = map[uint64]Usage{}
			ix.mu.usage[key.file] = byLedger
		}
		byLedger[key.ledger] = u
	}
	ix.mu.Unlock()
	return nil
}

// Close abandons the batch if it was not committed. It is safe to call
// after Commit.
func (b *Batch) Close() {
	if !b.done {
		b.finish()
	}
}

func (b *Batch) finish() {
	b.done = true
	b.b.Close()
	if b.reusable() {
		b.batchMaps.clear()
		b.ix.spare = b.batchMaps
	}
	b.batchMaps = batchMaps{} // a finished batch uses them no more
	b.ix.writeMu.Unlock()
}
