package raftstore

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// Memory settings. The metadata log is small and trimmed after every
// snapshot, so these are modest. Both are caps, not allocations: a memtable
// starts at 256 KiB and doubles up to memTableBytes, and the cache holds
// only blocks that were read.
const (
	// memTableBytes caps a memtable (pebble v1.1 defaults to 4 MiB): room
	// for tens of thousands of metadata entries between flushes.
	memTableBytes = 16 << 20

	// blockCacheBytes caps the block cache. Pebble reserves the memory of
	// live and flushing memtables inside the block cache, so the cache must
	// be several times memTableBytes: with pebble's default 8 MiB next to
	// 16 MiB memtables the reservation leaves no room and every sstable read
	// decompresses its block again (BenchmarkGetLog/flushed=true: 16 µs with
	// the default, under 5 µs with this).
	blockCacheBytes = 64 << 20
)

// openPebble opens the database in dir with pebbleOptions.
func openPebble(dir string, fs vfs.FS, logger *slog.Logger) (*pebble.DB, error) {
	cache := pebble.NewCache(blockCacheBytes)
	// The DB takes its own reference; this one is only for Open.
	defer cache.Unref()
	return pebble.Open(dir, pebbleOptions(fs, cache, logger))
}

// pebbleOptions returns pebble's defaults with the memory settings above
// and with pebble's logging sent to logger: routine chatter at Debug,
// trouble at Warn or Error.
func pebbleOptions(fs vfs.FS, cache *pebble.Cache, logger *slog.Logger) *pebble.Options {
	return &pebble.Options{
		FS:           fs,
		Cache:        cache,
		MemTableSize: memTableBytes,
		Logger:       pebbleLogger{logger: logger},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				logger.Error("pebble background error", "err", err)
			},
			DiskSlow: func(info pebble.DiskSlowInfo) {
				logger.Warn("pebble: disk slow", "info", info.String())
			},
			WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
				logger.Warn("pebble: write stall", "reason", info.Reason)
			},
			WriteStallEnd: func() {
				logger.Info("pebble: write stall over")
			},
		},
	}
}

// pebbleLogger forwards pebble's log lines to slog.
type pebbleLogger struct {
	logger *slog.Logger
}

var _ pebble.Logger = pebbleLogger{}

// Infof logs at Debug: pebble reports routine work (WAL recycling, table
// creation, ...) through it.
func (l pebbleLogger) Infof(format string, args ...any) {
	// Skip the formatting when nobody listens.
	if l.logger.Enabled(context.Background(), slog.LevelDebug) {
		l.logger.Debug(fmt.Sprintf(format, args...), "source", "pebble")
	}
}

// Fatalf is how pebble reports a broken invariant; it must not return.
// Pebble's own default exits the process. Panicking instead also stops
// every write, and leaves a stack trace and the choice of exit to the
// program.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.logger.Error(msg, "source", "pebble")
	panic("raftstore: pebble fatal error: " + msg)
}
