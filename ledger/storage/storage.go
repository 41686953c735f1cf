package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/internal/bytebudget"
	"github.com/strata-log/strata/internal/logging"
	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

// ledgerStripes is the number of locks that order "check the fence, then
// queue the record" per ledger (a ledger always uses the same stripe).
const ledgerStripes = 64

// LedgerState is a ledger's state on this bookie.
type LedgerState struct {
	LAC         int64 // highest LAC seen, piggybacked or explicit; -1: none
	LastEntryID int64 // highest entry id stored; -1: none
	Fenced      bool
}

// Entry is a stored ledger entry.
type Entry struct {
	LedgerID, EntryID uint64
	LAC               int64 // the LAC the writer sent with the entry
	Payload           []byte
	// Held, from ReadRange: the buffer of journal.ReadBuffers that
	// Payload aliases. Whoever is done with Payload may give it back
	// (journal.ReadBuffers.Put); nil: Payload is the entry's own memory.
	Held *[]byte
}

// ledger is the in-memory state of one ledger.
// REQUIRES: Storage.mu held for every field.
type ledger struct {
	// Applied: what the index holds (durable records, applied in order).
	st     index.LedgerState
	exists bool // the index has a state for it, a fenced tombstone's included
	// fenced is the fence Add obeys: set when a fence is queued (so an add
	// after Fence is refused at once); a delete keeps it (F1), only the
	// expiry of the ledger's tombstone clears it.
	fenced bool
	// Queued and not yet applied, for Delete and compaction.
	queued     int   // records of this ledger
	overwrites int   // adds that may replace an existing entry
	deletes    int   // deletes
	maxQueued  int64 // highest entry id queued or applied since the last delete
	// maxVerified: the highest entry id queued or applied since the last
	// delete by an add Options.Verify vouched for, or at Open the LAC
	// (H2).
	maxVerified int64
	// Long-poll waiters; lacAdvanced is closed and replaced when st.LAC rises.
	waiters     int
	lacAdvanced chan struct{}
}

func (l *ledger) state() LedgerState {
	return LedgerState{LAC: l.st.LAC, LastEntryID: l.st.LastEntryID, Fenced: l.fenced}
}

// held reports whether this bookie has a record of the ledger to report
// (State, Ledgers): an applied add, fence or LAC, or a fence in flight. A
// fenced tombstone is not held: the ledger was deleted; only its fence is
// kept.
func (l *ledger) held() bool {
	return (l.exists || l.fenced) && !l.st.Tombstone
}

// Storage is the bookie's storage engine: the journal holds the entries,
// the index says where they are. Storage itself is the write path (admit
// and journal a record), the read path and the ledgers' in-memory states;
// the applier applies journaled records to the index, the collector runs
// GC and compaction, the disk guard keeps adds off a full disk, and
// recovery replays the journal at Open. See doc.go.
type Storage struct {
	opts    Options // with defaults
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
	fs      vfs.FS
	ix      *index.Index
	j       *journal.Journal

	// stripes order the fence check and the journal append of each
	// ledger's records against Fence, Delete and compaction.
	stripes [ledgerStripes]sync.Mutex

	budget *bytebudget.Budget // bytes queued and not yet applied

	// closeMu is held (read) while a call queues records or runs GC, and
	// (write) by Close to stop both.
	closeMu sync.RWMutex
	closed  bool        // guarded by closeMu
	closing atomic.Bool // set first thing in Close

	// stopCtx is cancelled by Close: loops, GC and long polls stop.
	stopCtx context.Context
	stop    context.CancelFunc
	loops   sync.WaitGroup

	applier *applier   // journaled records to the index, in journal order
	gc      *collector // GC and compaction of journal files
	disk    *diskGuard // read-only near a full disk

	mu struct {
		sync.Mutex
		ledgers map[uint64]*ledger
		applied journal.Position // end of the last applied record
		limbo   bool
		failErr error // wraps ErrFailed once the storage failed
	}

	// cpMu serializes checkpoints; checkpointed is the last synced one.
	cpMu         sync.Mutex
	checkpointed journal.Position

	fatalOnce sync.Once
	refusals  logging.Limiter // log lines about refused overwrites
	// readErrorLog: log lines about reads the disk failed.
	readErrorLog logging.Limiter

	// For tests and benchmarks.
	groups, groupRecords atomic.Int64
	rebuilt              bool // the index was rebuilt from a trimmed journal
}

// Open opens the index and the journal in o.Dir, replays the journal from
// the index checkpoint, then starts the background loops. It returns once
// the storage can serve: the caller reports ready only after Open returns.
// ctx bounds the replay.
func Open(ctx context.Context, o Options) (*Storage, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	s := &Storage{
		opts:         o,
		logger:       o.Logger.With("component", "storage", "dir", o.Dir),
		metrics:      o.Metrics,
		now:          o.Now,
		fs:           o.FS,
		refusals:     logging.Limiter{Every: refusalLogEvery},
		readErrorLog: logging.Limiter{Every: readErrorLogEvery},
	}
	if s.metrics == nil {
		s.metrics = NewMetrics() // unregistered: updates go nowhere
	}
	s.mu.ledgers = map[uint64]*ledger{}
	s.budget = bytebudget.New(budgetBytes(o.MaxEntryBytes))
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.applier = newApplier(s)
	s.gc = newCollector(s)
	s.disk = newDiskGuard(o, s.logger, s.metrics, s.sizeGauges)

	if err := s.openFiles(); err != nil {
		return nil, err
	}
	if err := newRecovery(s).run(ctx); err != nil {
		s.j.Close()
		s.ix.Close()
		return nil, err
	}
	s.disk.check()
	go s.applier.run()
	s.startLoop(o.CheckpointInterval, nil, func() {
		if err := s.checkpoint(); err != nil && !errors.Is(err, ErrFailed) {
			s.logger.Error("checkpoint failed", "err", err)
		}
	})
	s.startLoop(o.DiskCheckInterval, nil, s.disk.check)
	s.startLoop(o.GCInterval, s.gc.kick, func() {
		if _, err := s.GC(s.stopCtx); err != nil && s.stopCtx.Err() == nil {
			s.logger.Error("garbage collection stopped", "err", err)
		}
	})
	s.logger.Info("storage open", "options", o.String(), "limbo", s.Limbo(), "read_only", s.ReadOnly())
	return s, nil
}

// openFiles creates the data directory and opens the index and the
// journal in it.
func (s *Storage) openFiles() error {
	o := s.opts
	if err := s.fs.MkdirAll(o.Dir); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if err := s.fs.SyncDir(filepath.Dir(filepath.Clean(o.Dir))); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	var err error
	s.ix, err = index.Open(index.Options{Dir: o.indexDir(), FS: o.IndexFS, Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	jopts := o.journalOptions()
	jopts.OnFatal = func(err error) { s.fatal(err) }
	jopts.OnGroupCommit = func(groupBytes, groupRecords int, sync time.Duration) {
		s.groups.Add(1)
		s.groupRecords.Add(int64(groupRecords))
		s.metrics.observeGroup(groupBytes, groupRecords, sync)
	}
	s.j, err = journal.Open(jopts)
	if err != nil {
		s.ix.Close()
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// startLoop runs fn every interval (and whenever kick receives) until
// Close; a negative interval disables the loop.
func (s *Storage) startLoop(interval time.Duration, kick <-chan struct{}, fn func()) {
	if interval < 0 {
		return
	}
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stopCtx.Done():
				return
			case <-t.C:
			case <-kick:
			}
			fn()
		}
	}()
}

// Close stops the loops, waits for queued records to be written, applied
// and acknowledged, checkpoints, and closes the journal and the index. It
// returns ErrClosed if called again.
func (s *Storage) Close() error {
	if s.closing.Swap(true) {
		return ErrClosed
	}
	s.stop()
	s.closeMu.Lock() // waits for calls queueing records and for GC
	s.closed = true
	s.closeMu.Unlock()
	s.loops.Wait()

	jerr := s.j.Close() // writes, syncs and completes everything queued
	s.applier.journalClosed()

	var cpErr error
	if s.failure() == nil {
		cpErr = s.checkpoint()
	}
	ixErr := s.ix.Close()
	if errors.Is(jerr, journal.ErrFailed) {
		jerr = nil // reported through OnFatal already
	}
	if err := errors.Join(jerr, cpErr, ixErr); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	return nil
}

// begin admits a call that queues records: unless it returns an error, it
// holds closeMu (read), which the caller releases (s.closeMu.RUnlock) when
// done queueing, so Close waits for it.
func (s *Storage) begin() error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	if err := s.failure(); err != nil {
		s.closeMu.RUnlock()
		return err
	}
	return nil
}

func (s *Storage) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.failErr
}

// fatal records that a write path failed: from now on nothing is applied or
// acknowledged, and OnFatal is called once.
func (s *Storage) fatal(cause error) {
	err := cause
	if !errors.Is(err, ErrFailed) {
		err = fmt.Errorf("%w: %w", ErrFailed, cause)
	}
	s.mu.Lock()
	if s.mu.failErr == nil {
		s.mu.failErr = err
	}
	s.mu.Unlock()
	s.fatalOnce.Do(func() {
		s.logger.Error("storage failed: acknowledging nothing more", "err", cause)
		if s.opts.OnFatal != nil {
			s.opts.OnFatal(err)
		}
	})
}

// checkpoint durably records the applied position in the index, so the
// next start replays from there. An index sync error is fatal (a failed
// fsync is never retried).
func (s *Storage) checkpoint() error {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	s.mu.Lock()
	pos, failErr := s.mu.applied, s.mu.failErr
	s.mu.Unlock()
	if failErr != nil {
		return failErr
	}
	if pos == s.checkpointed {
		return nil
	}
	if err := s.ix.SetCheckpoint(pos); err != nil {
		if !errors.Is(err, index.ErrClosed) {
			s.fatal(fmt.Errorf("syncing the index checkpoint: %w", err))
		}
		return err
	}
	s.checkpointed = pos
	return nil
}

// ledgerLocked returns the in-memory state of a ledger, creating it.
// REQUIRES: s.mu held.
func (s *Storage) ledgerLocked(ledgerID uint64) *ledger {
	l := s.mu.ledgers[ledgerID]
	if l == nil {
		l = &ledger{st: index.LedgerState{LAC: -1, LastEntryID: -1}, maxQueued: -1, maxVerified: -1}
		s.mu.ledgers[ledgerID] = l
	}
	return l
}

// dropIdleLocked forgets a ledger that has no state, nothing queued and
// no waiter.
// REQUIRES: s.mu held.
func (s *Storage) dropIdleLocked(ledgerID uint64, l *ledger) {
	if !l.exists && !l.fenced && l.queued == 0 && l.waiters == 0 {
		delete(s.mu.ledgers, ledgerID)
	}
}

// Limbo reports whether the bookie may have lost acknowledged entries
// (journal corruption was found): missing entries are then ErrUnknown,
// never ErrNoEntry. The flag is persistent until ClearLimbo.
func (s *Storage) Limbo() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.limbo
}

// ClearLimbo durably leaves limbo: an operator has made sure the bookie's
// ledgers are whole again (re-replicated). Ledgers fenced on entering limbo
// stay fenced.
func (s *Storage) ClearLimbo() error {
	if err := s.ix.ClearLimbo(); err != nil {
		return translate(err)
	}
	s.mu.Lock()
	s.mu.limbo = false
	s.mu.Unlock()
	s.metrics.limbo.Set(0)
	s.logger.Warn("limbo cleared by operator")
	return nil
}

// ReadOnly reports whether adds are refused for lack of disk space.
func (s *Storage) ReadOnly() bool { return s.disk.readOnly.Load() }

// DiskUsage is the data directory's file system usage as last checked.
func (s *Storage) DiskUsage() vfs.DiskUsage { return s.disk.usage() }

// OnStateChange registers fn, called (from the disk-check loop, never
// concurrently with itself) when the storage turns read-only or writable.
func (s *Storage) OnStateChange(fn func(readOnly bool)) { s.disk.onStateChange(fn) }

// sizeGauges refreshes the gauges of what the storage holds: ledgers,
// fenced tombstones, journal and index bytes.
func (s *Storage) sizeGauges() {
	s.mu.Lock()
	ledgers, tombstones := 0, 0
	for _, l := range s.mu.ledgers {
		switch {
		case l.exists && l.st.Tombstone:
			tombstones++
		case l.exists:
			ledgers++
		}
	}
	s.mu.Unlock()
	var journalBytes int64
	for _, f := range s.j.Files() {
		journalBytes += f.Size
	}
	m := s.metrics
	m.journalBytes.Set(float64(journalBytes))
	m.journalDirectIO.Set(boolGauge(s.j.DirectIO()))
	m.indexBytes.Set(float64(s.ix.DiskBytes()))
	m.ledgers.Set(float64(ledgers))
	m.tombstones.Set(float64(tombstones))
}
