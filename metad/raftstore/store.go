package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/corruption"
)

// Sentinel errors. doc.go lists which call returns which.
var (
	// ErrCorrupt marks a record on disk that cannot be decoded: a log value
	// that is truncated, has an unknown version or trailing bytes, holds an
	// index other than its key's, or a uint64 stable value that is not 8
	// bytes. Errors that wrap it carry the detail.
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrCorrupt = corruption.Mark(errors.New("raftstore: corrupt record"))

	// ErrKeyNotFound is returned, unwrapped, by Get and GetUint64 for a key
	// that was never Set. Its text breaks the "raftstore: " convention on
	// purpose: hashicorp/raft recognises a missing key by comparing
	// err.Error() with "not found" (raft.go, api.go), the value
	// raft-boltdb's ErrKeyNotFound has. Do not wrap it.
	ErrKeyNotFound = errors.New("not found")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("raftstore: closed")
)

// errZeroIndex rejects index 0, which FirstIndex and LastIndex use to mean
// "empty". Raft starts its log at 1, so only a caller bug reaches it.
var errZeroIndex = errors.New("raftstore: log index 0 is reserved")

// compactAfterDeletedLogs is how many log entries prefix deletions drop
// before the deleted span is compacted. Raft deletes a prefix after
// every snapshot (SnapshotThreshold defaults to 8192 entries), so this
// compacts about every other snapshot: often enough that range tombstones
// and the entries under them do not pile up, rarely enough to cost nothing.
const compactAfterDeletedLogs = 16384

// Options configures a Store. The zero value is the production setting.
type Options struct {
	// NoSync disables fsync: writes return once they are in the OS page
	// cache, so a machine crash can lose acknowledged raft state. For tests
	// and benchmarks only; never in production. The default (false) makes
	// every write durable (pebble.Sync) before it returns.
	NoSync bool

	// Logger receives the store's and pebble's messages; pebble's chatter
	// goes out at Debug. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is a raft.LogStore and raft.StableStore kept in one pebble
// database. It is safe for concurrent use. See doc.go for the contract and
// the on-disk format.
type Store struct {
	db           *pebble.DB
	writeOptions *pebble.WriteOptions
	logger       *slog.Logger

	// compactAfterDeletedLogs is the compactAfterDeletedLogs constant; a
	// field so tests can lower it.
	compactAfterDeletedLogs uint64
	// compactions counts finished compactions of deleted log prefixes.
	compactions atomic.Uint64

	// compactor is the goroutine that compacts deleted log prefixes, off
	// the caller's path: raft deletes prefixes from its main loop too
	// (installing a snapshot), and a manual compaction can wait behind
	// pebble's own. Close stops it and waits before closing db.
	compactor struct {
		wake chan struct{} // capacity 1: requests coalesce
		stop chan struct{}
		done sync.WaitGroup
	}

	// firstIndex and lastIndex cache the smallest and largest log index on
	// disk, both 0 when the log is empty, so FirstIndex and LastIndex do not
	// touch pebble. Stored only with write held, right after the batch that
	// changes them commits; loaded without locks.
	firstIndex atomic.Uint64
	lastIndex  atomic.Uint64

	// mu guards the lifetime of db. Every method holds it shared while it
	// uses db and Close holds it exclusively, so Close waits for calls in
	// flight and later calls get ErrClosed rather than a pebble panic.
	mu struct {
		sync.RWMutex
		closed bool
	}

	// write serialises changes to the log, so that batches commit in the
	// same order as the cache updates that follow them.
	// Lock order: mu before write.
	write struct {
		sync.Mutex
		// deletedSinceCompaction counts log entries dropped by prefix
		// deletions since the last compaction was requested.
		deletedSinceCompaction uint64
		// compactEnd, when not nil, asks the compactor to compact the log
		// keys [logKeysStart, compactEnd). A newer request replaces an
		// older one, whose span it covers.
		compactEnd []byte
	}
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens the store in dir, creating dir and an empty store if needed.
// Only one Store may have dir open at a time (pebble holds a lock file).
func Open(dir string, opts Options) (*Store, error) {
	return open(dir, opts, vfs.Default)
}

// open is Open on any filesystem; tests pass an in-memory one that can
// drop unsynced writes or inject errors.
func open(dir string, opts Options, fs vfs.FS) (*Store, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "raftstore", "dir", dir)
	if err := createDir(fs, dir); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	db, err := openPebble(dir, fs, logger)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	s := &Store{
		db:                      db,
		writeOptions:            pebble.Sync,
		logger:                  logger,
		compactAfterDeletedLogs: compactAfterDeletedLogs,
	}
	if opts.NoSync {
		s.writeOptions = pebble.NoSync
		logger.Warn("fsync disabled: acknowledged writes can be lost on a crash; tests and benchmarks only")
	}
	first, last, err := s.scanLogBounds(logKeysStart, logKeysEnd)
	if err != nil {
		// The scan error is the one worth reporting.
		_ = db.Close()
		return nil, err
	}
	s.firstIndex.Store(first)
	s.lastIndex.Store(last)
	s.compactor.wake = make(chan struct{}, 1)
	s.compactor.stop = make(chan struct{})
	s.compactor.done.Go(s.compactLoop)
	logger.Debug("opened", "first_index", first, "last_index", last)
	return s, nil
}

// createDir creates dir and any missing parents, durably. Pebble fsyncs
// dir after creating files in it, but not dir's own entry in its parent:
// without syncing the parents of what MkdirAll created, a crash soon after
// the first Open can lose the directory and every acknowledged write in it.
func createDir(fs vfs.FS, dir string) error {
	var missing []string // deepest first
	for d := dir; ; d = fs.PathDir(d) {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if fs.PathDir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := syncDir(fs, fs.PathDir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return d.Close()
}

// Close closes the store after the calls in flight and any running
// compaction return. Later calls, other than Close, return ErrClosed; Close
// itself is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	// The compactor takes write, never mu, so it can finish while we hold
	// mu; no call in flight holds write now that we hold mu.
	close(s.compactor.stop)
	s.compactor.done.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftstore: close: %w", err)
	}
	return nil
}

// acquire takes mu shared, or returns ErrClosed holding nothing.
// Callers that get nil must call s.mu.RUnlock.
func (s *Store) acquire() error {
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// DiskUsageBytes is the space the store's files take on disk, 0 once
// closed.
func (s *Store) DiskUsageBytes() uint64 {
	if err := s.acquire(); err != nil {
		return 0
	}
	defer s.mu.RUnlock()
	return s.db.Metrics().DiskSpaceUsage()
}

// FirstIndex returns the smallest log index stored, 0 when the log is empty.
func (s *Store) FirstIndex() (uint64, error) {
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return s.firstIndex.Load(), nil
}

// LastIndex returns the largest log index stored, 0 when the log is empty.
func (s *Store) LastIndex() (uint64, error) {
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return s.lastIndex.Load(), nil
}

// GetLog reads the entry at index into log. It returns raft.ErrLogNotFound
// when there is none and an error wrapping ErrCorrupt when the stored value
// does not decode or holds another index; log is untouched on error.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	value, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	// decodeLog copies what it keeps, so value may go back to pebble after.
	defer closer.Close()
	var decoded raft.Log
	if err := decodeLog(value, &decoded); err != nil {
		return fmt.Errorf("log %d: %w", index, err)
	}
	if decoded.Index != index {
		return fmt.Errorf("%w: key of log %d holds index %d", ErrCorrupt, index, decoded.Index)
	}
	*log = decoded
	return nil
}

// StoreLog stores one entry; see StoreLogs.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores entries, replacing any with the same index, in one
// pebble batch: one WAL write and, unless Options.NoSync, one fsync for the
// lot. This is raft's group commit. Either all entries are stored or none.
// Indexes need not be contiguous with what is stored; index 0 is refused.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()

	batch := s.db.NewBatch()
	defer batch.Close()
	lowest, highest := logs[0].Index, logs[0].Index
	key := make([]byte, 0, logKeyLen)
	var value []byte
	for _, l := range logs {
		if l.Index == 0 {
			return errZeroIndex
		}
		// Set copies key and value into the batch, so both are reused.
		key = appendLogKey(key[:0], l.Index)
		value = appendLog(value[:0], l)
		if err := batch.Set(key, value, nil); err != nil {
			return fmt.Errorf("raftstore: batch log %d: %w", l.Index, err)
		}
		lowest = min(lowest, l.Index)
		highest = max(highest, l.Index)
	}

	s.write.Lock()
	defer s.write.Unlock()
	if err := batch.Commit(s.writeOptions); err != nil {
		return fmt.Errorf("raftstore: store logs %d..%d: %w", lowest, highest, err)
	}
	// Setting keys only widens [first, last].
	if first := s.firstIndex.Load(); first == 0 || lowest < first {
		s.firstIndex.Store(lowest)
	}
	if highest > s.lastIndex.Load() {
		s.lastIndex.Store(highest)
	}
	return nil
}

// DeleteRange deletes the entries with minIndex <= index <= maxIndex, in one
// pebble batch holding a single range tombstone. Indexes with no entry are
// fine; minIndex > maxIndex deletes nothing. Once prefix deletions (what
// raft does after a snapshot) have dropped compactAfterDeletedLogs entries,
// DeleteRange also asks the compactor to compact the deleted span, so
// tombstones and the data under them leave the disk; it does not wait.
func (s *Store) DeleteRange(minIndex, maxIndex uint64) error {
	if minIndex > maxIndex {
		return nil
	}
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	s.write.Lock()
	defer s.write.Unlock()
	return s.deleteRangeLocked(minIndex, maxIndex)
}

// deleteRangeLocked commits the deletion, fixes the cached bounds and
// requests a compaction when one is due.
// REQUIRES: s.mu held shared, s.write held.
func (s *Store) deleteRangeLocked(minIndex, maxIndex uint64) error {
	end := logKeyAfter(maxIndex)
	batch := s.db.NewBatch()
	defer batch.Close()
	if err := batch.DeleteRange(logKey(minIndex), end, nil); err != nil {
		return fmt.Errorf("raftstore: batch delete logs %d..%d: %w", minIndex, maxIndex, err)
	}
	if err := batch.Commit(s.writeOptions); err != nil {
		return fmt.Errorf("raftstore: delete logs %d..%d: %w", minIndex, maxIndex, err)
	}

	first, last := s.firstIndex.Load(), s.lastIndex.Load()
	switch {
	case first == 0 || maxIndex < first || minIndex > last:
		// Nothing stored was in range.
		return nil
	case minIndex > first && maxIndex < last:
		// A hole in the middle leaves both ends alone.
		return nil
	case minIndex > first:
		// A suffix went (raft truncating a conflicting tail); the new last
		// entry is the one before minIndex. Log keys may have gaps, so ask
		// pebble rather than assume minIndex-1.
		newFirst, newLast, err := s.scanLogBounds(logKeysStart, logKey(minIndex))
		if err != nil {
			return err
		}
		s.firstIndex.Store(newFirst)
		s.lastIndex.Store(newLast)
		return nil
	}

	// A prefix went, perhaps the whole log. Scanning from end starts past
	// the new tombstone, so it does not wade through deleted keys.
	newFirst, newLast, err := s.scanLogBounds(end, logKeysEnd)
	if err != nil {
		return err
	}
	s.firstIndex.Store(newFirst)
	s.lastIndex.Store(newLast)

	s.write.deletedSinceCompaction += min(maxIndex, last) - first + 1
	if s.write.deletedSinceCompaction < s.compactAfterDeletedLogs {
		return nil
	}
	s.write.deletedSinceCompaction = 0
	s.write.compactEnd = end
	select {
	case s.compactor.wake <- struct{}{}:
	default: // already awake or about to be; it will see compactEnd
	}
	return nil
}

// compactLoop runs the compactions deleteRangeLocked requests until Close.
func (s *Store) compactLoop() {
	for {
		select {
		case <-s.compactor.stop:
			return
		case <-s.compactor.wake:
		}
		s.write.Lock()
		end := s.write.compactEnd
		s.write.compactEnd = nil
		s.write.Unlock()
		if end != nil {
			s.compactDeletedLogs(end)
		}
	}
}

// compactDeletedLogs compacts the log keys below end, all deleted. A failure
// costs only disk space until the next attempt, so it is logged: the
// deletion itself has committed.
// REQUIRES: called by compactLoop, which Close waits for before closing db.
func (s *Store) compactDeletedLogs(end []byte) {
	start := time.Now()
	if err := s.db.Compact(logKeysStart, end, false); err != nil {
		s.logger.Warn("compacting deleted log prefix failed", "err", err)
		return
	}
	s.compactions.Add(1)
	s.logger.Debug("compacted deleted log prefix", "end_key", fmt.Sprintf("%x", end), "duration", time.Since(start))
}

// scanLogBounds returns the smallest and largest log index with a key in
// [lower, upper), both 0 if there is none.
// REQUIRES: s.mu held shared, or s not yet shared.
func (s *Store) scanLogBounds(lower, upper []byte) (first, last uint64, err error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, 0, fmt.Errorf("raftstore: scan log keys: %w", err)
	}
	if iter.First() {
		first, err = parseLogKey(iter.Key())
	}
	if err == nil && iter.Last() {
		last, err = parseLogKey(iter.Key())
	}
	if closeErr := iter.Close(); err == nil && closeErr != nil {
		err = fmt.Errorf("raftstore: scan log keys: %w", closeErr)
	}
	if err != nil {
		return 0, 0, err
	}
	return first, last, nil
}

// Set stores value under key, replacing any previous value.
func (s *Store) Set(key, value []byte) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := s.db.Set(stableKey(key), value, s.writeOptions); err != nil {
		return fmt.Errorf("raftstore: set %q: %w", key, err)
	}
	return nil
}

// Get returns a copy of the value under key, non-nil even when empty, or
// ErrKeyNotFound (unwrapped) if key was never Set.
func (s *Store) Get(key []byte) ([]byte, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	value, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: get %q: %w", key, err)
	}
	defer closer.Close()
	return append([]byte{}, value...), nil
}

// SetUint64 stores val under key as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value SetUint64 stored under key. Like raft-boltdb
// it returns (0, ErrKeyNotFound) for a missing key, which raft treats as 0;
// a value that is not 8 bytes gives an error wrapping ErrCorrupt.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	value, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(value) != 8 {
		return 0, fmt.Errorf("%w: uint64 under %q is %d bytes, want 8", ErrCorrupt, key, len(value))
	}
	return binary.BigEndian.Uint64(value), nil
}
