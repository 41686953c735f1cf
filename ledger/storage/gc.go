package storage

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
)

// compactionScan is how many index entries compaction reads at a time.
const compactionScan = 256

// GCResult summarises one garbage collection run.
type GCResult struct {
	RemovedFiles   int   // files removed, dead or compacted
	ReclaimedBytes int64 // their sizes
	CompactedFiles int   // files whose live entries were copied, then removed
	Major          bool  // the run compacted at MajorCompactBelowLiveRatio
}

// GC forgets the fenced tombstones older than FenceTombstoneTTL, removes
// journal files that are entirely before the synced checkpoint and hold no
// live entry, then compacts such files whose live bytes are
// below CompactBelowLiveRatio of their size (MajorCompactBelowLiveRatio in
// a major run: see compactionThresholdLocked): it re-appends their live
// entries (durably, through the journal), points the index at the copies,
// syncs a checkpoint past them, and removes the file. The file being
// written, and files at or after the checkpoint (replay needs them), are
// never touched. Compaction is skipped for a file larger than the free
// space less a journal file's reservation, and its copies are paced to
// CompactMaxBytesPerSecond. Any error stops the run with
// nothing removed on its account (a file whose live entry is corrupt is set
// aside and reported instead).
// The background loop runs GC every GCInterval; the result is also logged.
func (s *Storage) GC(ctx context.Context) (GCResult, error) {
	if err := s.begin(); err != nil {
		return GCResult{}, err
	}
	defer s.closeMu.RUnlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stopCtx, cancel)()
	s.gc.mu.Lock()
	defer s.gc.mu.Unlock()

	var res GCResult
	err := s.gc.runLocked(ctx, &res)
	if res.RemovedFiles > 0 || err != nil {
		s.logger.Info("garbage collection", "removed_files", res.RemovedFiles, "reclaimed_bytes", res.ReclaimedBytes,
			"compacted_files", res.CompactedFiles, "major", res.Major, "err", err)
	}
	return res, err
}

// collector is the storage's garbage collection: it expires old fenced
// tombstones, removes journal files with nothing live, and compacts the
// mostly dead ones (see GC). It decides what to collect from the index's
// accounting and the disk, and writes only through the journal, the
// applier and the index, as every other writer does.
type collector struct {
	s    *Storage
	kick chan struct{} // a run soon (after a Delete)
	// mu is held for a whole run: one run at a time.
	mu struct {
		sync.Mutex
		quarantined map[uint64]bool // files compaction found corrupt
		lastMajor   time.Time       // start of the last major run (or Open)
	}
}

func newCollector(s *Storage) *collector {
	c := &collector{s: s, kick: make(chan struct{}, 1)}
	c.mu.quarantined = map[uint64]bool{}
	c.mu.lastMajor = s.now()
	return c
}

// runLocked is one run: leftovers of an earlier run's removals, a fresh
// checkpoint, tombstone expiry, dead files, then compaction.
// REQUIRES: c.mu held.
func (c *collector) runLocked(ctx context.Context, res *GCResult) error {
	s := c.s
	removals := c.removalRate()
	// A removal an I/O error or a stop cut short in an earlier run
	// (RemoveFile runs only here, under c.mu).
	if _, err := s.j.RemoveLeftovers(ctx, ctxtime.NewPacer(removals, nil)); err != nil {
		return fmt.Errorf("storage: gc: %w", translate(err))
	}
	// A fresh checkpoint lets this run consider every file written so far.
	if err := s.checkpoint(); err != nil {
		return err
	}
	if err := c.expireTombstonesLocked(); err != nil {
		return err
	}
	ratio, major := c.compactionThresholdLocked()
	res.Major = major
	compact, err := c.removeDeadLocked(ctx, ratio, removals, res)
	if err != nil {
		return err
	}
	pace := ctxtime.NewPacer(float64(s.opts.CompactMaxBytesPerSecond), nil)
	for _, f := range compact {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.compactLocked(ctx, f, pace, removals, res); err != nil {
			return err
		}
	}
	return nil
}

// removeDeadLocked removes the journal files GC may touch (entirely before
// the synced checkpoint, not being written) that hold nothing live, and
// returns those whose live bytes are below ratio of their size, set aside
// files excepted: the files to compact, emptiest first (the most space
// for the least copying).
// REQUIRES: c.mu held.
func (c *collector) removeDeadLocked(ctx context.Context, ratio, removals float64, res *GCResult) ([]journal.FileInfo, error) {
	s := c.s
	s.cpMu.Lock()
	cp := s.checkpointed
	s.cpMu.Unlock()
	current := s.j.Position().File
	usage := s.ix.FileUsage()
	var compact []journal.FileInfo
	for _, f := range s.j.Files() {
		if f.Seq >= cp.File || f.Seq == current {
			continue
		}
		if live := usage[f.Seq].Bytes; live > 0 {
			if float64(live) < ratio*float64(f.Size) && !c.mu.quarantined[f.Seq] {
				compact = append(compact, f)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := c.removeFile(ctx, f, removals, res); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(compact, func(a, b journal.FileInfo) int {
		ra := float64(usage[a.Seq].Bytes) / float64(a.Size)
		rb := float64(usage[b.Seq].Bytes) / float64(b.Size)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	return compact, nil
}

// compactLocked compacts f and removes it once nothing live is left in it.
// It skips f when the disk has less free space than f and a journal file's
// reservation (the copies may start a journal file, and a reservation that
// fails is fatal), and sets it aside when one of its live entries is
// corrupt; it leaves f for a later run when concurrent writes kept an
// entry in it live.
// REQUIRES: c.mu held.
func (c *collector) compactLocked(ctx context.Context, f journal.FileInfo, pace *ctxtime.Pacer, removals float64, res *GCResult) error {
	s := c.s
	du, err := s.fs.DiskUsage(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("storage: gc: %w", err)
	}
	if int64(du.FreeBytes) < f.Size+s.disk.reserve() {
		s.logger.Warn("not compacting: less free space than the file and a journal file's reservation",
			"file", fmt.Sprintf("%016x", f.Seq), "size", f.Size, "free_bytes", du.FreeBytes)
		return nil
	}
	err = c.compactFile(ctx, f.Seq, pace)
	if corruption.Is(err) {
		// Keep the file (its other entries may still be read) and go on
		// with the others; never silently (BookKeeper #4596).
		c.mu.quarantined[f.Seq] = true
		s.metrics.corruptions.WithLabelValues(corruptionCompaction).Inc()
		s.logger.Error("compaction found a corrupt live entry: file kept and set aside",
			"file", fmt.Sprintf("%016x", f.Seq), "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	// The copies' index updates were unsynced: sync a checkpoint past
	// them before the originals go.
	if err := s.checkpoint(); err != nil {
		return err
	}
	if live := s.ix.FileUsage()[f.Seq]; live.Bytes > 0 {
		s.logger.Info("file still has live entries after compaction (concurrent writes); retrying next run",
			"file", fmt.Sprintf("%016x", f.Seq), "live_bytes", live.Bytes, "live_entries", live.Entries)
		return nil
	}
	if err := c.removeFile(ctx, f, removals, res); err != nil {
		return err
	}
	res.CompactedFiles++
	s.metrics.compactedFiles.Inc()
	return nil
}

// compactionThresholdLocked is the live ratio below which this run compacts a
// file: CompactBelowLiveRatio (minor), or MajorCompactBelowLiveRatio when
// it is higher and the run is major: MajorCompactInterval has passed since
// the last major run, or the disk is used at or above
// MajorCompactAboveUsed. 0 when compaction is off.
// REQUIRES: c.mu held.
func (c *collector) compactionThresholdLocked() (ratio float64, major bool) {
	s := c.s
	o := s.opts
	if o.CompactBelowLiveRatio < 0 {
		return 0, false
	}
	if o.MajorCompactBelowLiveRatio <= o.CompactBelowLiveRatio {
		return o.CompactBelowLiveRatio, false
	}
	now := s.now()
	due := o.MajorCompactInterval > 0 && now.Sub(c.mu.lastMajor) >= o.MajorCompactInterval
	if !due {
		due = s.disk.pressed()
	}
	if !due {
		return o.CompactBelowLiveRatio, false
	}
	c.mu.lastMajor = now
	return o.MajorCompactBelowLiveRatio, true
}

// removalRate is the rate of a run's file removals in bytes per second:
// RemoveMaxBytesPerSecond, or 0 (at once) when that is negative or the
// disk is pressed.
func (c *collector) removalRate() float64 {
	if c.s.opts.RemoveMaxBytesPerSecond < 0 || c.s.disk.pressed() {
		return 0
	}
	return float64(c.s.opts.RemoveMaxBytesPerSecond)
}

// expireTombstonesLocked removes the fenced tombstones deleted more than
// FenceTombstoneTTL ago (F2 in doc.go): their ledgers become unknown here,
// fence included. It works one stripe at a time, holding the stripe so that
// no record of those ledgers is admitted meanwhile, and skips a ledger with
// a record in flight (a later run sees it again). The removal is not
// journaled: if a crash loses it, the tombstone is back and expires again.
// REQUIRES: c.mu held.
func (c *collector) expireTombstonesLocked() error {
	s := c.s
	if s.opts.FenceTombstoneTTL < 0 {
		return nil
	}
	bound := s.now().Add(-s.opts.FenceTombstoneTTL).UnixMilli()
	byStripe := map[uint64][]uint64{}
	s.mu.Lock()
	for id, l := range s.mu.ledgers {
		if l.exists && l.st.Tombstone && l.st.DeletedUnixMs <= bound {
			byStripe[id%ledgerStripes] = append(byStripe[id%ledgerStripes], id)
		}
	}
	s.mu.Unlock()
	expired := 0
	for _, stripe := range slices.Sorted(maps.Keys(byStripe)) {
		n, err := c.expireStripe(stripe, byStripe[stripe], bound)
		if err != nil {
			return err
		}
		expired += n
	}
	if expired > 0 {
		s.logger.Info("forgot the fences of ledgers deleted long ago", "ledgers", expired,
			"fence_tombstone_ttl", s.opts.FenceTombstoneTTL)
	}
	return nil
}

// expireStripe removes the tombstones of ids, ledgers of one stripe, that
// are still tombstones deleted at or before bound and have nothing queued.
// It holds the stripe while it opens and commits one index batch: that
// waits for the applier's batch in progress, never for a record, and the
// applier takes no stripe.
func (c *collector) expireStripe(stripe uint64, ids []uint64, bound int64) (int, error) {
	s := c.s
	mu := &s.stripes[stripe]
	mu.Lock()
	defer mu.Unlock()
	s.mu.Lock()
	ids = slices.DeleteFunc(ids, func(id uint64) bool {
		l := s.mu.ledgers[id]
		return l == nil || l.queued > 0 || !l.exists || !l.st.Tombstone
	})
	s.mu.Unlock()
	if len(ids) == 0 {
		return 0, nil
	}
	b, err := s.ix.NewBatch()
	if err != nil {
		s.fatal(fmt.Errorf("writing the index: %w", err))
		return 0, s.failure()
	}
	var gone []uint64
	for _, id := range ids {
		ok, err := b.ExpireTombstone(id, bound)
		if err != nil {
			b.Close()
			s.fatal(fmt.Errorf("writing the index: %w", err))
			return 0, s.failure()
		}
		if ok {
			gone = append(gone, id)
		}
	}
	if err := b.Commit(false); err != nil {
		s.fatal(fmt.Errorf("writing the index: %w", err))
		return 0, s.failure()
	}
	s.mu.Lock()
	for _, id := range gone {
		l := s.mu.ledgers[id]
		l.st, l.exists, l.fenced = index.LedgerState{LAC: -1, LastEntryID: -1}, false, false
		s.dropIdleLocked(id, l)
	}
	s.mu.Unlock()
	return len(gone), nil
}

// removeFile removes a journal file that holds nothing live, at rate
// bytes per second (0: at once). Each file gets a pacer of its own: one
// shared with the run would let the time the run spent copying buy a
// burst of cuts.
func (c *collector) removeFile(ctx context.Context, f journal.FileInfo, rate float64, res *GCResult) error {
	s := c.s
	if err := markTrimmed(s.fs, s.opts.Dir); err != nil {
		return err
	}
	if err := s.j.RemoveFile(ctx, f.Seq, ctxtime.NewPacer(rate, nil)); err != nil {
		return fmt.Errorf("storage: gc: %w", translate(err))
	}
	res.RemovedFiles++
	res.ReclaimedBytes += f.Size
	s.metrics.gcRemovedFiles.Inc()
	s.metrics.gcReclaimedBytes.Add(float64(f.Size))
	return nil
}

// compactFile copies every live entry of a journal file to the journal's
// head and waits until the copies are durable and applied; the bytes are
// counted in strata_bookie_compaction_bytes_total as each copy is queued.
// Entries being deleted or overwritten are skipped (the file then stays
// until a later run).
func (c *collector) compactFile(ctx context.Context, file uint64, pace *ctxtime.Pacer) error {
	s := c.s
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	live := s.ix.FileLedgers(file)
	for _, ledgerID := range slices.Sorted(maps.Keys(live)) {
		// The accounting says how many live entries to find: stop there
		// rather than scan the rest of a long ledger.
		var found int64
		for next := uint64(0); found < live[ledgerID].Entries && !failed(); {
			es, err := s.ix.Entries(ledgerID, next, math.MaxUint64, compactionScan)
			if err != nil {
				fail(indexErr(err))
				break
			}
			for _, e := range es {
				if e.Location.File != file {
					continue
				}
				found++
				if err := pace.Wait(ctx, int(e.Location.Length)); err != nil {
					fail(err)
					break
				}
				n, err := c.copyEntry(ctx, ledgerID, e.EntryID, e.Location, &wg, fail)
				if err != nil {
					fail(err)
					break
				}
				s.metrics.compactedBytes.Add(float64(n)) // as it goes: a paced file takes minutes
			}
			if len(es) < compactionScan {
				break
			}
			next = es[len(es)-1].EntryID + 1
		}
	}
	wg.Wait() // copies already queued complete whatever happens
	return firstErr
}

// copyEntry re-appends one live entry, if it is still live and its ledger
// has no delete or overwrite queued, so the copy cannot be journaled after
// a record that supersedes it (replay applies records in journal order).
// It returns the bytes queued (0 if skipped). The entry is read into a
// buffer of journal.ReadBuffers, given back once the journal is done with
// the copy's payload (Append's done), or at once if nothing is appended:
// a pass over a file that deletes left mostly dead copies hundreds of MB.
func (c *collector) copyEntry(ctx context.Context, ledgerID, entryID uint64, from journal.Location,
	wg *sync.WaitGroup, fail func(error)) (int64, error) {
	s := c.s
	rec, held, err := s.j.ReadPooled(from)
	if err != nil {
		return 0, translate(err)
	}
	appended := false
	defer func() {
		if !appended {
			journal.ReadBuffers.Put(held)
		}
	}()
	if rec.Type != journal.TypeAdd || rec.LedgerID != ledgerID || rec.EntryID != entryID {
		return 0, fmt.Errorf("%w: ledger %d entry %d: the index points at a %v record of ledger %d entry %d at %+v",
			ErrCorrupt, ledgerID, entryID, rec.Type, rec.LedgerID, rec.EntryID, from)
	}
	size := int64(from.Length)
	if err := s.budget.Acquire(ctx, size); err != nil {
		return 0, err
	}
	stripe := &s.stripes[ledgerID%ledgerStripes]
	stripe.Lock()
	defer stripe.Unlock()
	cur, ok, err := s.ix.Get(ledgerID, entryID)
	if err != nil || !ok || cur != from {
		s.budget.Release(size)
		return 0, indexErrOrNil(err)
	}
	s.mu.Lock()
	l := s.mu.ledgers[ledgerID]
	if l == nil || !l.exists || l.deletes > 0 || l.overwrites > 0 {
		s.mu.Unlock()
		s.budget.Release(size)
		return 0, nil
	}
	l.queued++
	s.mu.Unlock()
	o := &op{kind: opCopy, ledgerID: ledgerID, entryID: entryID, from: from, size: size, applier: s.applier,
		done: func(err error) {
			if err != nil {
				fail(err)
			}
			wg.Done()
		}}
	wg.Add(1)
	copyRec := journal.Record{Type: journal.TypeAdd, LedgerID: ledgerID, EntryID: entryID, LAC: rec.LAC,
		Payload: rec.Payload, Recovery: true}
	err = s.j.Append(ctx, copyRec, func(loc journal.Location, err error) {
		journal.ReadBuffers.Put(held)
		o.Journaled(loc, err)
	})
	appended = err == nil
	if err != nil {
		wg.Done()
		s.mu.Lock()
		o.settle(l)
		s.dropIdleLocked(ledgerID, l)
		s.mu.Unlock()
		s.budget.Release(size)
		return 0, translate(err)
	}
	return size, nil
}

func indexErrOrNil(err error) error {
	if err == nil {
		return nil
	}
	return indexErr(err)
}
