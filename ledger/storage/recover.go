package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

const (
	// replayBatchOps bounds the records of one index batch during replay.
	replayBatchOps = 4096
	// replayLogEvery is how often a long replay logs its progress.
	replayLogEvery = 5 * time.Second
	// trimmedMarker is the file, in Dir, that GC creates before it first
	// removes a journal file. From then on the journal alone no longer
	// holds every fence and delete, so a lost index cannot be rebuilt
	// exactly (BookKeeper #2774: a rebuilt index must fence every ledger).
	trimmedMarker = "JOURNAL-TRIMMED"
)

// recovery is Open's replay: it replays the journal from the index
// checkpoint into the index, handles corruption (limbo) and a lost index,
// writes a synced checkpoint at the end of the journal and loads the
// ledger states into memory. It runs once, before the storage serves.
type recovery struct {
	s     *Storage
	start time.Time

	cp            journal.Position // where replay starts
	hasCheckpoint bool
	limbo         index.Limbo
	inLimbo       bool
	// rebuild: the index is lost and GC has removed journal files, so
	// fence and delete records may be gone.
	rebuild bool

	// Replay progress.
	batch          *index.Batch // open, nil between batches
	records, bytes int64
	lastLog        time.Time
	// deleted: ledgers the replayed journal deletes. If its fence records
	// cannot be trusted (limbo, a rebuild), each keeps a fenced tombstone
	// (F1).
	deleted map[uint64]bool
	res     journal.ReplayResult
}

func newRecovery(s *Storage) *recovery {
	start := s.now()
	return &recovery{s: s, start: start, lastLog: start, deleted: map[uint64]bool{}}
}

// run is the whole recovery, in order: read the index's checkpoint and
// limbo state, replay, note corruption, seal (one synced batch of fences,
// tombstones, limbo and checkpoint), load the ledgers into memory.
func (r *recovery) run(ctx context.Context) error {
	s := r.s
	if err := r.readState(); err != nil {
		return err
	}
	if err := r.replay(ctx); err != nil {
		return fmt.Errorf("storage: replaying the journal: %w", err)
	}
	states, err := s.ix.Ledgers()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	r.noteCorruption()
	// One synced batch: the limbo flag and the fences are durable before
	// the checkpoint moves past the corruption that caused them.
	pos := s.j.Position()
	if err := r.seal(states, pos); err != nil {
		return err
	}
	s.checkpointed = pos
	r.load(states, pos)
	r.checkIndexFiles()

	elapsed := s.now().Sub(r.start)
	s.metrics.replaySeconds.Set(elapsed.Seconds())
	s.metrics.replayRecords.Set(float64(r.records))
	s.metrics.limbo.Set(boolGauge(r.inLimbo))
	s.logger.Info("journal replayed", "from", fmt.Sprintf("%016x:%d", r.cp.File, r.cp.Offset), "records", r.records,
		"bytes", r.bytes, "duration", elapsed, "truncated_bytes", r.res.TruncatedBytes,
		"corrupt_ranges", len(r.res.Corrupt), "ledgers", len(states), "limbo", r.inLimbo)
	return nil
}

// readState reads the index's checkpoint and limbo state, checks that the
// checkpoint's journal file is here, and decides whether this is a rebuild
// of a lost index from a trimmed journal.
func (r *recovery) readState() error {
	s := r.s
	var err error
	if r.cp, r.hasCheckpoint, err = s.ix.Checkpoint(); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if r.limbo, r.inLimbo, err = s.ix.Limbo(); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	files := s.j.Files()
	if r.hasCheckpoint && r.cp.File != 0 && !slices.ContainsFunc(files, func(f journal.FileInfo) bool { return f.Seq == r.cp.File }) {
		return fmt.Errorf("%w: the index checkpoint is in journal file %016x, which is missing: "+
			"this journal does not belong with this index", ErrCorrupt, r.cp.File)
	}
	if !r.hasCheckpoint {
		if r.rebuild, err = trimmed(s.fs, s.opts.Dir); err != nil {
			return err
		}
	}
	s.rebuilt = r.rebuild
	if r.rebuild {
		s.logger.Error("the index is missing but garbage collection has removed journal files: rebuilding " +
			"from the journal that is left; every ledger will be fenced, and deleted ledgers may reappear")
	}
	return nil
}

// replay replays the journal from the checkpoint into the index, in
// unsynced batches of replayBatchOps records.
func (r *recovery) replay(ctx context.Context) error {
	var err error
	r.res, err = r.s.j.Replay(r.cp, func(rec journal.Record, loc journal.Location) error {
		return r.apply(ctx, rec, loc)
	})
	if r.batch != nil {
		if err == nil {
			err = r.batch.Commit(false)
		} else {
			r.batch.Close()
		}
		r.batch = nil
	}
	return err
}

// apply applies one replayed record, committing the batch when it is full.
func (r *recovery) apply(ctx context.Context, rec journal.Record, loc journal.Location) error {
	if rec.Type == journal.TypeDelete {
		r.deleted[rec.LedgerID] = true
	}
	if r.batch == nil {
		var err error
		if r.batch, err = r.s.ix.NewBatch(); err != nil {
			return err
		}
	}
	if err := r.applyRecord(r.batch, rec, loc); err != nil {
		return err
	}
	r.records++
	r.bytes += int64(loc.Length)
	if r.batch.Len() < replayBatchOps {
		return nil
	}
	err := r.batch.Commit(false)
	r.batch = nil
	if err != nil {
		return err
	}
	r.logProgress()
	return ctx.Err()
}

// logProgress logs a long replay's progress every replayLogEvery.
func (r *recovery) logProgress() {
	now := r.s.now()
	if now.Sub(r.lastLog) < replayLogEvery {
		return
	}
	elapsed := now.Sub(r.start).Seconds()
	r.s.logger.Info("replaying the journal", "records", r.records, "bytes", r.bytes,
		"records_per_second", int64(float64(r.records)/elapsed), "mb_per_second", float64(r.bytes)/elapsed/1e6)
	r.lastLog = now
}

// noteCorruption enters limbo (in memory, made durable by seal) when the
// replay found corrupt ranges.
func (r *recovery) noteCorruption() {
	if len(r.res.Corrupt) == 0 {
		return
	}
	s := r.s
	r.limbo.CorruptRanges += uint32(len(r.res.Corrupt))
	if !r.inLimbo {
		r.limbo.SinceUnixMs = s.now().UnixMilli()
	}
	r.inLimbo = true
	s.metrics.corruptions.WithLabelValues(corruptionReplay).Add(float64(len(r.res.Corrupt)))
	s.logger.Error("journal corruption: entering limbo. Missing entries will be answered as unknown, "+
		"never as absent, and every ledger is fenced, until an operator clears limbo",
		"corrupt_ranges", fmt.Sprintf("%+v", r.res.Corrupt))
}

// seal writes, in one synced index batch, the fences and tombstones that a
// corrupt or trimmed journal calls for (fenceAll), the limbo state, and the
// checkpoint at pos. states gets the ledgers' states after it.
func (r *recovery) seal(states map[uint64]index.LedgerState, pos journal.Position) error {
	b, err := r.s.ix.NewBatch()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if len(r.res.Corrupt) > 0 || r.rebuild {
		err = r.fenceAll(b, states)
	}
	if err == nil && len(r.res.Corrupt) > 0 {
		err = b.SetLimbo(r.limbo)
	}
	if err == nil {
		err = b.SetCheckpoint(pos)
	}
	if err != nil {
		b.Close()
		return fmt.Errorf("storage: %w", err)
	}
	if err := b.Commit(true); err != nil {
		return fmt.Errorf("storage: recording the checkpoint: %w", err)
	}
	return nil
}

// fenceAll fences, in b, every ledger of states (a fence record may have
// been in the lost bytes; BP-46: fence every ledger locally, and a new
// writer recovers and reopens elsewhere), and keeps a fenced tombstone for
// every ledger the replayed journal deleted (so may its fence record
// have been: without a tombstone, a zombie writer's adds to it would be
// acknowledged again). states gets the new states.
func (r *recovery) fenceAll(b *index.Batch, states map[uint64]index.LedgerState) error {
	var err error
	for ledgerID, st := range states {
		if !st.Fenced {
			if states[ledgerID], err = b.Fence(ledgerID); err != nil {
				return err
			}
		}
	}
	for ledgerID := range r.deleted {
		if _, ok := states[ledgerID]; ok {
			continue // fenced above, a tombstone's included
		}
		if _, err = b.Fence(ledgerID); err == nil {
			states[ledgerID], err = b.Delete(ledgerID, r.s.now().UnixMilli())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// load puts the recovered state in memory: applied position, limbo, and
// every ledger's state.
func (r *recovery) load(states map[uint64]index.LedgerState, pos journal.Position) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.applied = pos
	s.mu.limbo = r.inLimbo
	for ledgerID, st := range states {
		// Which entries were verified is not journaled: the LAC kept
		// is what was vouched for (H2), bounded by the entries held in
		// case it was stored before H1.
		s.mu.ledgers[ledgerID] = &ledger{st: st, exists: true, fenced: st.Fenced, maxQueued: st.LastEntryID,
			maxVerified: min(st.LAC, st.LastEntryID)}
	}
}

// checkIndexFiles reports index entries that point at journal files that
// are gone: reads of them answer ErrUnknown.
func (r *recovery) checkIndexFiles() {
	s := r.s
	have := map[uint64]bool{}
	for _, f := range s.j.Files() {
		have[f.Seq] = true
	}
	for file, u := range s.ix.FileUsage() {
		if !have[file] {
			s.metrics.corruptions.WithLabelValues(corruptionIndex).Inc()
			s.logger.Error("the index points at a journal file that is gone; its entries will be answered as unknown",
				"file", fmt.Sprintf("%016x", file), "live_bytes", u.Bytes, "live_entries", u.Entries)
		}
	}
}

// trimmed reports whether GC has ever removed a journal file in dir.
func trimmed(fsys vfs.FS, dir string) (bool, error) {
	_, err := fsys.Stat(filepath.Join(dir, trimmedMarker))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("storage: %w", err)
}

// markTrimmed durably creates the trimmed marker in dir, once.
func markTrimmed(fsys vfs.FS, dir string) error {
	if ok, err := trimmed(fsys, dir); err != nil || ok {
		return err
	}
	name := filepath.Join(dir, trimmedMarker)
	f, err := fsys.Create(name)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	_, err = f.Write([]byte("journal files have been garbage-collected: the index is needed to know every fence and delete\n"))
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("storage: creating %s: %w", name, err)
	}
	return nil
}
