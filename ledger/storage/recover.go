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

// recover replays the journal from the index checkpoint into the index,
// handles corruption (limbo) and a lost index, writes a synced checkpoint at
// the end of the journal and loads the ledger states into memory.
func (s *Storage) recover(ctx context.Context) error {
	start := s.now()
	cp, hasCheckpoint, err := s.ix.Checkpoint()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	limbo, inLimbo, err := s.ix.Limbo()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	files := s.j.Files()
	if hasCheckpoint && cp.File != 0 && !slices.ContainsFunc(files, func(f journal.FileInfo) bool { return f.Seq == cp.File }) {
		return fmt.Errorf("%w: the index checkpoint is in journal file %016x, which is missing: "+
			"this journal does not belong with this index", ErrCorrupt, cp.File)
	}
	rebuild := false
	if !hasCheckpoint {
		if rebuild, err = s.trimmed(); err != nil {
			return err
		}
	}
	s.rebuilt = rebuild
	if rebuild {
		s.logger.Error("the index is missing but garbage collection has removed journal files: rebuilding " +
			"from the journal that is left; every ledger will be fenced, and deleted ledgers may reappear")
	}

	var b *index.Batch
	var records, bytes int64
	lastLog := start
	// Ledgers the replayed journal deletes: if its fence records cannot be
	// trusted (limbo, a rebuild), each keeps a fenced tombstone (F1).
	deleted := map[uint64]bool{}
	res, err := s.j.Replay(cp, func(rec journal.Record, loc journal.Location) error {
		if rec.Type == journal.TypeDelete {
			deleted[rec.LedgerID] = true
		}
		if b == nil {
			var err error
			if b, err = s.ix.NewBatch(); err != nil {
				return err
			}
		}
		if err := s.applyRecord(b, rec, loc); err != nil {
			return err
		}
		records++
		bytes += int64(loc.Length)
		if b.Len() < replayBatchOps {
			return nil
		}
		err := b.Commit(false)
		b = nil
		if err != nil {
			return err
		}
		if now := s.now(); now.Sub(lastLog) >= replayLogEvery {
			elapsed := now.Sub(start).Seconds()
			s.logger.Info("replaying the journal", "records", records, "bytes", bytes,
				"records_per_second", int64(float64(records)/elapsed), "mb_per_second", float64(bytes)/elapsed/1e6)
			lastLog = now
		}
		return ctx.Err()
	})
	if b != nil {
		if err == nil {
			err = b.Commit(false)
		} else {
			b.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("storage: replaying the journal: %w", err)
	}

	states, err := s.ix.Ledgers()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if len(res.Corrupt) > 0 {
		limbo.CorruptRanges += uint32(len(res.Corrupt))
		if !inLimbo {
			limbo.SinceUnixMs = s.now().UnixMilli()
		}
		inLimbo = true
		s.metrics.corruptions.WithLabelValues(corruptionReplay).Add(float64(len(res.Corrupt)))
		s.logger.Error("journal corruption: entering limbo. Missing entries will be answered as unknown, "+
			"never as absent, and every ledger is fenced, until an operator clears limbo",
			"corrupt_ranges", fmt.Sprintf("%+v", res.Corrupt))
	}
	// One synced batch: the limbo flag and the fences are durable before
	// the checkpoint moves past the corruption that caused them.
	pos := s.j.Position()
	b, err = s.ix.NewBatch()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if len(res.Corrupt) > 0 || rebuild {
		// A fence record may have been in the lost bytes (BP-46: fence every
		// ledger locally); a new writer recovers and reopens elsewhere.
		for ledgerID, st := range states {
			if !st.Fenced {
				if states[ledgerID], err = b.Fence(ledgerID); err != nil {
					b.Close()
					return fmt.Errorf("storage: %w", err)
				}
			}
		}
		// So may the fence record of a ledger whose delete record was
		// replayed: without a tombstone, a zombie writer's adds to it
		// would be acknowledged again.
		for ledgerID := range deleted {
			if _, ok := states[ledgerID]; ok {
				continue // fenced above, a tombstone's included
			}
			if _, err = b.Fence(ledgerID); err == nil {
				states[ledgerID], err = b.Delete(ledgerID, s.now().UnixMilli())
			}
			if err != nil {
				b.Close()
				return fmt.Errorf("storage: %w", err)
			}
		}
	}
	if len(res.Corrupt) > 0 {
		if err := b.SetLimbo(limbo); err != nil {
			b.Close()
			return fmt.Errorf("storage: %w", err)
		}
	}
	if err := b.SetCheckpoint(pos); err != nil {
		b.Close()
		return fmt.Errorf("storage: %w", err)
	}
	if err := b.Commit(true); err != nil {
		return fmt.Errorf("storage: recording the checkpoint: %w", err)
	}
	s.checkpointed = pos

	s.mu.Lock()
	s.mu.applied = pos
	s.mu.limbo = inLimbo
	for ledgerID, st := range states {
		s.mu.ledgers[ledgerID] = &ledger{st: st, exists: true, fenced: st.Fenced, maxQueued: st.LastEntryID}
	}
	s.mu.Unlock()
	s.checkIndexFiles()

	elapsed := s.now().Sub(start)
	s.metrics.replaySeconds.Set(elapsed.Seconds())
	s.metrics.replayRecords.Set(float64(records))
	s.metrics.limbo.Set(boolGauge(inLimbo))
	s.logger.Info("journal replayed", "from", fmt.Sprintf("%016x:%d", cp.File, cp.Offset), "records", records,
		"bytes", bytes, "duration", elapsed, "truncated_bytes", res.TruncatedBytes,
		"corrupt_ranges", len(res.Corrupt), "ledgers", len(states), "limbo", inLimbo)
	return nil
}

// checkIndexFiles reports index entries that point at journal files that
// are gone: reads of them answer ErrUnknown.
func (s *Storage) checkIndexFiles() {
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

// trimmed reports whether GC has ever removed a journal file here.
func (s *Storage) trimmed() (bool, error) {
	_, err := s.fs.Stat(filepath.Join(s.opts.Dir, trimmedMarker))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("storage: %w", err)
}

// markTrimmed durably creates the trimmed marker, once.
func (s *Storage) markTrimmed() error {
	if ok, err := s.trimmed(); err != nil || ok {
		return err
	}
	name := filepath.Join(s.opts.Dir, trimmedMarker)
	f, err := s.fs.Create(name)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	_, err = f.Write([]byte("journal files have been garbage-collected: the index is needed to know every fence and delete\n"))
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = s.fs.SyncDir(s.opts.Dir)
	}
	if err != nil {
		return fmt.Errorf("storage: creating %s: %w", name, err)
	}
	return nil
}
