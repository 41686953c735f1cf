package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	pebblevfs "github.com/cockroachdb/pebble/vfs"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/ledger/journal"
)

// Sentinel errors; match with errors.Is. See doc.go for which call returns
// which.
var (
	// ErrCorrupt: a key or value in the index is not what this package
	// writes, or the index contradicts itself (negative usage).
	// Marked (internal/corruption): corruption.Is holds for it and for
	// every error that wraps it.
	ErrCorrupt = corruption.Mark(errors.New("index: corrupt"))
	// ErrClosed: the index is closed.
	ErrClosed = errors.New("index: closed")
	// ErrInvalid: an argument the index cannot store (an entry id above
	// 2^63-1, a LAC below -1, a location that cannot hold a record).
	ErrInvalid = errors.New("index: invalid argument")
)

// LedgerState is what the index keeps per ledger.
type LedgerState struct {
	Fenced      bool
	LAC         int64 // highest LAC seen (piggybacked or explicit); -1: none
	LastEntryID int64 // highest entry id stored; -1: none
	// Tombstone: the ledger was deleted while fenced; it holds no entry
	// and only its fence is kept (invariant 4). DeletedUnixMs is when the
	// delete was applied, Unix milliseconds; 0 unless Tombstone.
	Tombstone     bool
	DeletedUnixMs int64
}

// emptyState is the state of a ledger with no record yet.
var emptyState = LedgerState{LAC: -1, LastEntryID: -1}

// Usage is the live (indexed) part of a journal file, for one ledger or in
// total: the bytes of the records the index points at (headers included)
// and how many there are.
type Usage struct {
	Bytes   int64
	Entries int64
}

// Limbo records that the journal had corruption: the bookie may have lost
// entries it once acknowledged and must never again say "no such entry"
// (BookKeeper BP-46) until an operator clears it.
type Limbo struct {
	SinceUnixMs   int64
	CorruptRanges uint32
}

// Defaults for the zero fields of Options.
const (
	DefaultCacheBytes    = 64 << 20
	DefaultMemTableBytes = 32 << 20
)

// Options configures an Index.
type Options struct {
	// Dir is the Pebble directory. Required.
	Dir string
	// FS is Pebble's file system; nil means the operating system. Tests pass
	// pebble's vfs.NewStrictMem() to drop unsynced writes on a simulated
	// crash.
	FS pebblevfs.FS
	// CacheBytes is Pebble's block cache; default 64 MiB.
	CacheBytes int64
	// MemTableBytes caps a Pebble memtable; default 32 MiB.
	MemTableBytes int
	// Logger; default discards.
	Logger *slog.Logger
}

// Index is the bookie's Pebble index. See doc.go.
type Index struct {
	db     *pebble.DB
	logger *slog.Logger

	// writeMu is held from NewBatch until the batch is committed or closed:
	// batches build on the committed state, so they must not interleave.
	// Close takes it first, so an open batch may use db without life.
	writeMu sync.Mutex
	// spare: the cleared maps of the last batch, for the next one
	// (batchMaps). Guarded by writeMu.
	spare batchMaps

	// life is held (read) around every use of db outside a batch, and
	// (write) by Close, so db is never used after it is closed. Nothing
	// calls out while holding it.
	life struct {
		sync.RWMutex
		closed bool
	}

	mu struct {
		sync.RWMutex
		// usage is the committed per-file accounting: file → ledger → usage.
		// It mirrors the 'f' keys. Only Batch.Commit changes it.
		usage map[uint64]map[uint64]Usage
	}
}

// Open opens (creating if needed) the index in o.Dir and loads the per-file
// accounting into memory. A directory written by another format version is
// refused.
func Open(o Options) (*Index, error) {
	if o.Dir == "" {
		return nil, errors.New("index: Dir is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = DefaultMemTableBytes
	}
	logger := o.Logger.With("component", "index", "dir", o.Dir)
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref() // the DB holds its own reference
	popts := &pebble.Options{
		FS:           o.FS,
		Cache:        cache,
		MemTableSize: uint64(o.MemTableBytes),
		// Bloom filters make the Get of an absent entry (every read miss,
		// and re-adds) cheap once the memtable is flushed.
		Levels: []pebble.LevelOptions{{FilterPolicy: bloom.FilterPolicy(10)}},
		Logger: pebbleLogger{logger: logger},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) { logger.Error("pebble background error", "err", err) },
			DiskSlow: func(info pebble.DiskSlowInfo) {
				logger.Warn("pebble: disk slow", "info", info.String())
			},
			WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
				logger.Warn("pebble: write stall", "reason", info.Reason)
			},
			WriteStallEnd: func() { logger.Info("pebble: write stall over") },
		},
	}
	if popts.FS == nil {
		popts.FS = pebblevfs.Default
	}
	if err := createDir(popts.FS, o.Dir); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	db, err := pebble.Open(o.Dir, popts)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", o.Dir, err)
	}
	ix := &Index{db: db, logger: logger}
	if err := ix.checkVersion(); err != nil {
		db.Close()
		return nil, err
	}
	if err := ix.loadUsage(); err != nil {
		db.Close()
		return nil, err
	}
	return ix, nil
}

// createDir creates dir and any missing parents, and syncs the parent of
// each directory it created, so the new entries survive a power failure
// (Pebble syncs the directory's contents, not its parents).
func createDir(fs pebblevfs.FS, dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		parent, err := fs.OpenDir(filepath.Dir(missing[i]))
		if err != nil {
			return err
		}
		if err := errors.Join(parent.Sync(), parent.Close()); err != nil {
			return err
		}
	}
	return nil
}

// checkVersion writes the format version into a new index and refuses an
// index of another version.
func (ix *Index) checkVersion() error {
	v, ok, err := ix.get(metaVersionKey)
	if err != nil {
		return err
	}
	if !ok {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], formatVersion)
		if err := ix.db.Set(metaVersionKey, b[:], pebble.Sync); err != nil {
			return fmt.Errorf("index: %w", err)
		}
		return nil
	}
	if len(v) != 4 || binary.BigEndian.Uint32(v) != formatVersion {
		return fmt.Errorf("index: format version %x; this build reads version %d", v, formatVersion)
	}
	return nil
}

// loadUsage reads every 'f' key into ix.mu.usage.
func (ix *Index) loadUsage() error {
	usage := map[uint64]map[uint64]Usage{}
	it, err := ix.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindFile}, UpperBound: []byte{kindFile + 1}})
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != fileKeyLen {
			it.Close()
			return fmt.Errorf("%w: file usage key %x", ErrCorrupt, k)
		}
		u, err := decodeUsage(it.Value())
		if err != nil {
			it.Close()
			return err
		}
		file, ledgerID := binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17])
		if usage[file] == nil {
			usage[file] = map[uint64]Usage{}
		}
		usage[file][ledgerID] = u
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("index: loading file usage: %w", err)
	}
	ix.mu.usage = usage
	return nil
}

// Close closes the database. Unsynced writes reach the disk (Pebble flushes
// its WAL on close) but are not synced.
func (ix *Index) Close() error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.life.Lock()
	defer ix.life.Unlock()
	if ix.life.closed {
		return ErrClosed
	}
	ix.life.closed = true
	if err := ix.db.Close(); err != nil {
		return fmt.Errorf("index: close: %w", err)
	}
	return nil
}

// acquire holds ix.life (read) if the index is open; call the returned
// func when done with db.
func (ix *Index) acquire() (func(), error) {
	ix.life.RLock()
	if ix.life.closed {
		ix.life.RUnlock()
		return nil, ErrClosed
	}
	return ix.life.RUnlock, nil
}

// get returns a copy of the value of key.
func (ix *Index) get(key []byte) ([]byte, bool, error) {
	v, closer, err := ix.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("index: %w", err)
	}
	out := slices.Clone(v)
	closer.Close()
	return out, true, nil
}

// Get returns where entry (ledgerID, entryID) is in the journal.
func (ix *Index) Get(ledgerID, entryID uint64) (journal.Location, bool, error) {
	release, err := ix.acquire()
	if err != nil {
		return journal.Location{}, false, err
	}
	defer release()
	v, ok, err := ix.get(entryKey(ledgerID, entryID))
	if err != nil || !ok {
		return journal.Location{}, false, err
	}
	loc, err := decodeLocation(v)
	return loc, err == nil, err
}

// State returns a ledger's state; false if the index has no record of it.
func (ix *Index) State(ledgerID uint64) (LedgerState, bool, error) {
	release, err := ix.acquire()
	if err != nil {
		return LedgerState{}, false, err
	}
	defer release()
	v, ok, err := ix.get(ledgerKey(ledgerID))
	if err != nil || !ok {
		return emptyState, false, err
	}
	st, err := decodeState(v)
	return st, err == nil, err
}

// Ledgers returns the state of every ledger the index knows, fenced
// tombstones included.
func (ix *Index) Ledgers() (map[uint64]LedgerState, error) {
	release, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	it, err := ix.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindLedger}, UpperBound: []byte{kindLedger + 1}})
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	defer it.Close()
	out := map[uint64]LedgerState{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != ledgerKeyLen {
			return nil, fmt.Errorf("%w: ledger key %x", ErrCorrupt, k)
		}
		st, err := decodeState(it.Value())
		if err != nil {
			return nil, err
		}
		out[binary.BigEndian.Uint64(k[1:9])] = st
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return out, nil
}

// EntryLocation is an entry id and where the entry is.
type EntryLocation struct {
	EntryID  uint64
	Location journal.Location
}

// Entries returns up to limit entries of ledgerID with first <= id <= last,
// in id order. To page, call again from the last id returned + 1.
func (ix *Index) Entries(ledgerID, first, last uint64, limit int) ([]EntryLocation, error) {
	if last < first || limit <= 0 {
		return nil, nil
	}
	release, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	upper := entryRangeEnd(ledgerID)
	if last != ^uint64(0) {
		upper = entryKey(ledgerID, last+1)
	}
	it, err := ix.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(ledgerID, first), UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	defer it.Close()
	var out []EntryLocation
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		_, entryID, ok := decodeEntryKey(it.Key())
		if !ok {
			return nil, fmt.Errorf("%w: entry key %x", ErrCorrupt, it.Key())
		}
		loc, err := decodeLocation(it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, EntryLocation{EntryID: entryID, Location: loc})
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return out, nil
}

// Checkpoint returns the journal position up to which every record is
// reflected in the index, and false if no checkpoint was ever written (a
// new or lost index).
func (ix *Index) Checkpoint() (journal.Position, bool, error) {
	release, err := ix.acquire()
	if err != nil {
		return journal.Position{}, false, err
	}
	defer release()
	v, ok, err := ix.get(metaCheckpointKey)
	if err != nil || !ok {
		return journal.Position{}, false, err
	}
	pos, err := decodePosition(v)
	return pos, err == nil, err
}

// SetCheckpoint durably records pos as the checkpoint (pebble.Sync). Pebble
// writes its WAL in commit order, so the sync also makes durable every batch
// committed (unsynced) before it. The caller must only pass a position up to
// which every record is reflected in committed batches.
func (ix *Index) SetCheckpoint(pos journal.Position) error {
	release, err := ix.acquire()
	if err != nil {
		return err
	}
	defer release()
	if err := ix.db.Set(metaCheckpointKey, encodePosition(pos), pebble.Sync); err != nil {
		return fmt.Errorf("index: checkpoint: %w", err)
	}
	return nil
}

// Limbo returns the limbo record, if the index is in limbo.
func (ix *Index) Limbo() (Limbo, bool, error) {
	release, err := ix.acquire()
	if err != nil {
		return Limbo{}, false, err
	}
	defer release()
	v, ok, err := ix.get(metaLimboKey)
	if err != nil || !ok {
		return Limbo{}, false, err
	}
	l, err := decodeLimbo(v)
	return l, err == nil, err
}

// ClearLimbo durably removes the limbo record (an operator decided the
// bookie's data is whole again).
func (ix *Index) ClearLimbo() error {
	release, err := ix.acquire()
	if err != nil {
		return err
	}
	defer release()
	if err := ix.db.Delete(metaLimboKey, pebble.Sync); err != nil {
		return fmt.Errorf("index: clear limbo: %w", err)
	}
	return nil
}

// FileUsage returns the live bytes and entries per journal file, summed
// over ledgers. Files with nothing live are absent.
func (ix *Index) FileUsage() map[uint64]Usage {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[uint64]Usage, len(ix.mu.usage))
	for file, byLedger := range ix.mu.usage {
		var total Usage
		for _, u := range byLedger {
			total.Bytes += u.Bytes
			total.Entries += u.Entries
		}
		out[file] = total
	}
	return out
}

// FileLedgers returns the ledgers with live entries in a journal file and
// their usage there.
func (ix *Index) FileLedgers(file uint64) map[uint64]Usage {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return maps.Clone(ix.mu.usage[file])
}

// DiskBytes is the space the index takes on disk (sstables and WAL).
func (ix *Index) DiskBytes() uint64 {
	release, err := ix.acquire()
	if err != nil {
		return 0
	}
	defer release()
	return ix.db.Metrics().DiskSpaceUsage()
}

// pebbleLogger forwards Pebble's log lines to slog.
type pebbleLogger struct {
	logger *slog.Logger
}

// Infof logs at Debug: Pebble reports routine work through it.
func (l pebbleLogger) Infof(format string, args ...any) {
	if l.logger.Enabled(context.Background(), slog.LevelDebug) {
		l.logger.Debug(fmt.Sprintf(format, args...), "source", "pebble")
	}
}

// Fatalf is how Pebble reports a broken invariant; it must not return.
// Panicking stops every write and leaves the exit to the program; the index
// is rebuilt from the journal checkpoint on restart.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.logger.Error(msg, "source", "pebble")
	panic("index: pebble fatal error: " + msg)
}
