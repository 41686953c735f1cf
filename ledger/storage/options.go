package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/vfs"

	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/vfs"
)

// Defaults for the zero fields of Options.
const (
	DefaultReadOnlyAbove      = 0.95
	DefaultWritableBelow      = 0.90
	DefaultDiskCheckInterval  = time.Second
	DefaultCheckpointInterval = time.Second
	DefaultGCInterval         = time.Minute
	// Minor and major compaction, as in BookKeeper (minor 0.2 hourly,
	// major 0.5 daily): every run compacts the nearly dead files, and only
	// a major run those half dead, whose copying costs as much journal
	// bandwidth as it frees. A broker compaction or retention that deletes
	// ledgers leaves files that shared the journal with other topics about
	// half live: copying them at once doubled the produce p99 of the same
	// journals (strata bench suite, compact-half-max).
	DefaultCompactBelowLiveRatio      = 0.2
	DefaultMajorCompactBelowLiveRatio = 0.5
	DefaultMajorCompactInterval       = time.Hour
	// DefaultMajorCompactAboveUsed: on a disk this full every run is
	// major, since space matters more than the copies' cost.
	DefaultMajorCompactAboveUsed = 0.8
	// DefaultCompactMaxBytesPerSecond bounds journal compaction's copies
	// (BookKeeper's compactionRateByBytes is 1 MB/s): unbounded, or at
	// 16 MiB/s, the copies that follow a broker's compaction deleting its
	// inputs (~100 MB per bookie, where other topics' entries shared the
	// journal files) doubled or tripled the produce p99 of the same
	// journals (strata bench suite, compact-half-max).
	DefaultCompactMaxBytesPerSecond = 4 << 20
	// DefaultRemoveMaxBytesPerSecond paces GC's removal of journal files
	// (RocksDB's SstFileManager rate_bytes_per_sec): removed at once, in
	// synced 16 MiB cuts, the 256 MiB files that a broker's compaction pass
	// left dead on three bookies discarded 805 MB on this ext4 (mounted
	// with discard) within half a second, and the bookies' mean fdatasync
	// went from 1.4 to 16.5 ms meanwhile (strata bench suite,
	// compact-half-max). A file now takes 4 s to go.
	DefaultRemoveMaxBytesPerSecond = 64 << 20
	DefaultMaxEntryBytes           = 16 << 20
	DefaultFenceTombstoneTTL       = 7 * 24 * time.Hour
)

// Options configures a Storage. The zero value of every field but Dir means
// its default.
type Options struct {
	// FS holds the journal; default vfs.Default().
	FS vfs.FS
	// Dir is the data directory: the journal goes in Dir/journal, the index
	// in Dir/index. Required.
	Dir string
	// JournalMaxFileBytes and JournalPreallocateBytes are passed to the
	// journal (see journal.Options); 0 means the journal's default.
	JournalMaxFileBytes     int64
	JournalPreallocateBytes int64
	// JournalBufferedWrites is journal.Options.BufferedWrites: write the
	// journal through the page cache in format version 1 instead of with
	// direct I/O in the aligned version 2.
	JournalBufferedWrites bool
	// ReadOnlyAbove: at this used fraction of the disk holding Dir the
	// storage turns read-only (adds fail with ErrReadOnly; reads, fences,
	// explicit LACs, deletes and GC go on). Default 0.95.
	ReadOnlyAbove float64
	// WritableBelow: at or below this used fraction a read-only storage
	// becomes writable again (hysteresis). Default 0.90; must be below
	// ReadOnlyAbove.
	WritableBelow float64
	// DiskCheckInterval, CheckpointInterval, GCInterval: periods of the
	// background loops (defaults 1s, 1s, 1min). A negative value disables
	// the loop (tests and tools drive it by hand).
	DiskCheckInterval  time.Duration
	CheckpointInterval time.Duration
	GCInterval         time.Duration
	// CompactBelowLiveRatio (minor compaction): every GC run compacts a
	// journal file whose live bytes are below this fraction of its size.
	// Default 0.2; negative disables compaction, minor and major (dead
	// files are still removed).
	CompactBelowLiveRatio float64
	// MajorCompactBelowLiveRatio (major compaction): a run at least
	// MajorCompactInterval after the last major one (or the storage's
	// Open), or one on a disk used at or above MajorCompactAboveUsed,
	// compacts files below this ratio, when it is the higher. Defaults
	// 0.5, 1h and min(0.8, WritableBelow). A negative ratio turns major
	// runs off; a negative interval leaves only those the disk triggers.
	MajorCompactBelowLiveRatio float64
	MajorCompactInterval       time.Duration
	MajorCompactAboveUsed      float64
	// CompactMaxBytesPerSecond bounds what compaction copies per second,
	// on average over a GC run (BookKeeper's compactionRateByBytes), so
	// that the copies take a bounded share of the journal that
	// acknowledgements wait on. Default 4 MiB; negative: unbounded.
	CompactMaxBytesPerSecond int64
	// RemoveMaxBytesPerSecond bounds how fast GC removes each journal file
	// it no longer needs (the cuts of journal.Options.RemoveStepBytes are
	// spaced out to it), except on a disk used at or above
	// MajorCompactAboveUsed, where space comes first.
	// Default 64 MiB; negative: unbounded.
	RemoveMaxBytesPerSecond int64
	// MaxEntryBytes bounds an entry's payload. Default 16 MiB; at most
	// journal.MaxPayloadBytes.
	MaxEntryBytes int
	// FenceTombstoneTTL: GC forgets the fence of a deleted ledger (its
	// fenced tombstone, F1 in doc.go) this long after the delete. It must
	// outlast any writer the fence kept out. Default 7 days; negative keeps
	// tombstones forever.
	FenceTombstoneTTL time.Duration
	// Verify reports whether an add's entry is its ledger's writer's: the
	// bookie checks its digest against the ledger's key (package bookie).
	// A LAC is kept only up to the highest entry it vouched for (H2 in
	// doc.go). It is called once per add, outside every lock, and must not
	// block. Nil vouches for every entry.
	Verify func(ledgerID, entryID uint64, entry []byte) bool
	// OnFatal is called once when a journal write or sync, or an index
	// write, fails: the process must stop and restart (a failed fsync is
	// never retried). The storage itself then refuses every write.
	OnFatal func(error)
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics, if set, receives the storage's metrics (see NewMetrics).
	Metrics *Metrics
	// Now is the clock for latencies and timestamps; default time.Now.
	Now func() time.Time
	// IndexFS is the file system of the Pebble index; nil means the
	// operating system. Tests pass pebble's vfs.NewStrictMem() to drop
	// the index's unsynced writes in a simulated crash.
	IndexFS pebblevfs.FS
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default()
	}
	if o.ReadOnlyAbove == 0 {
		o.ReadOnlyAbove = DefaultReadOnlyAbove
	}
	if o.WritableBelow == 0 {
		o.WritableBelow = DefaultWritableBelow
	}
	if o.DiskCheckInterval == 0 {
		o.DiskCheckInterval = DefaultDiskCheckInterval
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.GCInterval == 0 {
		o.GCInterval = DefaultGCInterval
	}
	if o.CompactBelowLiveRatio == 0 {
		o.CompactBelowLiveRatio = DefaultCompactBelowLiveRatio
	}
	if o.MajorCompactBelowLiveRatio == 0 {
		o.MajorCompactBelowLiveRatio = DefaultMajorCompactBelowLiveRatio
	}
	if o.MajorCompactInterval == 0 {
		o.MajorCompactInterval = DefaultMajorCompactInterval
	}
	if o.MajorCompactAboveUsed == 0 {
		o.MajorCompactAboveUsed = min(DefaultMajorCompactAboveUsed, o.WritableBelow)
	}
	if o.CompactMaxBytesPerSecond == 0 {
		o.CompactMaxBytesPerSecond = DefaultCompactMaxBytesPerSecond
	}
	if o.RemoveMaxBytesPerSecond == 0 {
		o.RemoveMaxBytesPerSecond = DefaultRemoveMaxBytesPerSecond
	}
	if o.MaxEntryBytes == 0 {
		o.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if o.FenceTombstoneTTL == 0 {
		o.FenceTombstoneTTL = DefaultFenceTombstoneTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// journalOptions is the journal's configuration.
func (o Options) journalOptions() journal.Options {
	return journal.Options{
		FS:               o.FS,
		Dir:              o.journalDir(),
		MaxFileBytes:     o.JournalMaxFileBytes,
		PreallocateBytes: o.JournalPreallocateBytes,
		BufferedWrites:   o.JournalBufferedWrites,
		Logger:           o.Logger,
	}
}

func (o Options) journalDir() string { return filepath.Join(o.Dir, "journal") }
func (o Options) indexDir() string   { return filepath.Join(o.Dir, "index") }

// Validate reports whether o (after defaults) is usable.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("a Dir is required"))
	}
	if !(o.ReadOnlyAbove > 0 && o.ReadOnlyAbove <= 1) {
		errs = append(errs, fmt.Errorf("ReadOnlyAbove %v is outside (0, 1]", o.ReadOnlyAbove))
	}
	if !(o.WritableBelow > 0 && o.WritableBelow < o.ReadOnlyAbove) {
		errs = append(errs, fmt.Errorf("WritableBelow %v must be in (0, ReadOnlyAbove %v)", o.WritableBelow, o.ReadOnlyAbove))
	}
	if o.CompactBelowLiveRatio > 1 {
		errs = append(errs, fmt.Errorf("CompactBelowLiveRatio %v is above 1", o.CompactBelowLiveRatio))
	}
	if o.MajorCompactBelowLiveRatio > 1 {
		errs = append(errs, fmt.Errorf("MajorCompactBelowLiveRatio %v is above 1", o.MajorCompactBelowLiveRatio))
	}
	if !(o.MajorCompactAboveUsed > 0 && o.MajorCompactAboveUsed <= 1) {
		errs = append(errs, fmt.Errorf("MajorCompactAboveUsed %v is outside (0, 1]", o.MajorCompactAboveUsed))
	}
	if o.MaxEntryBytes < 0 || o.MaxEntryBytes > journal.MaxPayloadBytes {
		errs = append(errs, fmt.Errorf("MaxEntryBytes %d is outside [1, %d]", o.MaxEntryBytes, journal.MaxPayloadBytes))
	}
	if o.Dir != "" {
		if err := o.journalOptions().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: invalid options: %w", err)
	}
	return nil
}

// String describes o (after defaults) for logs.
func (o Options) String() string {
	o = o.withDefaults()
	return fmt.Sprintf("storage.Options{Dir: %q, JournalMaxFileBytes: %d, JournalPreallocateBytes: %d, JournalBufferedWrites: %t, "+
		"ReadOnlyAbove: %v, WritableBelow: %v, DiskCheckInterval: %v, CheckpointInterval: %v, GCInterval: %v, "+
		"CompactBelowLiveRatio: %v, MajorCompactBelowLiveRatio: %v, MajorCompactInterval: %v, MajorCompactAboveUsed: %v, CompactMaxBytesPerSecond: %d, MaxEntryBytes: %d, FenceTombstoneTTL: %v}",
		o.Dir, o.JournalMaxFileBytes, o.JournalPreallocateBytes, o.JournalBufferedWrites, o.ReadOnlyAbove, o.WritableBelow,
		o.DiskCheckInterval, o.CheckpointInterval, o.GCInterval, o.CompactBelowLiveRatio, o.MajorCompactBelowLiveRatio, o.MajorCompactInterval, o.MajorCompactAboveUsed, o.CompactMaxBytesPerSecond, o.MaxEntryBytes,
		o.FenceTombstoneTTL)
}
